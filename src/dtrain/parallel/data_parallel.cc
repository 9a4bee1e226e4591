// StageUnits, make_buckets and the overlap measures.
#include "dtrain/parallel/data_parallel.h"

#include <algorithm>
#include <string>

#include "dtrain/core/check.h"
#include "dtrain/cost/comm_model.h"

namespace dtrain::parallel {

StageUnits::StageUnits(const model::ParamTable& table, const model::GptStage& stage) {
  auto range = [&](std::string name, std::string_view first, std::string_view last) {
    const model::ParamTensor& a = table[static_cast<size_t>(table.index_of(first))];
    const model::ParamTensor& b = table[static_cast<size_t>(table.index_of(last))];
    return GradUnit{std::move(name), a.offset, b.offset + b.count - a.offset};
  };
  int64_t layers = 0;
  for (const model::LayerRange& c : stage.chunks) layers = std::max(layers, c.end());
  block_unit_.assign(static_cast<size_t>(layers), -1);
  if (stage.head) {
    final_norm_ = static_cast<int>(units_.size());
    // The final norm, with Llama's untied head after it (GPT's LayerNorm has a bias).
    units_.push_back(range("lnf", "lnf.w",
                           table.contains("lm_head.w") ? "lm_head.w"
                           : table.contains("lnf.b")   ? "lnf.b"
                                                       : "lnf.w"));
  }
  for (int64_t l = layers - 1; l >= 0; --l) {
    if (!stage.has_layer(l)) continue;
    block_unit_[static_cast<size_t>(l)] = static_cast<int>(units_.size());
    const std::string h = str("h.", l, ".");
    // A block's tensors run from ln1.w to its last (mlp.proj.b, an MoE block's router, or a
    // Llama block's down projection, which has no bias).
    const std::string last = table.contains(h + "moe.router.w") ? h + "moe.router.w"
                             : table.contains(h + "mlp.proj.b") ? h + "mlp.proj.b"
                                                                : h + "mlp.proj.w";
    units_.push_back(range(str("h.", l), h + "ln1.w", last));
  }
  if (stage.embedding || table.contains("wte")) {
    embeddings_ = static_cast<int>(units_.size());
    // wte and wpe on the first stage (wte alone without learned positions), the tied head's wte
    // copy on the last.
    units_.push_back(stage.embedding
                         ? range("embeddings", "wte", table.contains("wpe") ? "wpe" : "wte")
                         : range("wte", "wte", "wte"));
  }
  // Each unit ends where the previous one (in backward order) begins; together they tile the
  // buffer. Both are what makes a bucket one contiguous range.
  int64_t end = table.total_count();
  for (const GradUnit& u : units_) {
    DTRAIN_CHECK(u.offset + u.count == end, "StageUnits: unit ", u.name, " ends at ",
                 u.offset + u.count, ", expected ", end, " (the table is not in GPT order)");
    end = u.offset;
  }
  DTRAIN_CHECK(end == 0, "StageUnits: the units leave [0, ", end, ") uncovered");
}

int StageUnits::block(int64_t layer) const {
  const int u = layer >= 0 && layer < static_cast<int64_t>(block_unit_.size())
                    ? block_unit_[static_cast<size_t>(layer)]
                    : -1;
  DTRAIN_CHECK(u >= 0, "StageUnits: block ", layer, " is not on this stage");
  return u;
}

std::vector<Bucket> make_buckets(std::span<const GradUnit> units, int64_t bucket_bytes,
                                 int64_t bytes_per_element) {
  std::vector<int64_t> counts;
  for (const GradUnit& unit : units) counts.push_back(unit.count);
  std::vector<Bucket> buckets;
  // Units in backward order lie at decreasing offsets: a bucket starts at its last unit's.
  for (const plan::UnitRun& r : plan::gradient_buckets(counts, bucket_bytes, bytes_per_element)) {
    buckets.push_back({r.first, r.last, units[static_cast<size_t>(r.last)].offset, r.count});
  }
  return buckets;
}

int bucket_of(std::span<const Bucket> buckets, int unit) {
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (unit >= buckets[b].first_unit && unit <= buckets[b].last_unit) return static_cast<int>(b);
  }
  throw Error(str("bucket_of: unit ", unit, " is in no bucket"));
}

double hidden_us(std::span<const TimeInterval> comm, std::span<const TimeInterval> compute) {
  double hidden = 0;
  for (const TimeInterval& c : comm) {
    for (const TimeInterval& w : compute) {
      hidden += std::max(0.0, std::min(c.end_us, w.end_us) - std::max(c.begin_us, w.begin_us));
    }
  }
  return hidden;
}

double overlap_share(std::span<const TimeInterval> comm, std::span<const TimeInterval> compute) {
  double total = 0;
  for (const TimeInterval& c : comm) total += c.length_us();
  return total > 0 ? hidden_us(comm, compute) / total : 0.0;
}

}  // namespace dtrain::parallel
