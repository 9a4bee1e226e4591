// model_state_bytes and zero3_gathered_bytes: the per-stage sums written out in memory_model.h.
#include "dtrain/cost/memory_model.h"

#include <algorithm>
#include <cmath>

#include "dtrain/core/check.h"

namespace dtrain::plan {

std::optional<StateBytes> parse_precision(std::string_view name) {
  // bf16: train's --precision bf16 keeps the same 2 + 2 + 12 bytes (one vocabulary for both).
  if (name == "mixed" || name == "bf16") return kMixedPrecisionAdam;
  if (name == "megatron") return kMegatronMixedPrecisionAdam;
  if (name == "fp32") return kFp32Adam;
  return std::nullopt;
}

std::string_view precision_names() {
  return "mixed or bf16 (2+2+12), megatron (2+4+12), fp32 (4+4+8)";
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

int64_t unit_weights_peak_bytes(const ChunkUnitCounts& chunk, UnitWeightBytes bytes) {
  DTRAIN_CHECK(bytes.gathered >= 0 && bytes.working >= 0,
               "unit_weights_peak_bytes: bytes per parameter must be >= 0");
  const int64_t g = bytes.gathered, w = bytes.working;
  // Held while computing: the working copy when there is one, else the gathered weights.
  const int64_t running = w > 0 ? w : g;
  int64_t held = 0, peak = 0;
  auto add = [&](int64_t b) {
    held += b;
    peak = std::max(peak, held);
  };
  auto prefetch = [&](int64_t n) { add(g * n); };
  // A prefetched unit's gathered copy is already held; the working copy is made beside it and
  // the gathered one freed once converted.
  auto acquire = [&](int64_t n, bool prefetched) {
    if (!prefetched) add(g * n);
    add(w * n);
    if (w > 0) held -= g * n;
  };
  auto release = [&](int64_t n) { held -= running * n; };
  const std::vector<int64_t>& blocks = chunk.blocks;
  const size_t n = blocks.size();
  const bool embeddings = chunk.embedding || chunk.head;

  // Forward.
  if (embeddings) prefetch(chunk.embeddings);
  if (n > 0) prefetch(blocks[0]);
  if (embeddings) acquire(chunk.embeddings, true);
  for (size_t i = 0; i < n; ++i) {
    acquire(blocks[i], true);
    if (i + 1 < n) {
      prefetch(blocks[i + 1]);
    } else if (chunk.head) {
      prefetch(chunk.final_norm);
    }
    release(blocks[i]);
  }
  if (chunk.head) {
    acquire(chunk.final_norm, n > 0);
    release(chunk.final_norm);
  }
  if (embeddings) release(chunk.embeddings);
  DTRAIN_CHECK(held == 0, "unit_weights_peak_bytes: the forward left ", held, " bytes held");

  // Backward (and a split backward's W, which reruns the same walk under full recompute).
  if (chunk.head) {
    prefetch(chunk.final_norm);
    prefetch(chunk.embeddings);
  }
  if (n > 0) prefetch(blocks[n - 1]);
  if (chunk.head) {
    acquire(chunk.final_norm, true);
    acquire(chunk.embeddings, true);
    release(chunk.embeddings);
    release(chunk.final_norm);
  }
  for (size_t i = n; i-- > 0;) {
    acquire(blocks[i], true);
    if (i > 0) prefetch(blocks[i - 1]);
    release(blocks[i]);
  }
  return peak;
}

}  // namespace dtrain::plan
