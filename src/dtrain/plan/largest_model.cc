// largest_model_shape: bisection over a shape family's width with the planner's memory.
#include "dtrain/plan/largest_model.h"

#include "dtrain/core/check.h"

namespace dtrain::plan {
namespace {

// Widths past this are no GPU's (2^20 channels): the search's upper end.
constexpr int64_t kWidestHidden = int64_t{1} << 20;

int64_t kv_group(const ModelShape& m) {
  return m.heads / m.kv_heads_or_heads();
}

}  // namespace

ModelShape widen(const ModelShape& family, int64_t heads) {
  DTRAIN_CHECK(family.heads > 0 && family.hidden % family.heads == 0,
               "the shape family needs --hidden divisible by --heads, got ", family.hidden, " and ",
               family.heads);
  const int64_t group = kv_group(family);
  DTRAIN_CHECK(heads > 0 && heads % group == 0, "widen: ", heads, " heads do not make whole ",
               group, "-head KV groups");
  ModelShape m = family;
  const int64_t head_size = family.hidden / family.heads;
  m.heads = heads;
  m.hidden = heads * head_size;
  m.kv_heads = family.kv_heads > 0 ? heads / group : 0;
  if (family.ffn_hidden > 0) {
    // Keep the family's ratio, rounded up to a multiple of 256.
    const long double ratio = static_cast<long double>(family.ffn_hidden) / family.hidden;
    const auto ffn = static_cast<int64_t>(ratio * static_cast<long double>(m.hidden));
    m.ffn_hidden = (ffn + 255) / 256 * 256;
  }
  m.name = family.name + "-family";
  return m;
}

LargestShape largest_model_shape(const PlanInput& input, const Layout& layout) {
  DTRAIN_CHECK(input.model.params_override == 0,
               "--params fixes the parameter count; the largest model of a shape family grows "
               "its width: drop --params");
  LargestShape best;
  best.heads_step = layout.tp * kv_group(input.model);
  const int64_t head_size = input.model.hidden / std::max<int64_t>(1, input.model.heads);
  auto plan_of = [&](int64_t k) {
    PlanInput in = input;
    in.model = widen(input.model, k * best.heads_step);
    validate(in);
    const std::string error = layout_error(in, layout);
    DTRAIN_CHECK(error.empty(), error);
    return std::make_pair(in.model, evaluate(in, layout).memory);
  };
  auto fits = [&](int64_t k) { return plan_of(k).second.fits(); };
  const int64_t k_max = std::max<int64_t>(1, kWidestHidden / (best.heads_step * head_size));
  int64_t lo = 0, hi = 1;
  while (hi <= k_max && fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  if (hi > k_max) {
    hi = k_max + 1;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  if (lo > 0) {
    auto [model, memory] = plan_of(lo);
    best.model = model;
    best.memory = memory;
    best.params = param_count(model);
  } else {
    best.model = input.model;
    best.model.hidden = 0;
  }
  if (hi <= k_max) best.too_wide = plan_of(hi).second;
  return best;
}

}  // namespace dtrain::plan
