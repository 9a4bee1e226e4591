// Cross-entropy: max-shifted softmax per row; the loss is log(sum) - (logit[target] - max),
// which stays accurate when the target's probability underflows.
#include "dtrain/model/ops/crossentropy.h"
#include "dtrain/core/cpu_dispatch.h"

#include <cmath>

#include "dtrain/model/ops/vector_math.h"

namespace dtrain::model {
namespace {

DTRAIN_MULTIVERSION void crossentropy_forward_rows(float* probs, float* losses, const float* logits,
                                                   const int32_t* targets, int64_t V, Range rows) {
  {
    for (int64_t r = rows.begin; r < rows.end; ++r) {
      const float* z = logits + r * V;
      float* p = probs + r * V;
      const float m = max_of(z, V);
      const float target_shifted = z[targets[r]] - m;  // read before p (may alias z) is written
      for (int64_t i = 0; i < V; ++i) p[i] = exp_approx(z[i] - m);
      const float s = sum(p, V);
      const float inv = 1.0f / s;
      for (int64_t i = 0; i < V; ++i) p[i] *= inv;
      losses[r] = std::log(s) - target_shifted;
    }
  }
}

}  // namespace

float crossentropy_softmax_forward(float* probs, float* losses, const float* logits,
                                   const int32_t* targets, int64_t BT, int64_t V,
                                   const Compute& cx) {
  parallel_ranges(cx.team_for(BT * V, 32768), BT, 1, [&](Range rows) {
    crossentropy_forward_rows(probs, losses, logits, targets, V, rows);
  });
  double total = 0.0;
  for (int64_t r = 0; r < BT; ++r) total += losses[r];
  return static_cast<float>(total / static_cast<double>(BT));
}

DTRAIN_MULTIVERSION void crossentropy_softmax_backward(float* dlogits, const float* probs,
                                                       const int32_t* targets, float dloss,
                                                       int64_t BT, int64_t V) {
  const float scale = dloss / static_cast<float>(BT);
  for (int64_t r = 0; r < BT; ++r) {
    const float* p = probs + r * V;
    float* d = dlogits + r * V;
    for (int64_t i = 0; i < V; ++i) d[i] += scale * p[i];
    d[targets[r]] -= scale;
  }
}

void crossentropy_softmax_backward_inplace(float* probs, const int32_t* targets, float dloss,
                                           int64_t BT, int64_t V, const Compute& cx) {
  const float scale = dloss / static_cast<float>(BT);
  parallel_ranges(cx.team_for(BT * V, 32768), BT, 1, [&](Range rows) {
    for (int64_t r = rows.begin; r < rows.end; ++r) {
      float* p = probs + r * V;
      for (int64_t i = 0; i < V; ++i) p[i] *= scale;
      p[targets[r]] -= scale;
    }
  });
}

}  // namespace dtrain::model
