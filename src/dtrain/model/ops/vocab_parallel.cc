// Vocabulary-parallel embedding gathers/scatter-adds and the cross-entropy whose softmax
// statistics are reduced across the TP group.
#include "dtrain/model/ops/vocab_parallel.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "dtrain/model/ops/vector_math.h"

namespace dtrain::model {
namespace {

// The columns of this rank that are real vocabulary entries (the rest is padding).
int64_t real_columns(int64_t V, int64_t vocab_begin, int64_t V_local) {
  return std::clamp<int64_t>(V - vocab_begin, 0, V_local);
}

}  // namespace

void vocab_embedding_forward(float* out, const int32_t* tokens, const float* wte_local,
                             int64_t vocab_begin, int64_t V_local, int64_t BT, int64_t C) {
  for (int64_t r = 0; r < BT; ++r) {
    float* o = out + r * C;
    const int64_t local = static_cast<int64_t>(tokens[r]) - vocab_begin;
    if (local >= 0 && local < V_local) {
      std::copy(wte_local + local * C, wte_local + (local + 1) * C, o);
    } else {
      std::fill(o, o + C, 0.0f);
    }
  }
}

void vocab_embedding_backward(float* dwte_local, float* dwpe, const float* dout,
                              const int32_t* tokens, int64_t vocab_begin, int64_t V_local,
                              int64_t B, int64_t T, int64_t C) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const float* d = dout + (b * T + t) * C;
      const int64_t local = static_cast<int64_t>(tokens[b * T + t]) - vocab_begin;
      if (local >= 0 && local < V_local) {
        float* de = dwte_local + local * C;
        for (int64_t i = 0; i < C; ++i) de[i] += d[i];
      }
      if (dwpe == nullptr) continue;  // rotary positions: no table
      float* dp = dwpe + t * C;
      for (int64_t i = 0; i < C; ++i) dp[i] += d[i];
    }
  }
}

float vocab_parallel_crossentropy_forward(float* z_all, float* losses, const int32_t* targets,
                                          int64_t BT, int64_t vocab_begin, int64_t V_local,
                                          int64_t V, TensorParallelHooks& tp, const Compute& cx) {
  const int64_t real = real_columns(V, vocab_begin, V_local);
  std::vector<float> row_max(static_cast<size_t>(BT));
  std::vector<float> sums(static_cast<size_t>(2 * BT));  // [sum exp | target logit - max]
  for (int64_t r = 0; r < BT; ++r) {
    row_max[static_cast<size_t>(r)] = real > 0 ? max_of(z_all + r * V_local, real) : -FLT_MAX;
  }
  tp.all_reduce_max(row_max.data(), BT);
  parallel_ranges(cx.team_for(BT * V_local, 32768), BT, 1, [&](Range rows) {
    for (int64_t r = rows.begin; r < rows.end; ++r) {
      float* z = z_all + r * V_local;
      const float m = row_max[static_cast<size_t>(r)];
      const int64_t local = static_cast<int64_t>(targets[r]) - vocab_begin;
      // read before z becomes exp(z - m)
      sums[static_cast<size_t>(BT + r)] = local >= 0 && local < real ? z[local] - m : 0.0f;
      for (int64_t i = 0; i < real; ++i) z[i] = exp_approx(z[i] - m);
      for (int64_t i = real; i < V_local; ++i) z[i] = 0.0f;
      sums[static_cast<size_t>(r)] = sum(z, real);
    }
  });
  tp.all_reduce_sum(sums.data(), 2 * BT);
  double total = 0.0;
  for (int64_t r = 0; r < BT; ++r) {
    const float s = sums[static_cast<size_t>(r)];
    const float inv = 1.0f / s;
    float* p = z_all + r * V_local;
    for (int64_t i = 0; i < real; ++i) p[i] *= inv;
    losses[r] = std::log(s) - sums[static_cast<size_t>(BT + r)];
    total += losses[r];
  }
  return static_cast<float>(total / static_cast<double>(BT));
}

void vocab_parallel_crossentropy_backward(float* probs, const int32_t* targets, float dloss,
                                          int64_t BT, int64_t vocab_begin, int64_t V_local) {
  const float scale = dloss / static_cast<float>(BT);
  for (int64_t r = 0; r < BT; ++r) {
    float* p = probs + r * V_local;
    for (int64_t i = 0; i < V_local; ++i) p[i] *= scale;  // padded columns stay 0
    const int64_t local = static_cast<int64_t>(targets[r]) - vocab_begin;
    if (local >= 0 && local < V_local) p[local] -= scale;
  }
}

}  // namespace dtrain::model
