// The MoE routing report, table and JSON.
#include "dtrain/report/moe_report.h"

#include <algorithm>
#include <numeric>

#include "dtrain/report/text_table.h"

namespace dtrain::train {

double expert_spread(const std::vector<int64_t>& t) {
  if (t.empty()) return 0;
  const double sum = static_cast<double>(std::accumulate(t.begin(), t.end(), int64_t{0}));
  if (sum <= 0) return 0;
  const auto [lo, hi] = std::minmax_element(t.begin(), t.end());
  return static_cast<double>(*hi - *lo) / (sum / static_cast<double>(t.size()));
}

void print_moe_report(std::ostream& out, const model::MoeConfig& m,
                      const std::vector<MoeStepRow>& steps) {
  out << "\nRouting (E=" << m.experts << " k=" << m.top_k << " every " << m.every << " block(s), "
      << (m.capacity_factor > 0 ? "capacity factor " + fixed(m.capacity_factor, 2)
                                : std::string("dropless"))
      << ", aux-loss-coef " << m.aux_loss_coef << ")\n";
  out << "  step   aux loss  dropped  spread  tokens per expert\n";
  // Every step of a short run; of a long one about 20 rows, the last always.
  const size_t stride = std::max<size_t>(1, steps.size() / 20);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i % stride != 0 && i + 1 != steps.size()) continue;
    const MoeStepRow& r = steps[i];
    std::string tokens;
    for (int64_t t : r.expert_tokens) {
      if (!tokens.empty()) tokens.push_back(' ');
      tokens.append(std::to_string(t));
    }
    out << "  " << right_aligned(std::to_string(r.step), 4)
        << right_aligned(fixed(r.aux_loss, 4), 11) << right_aligned(std::to_string(r.dropped), 9)
        << right_aligned(fixed(expert_spread(r.expert_tokens), 2), 8) << "  " << tokens << "\n";
  }
  out << "  (tokens per expert: assignments kept, summed over the MoE blocks and the global batch; "
         "they sum to tokens x k x blocks - dropped; spread = (max - min) / mean)\n";
}

nlohmann::json moe_report_to_json(const model::MoeConfig& m, const std::vector<MoeStepRow>& steps) {
  nlohmann::json rows = nlohmann::json::array();
  for (const MoeStepRow& r : steps) {
    rows.push_back({{"step", r.step},
                    {"aux_loss", r.aux_loss},
                    {"expert_tokens", r.expert_tokens},
                    {"assignments", r.assignments},
                    {"dropped", r.dropped},
                    {"spread", expert_spread(r.expert_tokens)}});
  }
  return {{"experts", m.experts},
          {"top_k", m.top_k},
          {"every", m.every},
          {"capacity_factor", m.capacity_factor},
          {"aux_loss_coef", m.aux_loss_coef},
          {"steps", rows}};
}

}  // namespace dtrain::train
