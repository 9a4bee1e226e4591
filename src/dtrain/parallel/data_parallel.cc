// gpt_grad_units, make_buckets and the overlap measures.
#include "dtrain/parallel/data_parallel.h"

#include <algorithm>

#include "dtrain/core/check.h"

namespace dtrain::parallel {

std::vector<GradUnit> gpt_grad_units(const model::ParamTable& table, int64_t layers) {
  auto range = [&](std::string name, int first, int last) {
    const model::ParamTensor& a = table[static_cast<size_t>(first)];
    const model::ParamTensor& b = table[static_cast<size_t>(last)];
    return GradUnit{std::move(name), a.offset, b.offset + b.count - a.offset};
  };
  std::vector<GradUnit> units;
  units.push_back(range("lnf", model::gpt_lnf_w_index(layers), model::gpt_lnf_b_index(layers)));
  for (int64_t l = layers - 1; l >= 0; --l) {
    units.push_back(range("h." + std::to_string(l),
                          model::gpt_layer_param(l, model::LayerParam::ln1_w),
                          model::gpt_layer_param(l, model::LayerParam::fc_proj_b)));
  }
  units.push_back(range("embeddings", model::kWteIndex, model::kWpeIndex));
  // Each unit ends where the previous one (in backward order) begins; together they tile the
  // buffer. Both are what makes a bucket one contiguous range.
  int64_t end = table.total_count();
  for (const GradUnit& u : units) {
    DTRAIN_CHECK(u.offset + u.count == end, "gpt_grad_units: unit ", u.name, " ends at ",
                 u.offset + u.count, ", expected ", end, " (the table is not in GPT order)");
    end = u.offset;
  }
  DTRAIN_CHECK(end == 0, "gpt_grad_units: the units leave [0, ", end, ") uncovered");
  return units;
}

std::vector<Bucket> make_buckets(std::span<const GradUnit> units, int64_t bucket_bytes,
                                 int64_t bytes_per_element) {
  DTRAIN_CHECK(bucket_bytes > 0, "--bucket-size must be positive (got ", bucket_bytes, " bytes)");
  std::vector<Bucket> buckets;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    const GradUnit& unit = units[static_cast<size_t>(u)];
    const bool open = !buckets.empty() && buckets.back().count * bytes_per_element < bucket_bytes;
    if (!open) buckets.push_back({u, u, unit.offset + unit.count, 0});
    Bucket& b = buckets.back();
    b.last_unit = u;
    b.offset = unit.offset;
    b.count += unit.count;
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
