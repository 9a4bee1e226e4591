// model_state_bytes and zero3_gathered_bytes: the per-stage sums written out in memory_model.h.
#include "dtrain/plan/memory_model.h"

#include <cmath>

#include "dtrain/core/check.h"

namespace dtrain::plan {

std::optional<StateBytes> parse_precision(std::string_view name) {
  if (name == "mixed") return kMixedPrecisionAdam;
  if (name == "megatron") return kMegatronMixedPrecisionAdam;
  if (name == "fp32") return kFp32Adam;
  return std::nullopt;
}

std::string_view precision_names() {
  return "mixed (2+2+12), megatron (2+4+12), fp32 (4+4+8)";
}

int64_t shard_count(int64_t count, int ranks) {
  DTRAIN_CHECK(ranks >= 1, "shard_count: ranks must be >= 1, got ", ranks);
  DTRAIN_CHECK(count >= 0, "shard_count: count must be >= 0, got ", count);
  return (count + ranks - 1) / ranks;
}

ModelStateBytes model_state_bytes(int64_t params, int dp, int zero_stage, StateBytes bytes) {
  DTRAIN_CHECK(dp >= 1, "--dp must be >= 1, got ", dp);
  DTRAIN_CHECK(zero_stage >= 0 && zero_stage <= 3, "--zero must be 0, 1, 2 or 3, got ", zero_stage);
  DTRAIN_CHECK(params >= 0, "model_state_bytes: params must be >= 0, got ", params);
  const int64_t shard = shard_count(params, dp);
  ModelStateBytes m;
  m.params = bytes.param * (zero_stage >= 3 ? shard : params);
  m.grads = bytes.grad * (zero_stage >= 2 ? shard : params);
  m.optimizer = bytes.optimizer * (zero_stage >= 1 ? shard : params);
  return m;
}

int64_t largest_model_params(double memory_bytes, int dp, int mp, int zero_stage,
                             StateBytes bytes) {
  DTRAIN_CHECK(mp >= 1, "model-parallel ranks must be >= 1, got ", mp);
  DTRAIN_CHECK(std::isfinite(memory_bytes) && memory_bytes > 0,
               "largest_model_params: memory must be positive and finite, got ", memory_bytes);
  auto fits = [&](int64_t per_rank) {
    return static_cast<double>(model_state_bytes(per_rank, dp, zero_stage, bytes).total()) <=
           memory_bytes;
  };
  // Per model-parallel rank: the largest count that fits (the states grow with it), by
  // bisection between one that fits and one that does not.
  int64_t lo = 0, hi = 1;
  while (fits(hi)) {
    lo = hi;
    DTRAIN_CHECK(hi <= (int64_t{1} << 52), "largest_model_params: ", memory_bytes,
                 " bytes hold more than 2^52 parameters");
    hi *= 2;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo * mp;
}

int64_t zero3_gathered_bytes(int64_t layer_params, StateBytes bytes, int prefetch_layers) {
  DTRAIN_CHECK(prefetch_layers >= 0, "zero3_gathered_bytes: prefetch_layers must be >= 0, got ",
               prefetch_layers);
  return (1 + prefetch_layers) * layer_params * bytes.param + layer_params * bytes.grad;
}

}  // namespace dtrain::plan
