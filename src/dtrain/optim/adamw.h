// AdamW (Loshchilov and Hutter 2019) with bias correction and decoupled weight decay, as
// torch.optim.AdamW: p -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p). It works on
// any contiguous span, so ZeRO runs it on one rank's shard of the flat parameter buffer.
#pragma once

#include <cstdint>
#include <span>

#include "dtrain/core/bf16.h"
#include "dtrain/core/buffer.h"

namespace dtrain::optim {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // applied to every element of the span (as the PyTorch peer)
};

// One update of params from grads * grad_scale (grad_scale carries gradient clipping).
// `step` counts updates from 1 (bias corrections 1 - beta^step). m and v are the moment
// estimates of the same elements. All four spans have the same length.
void adamw_update(std::span<float> params, std::span<const float> grads, std::span<float> m,
                  std::span<float> v, const AdamWConfig& config, float lr, int64_t step,
                  float grad_scale = 1.0f);

// Owns the moments of `count` elements (tag optimizer) and the step counter.
class AdamW {
 public:
  AdamW(int64_t count, const AdamWConfig& config, MemoryTracker* tracker);

  // Advances the step counter and updates params (count elements) in place.
  void step(std::span<float> params, std::span<const float> grads, float lr,
            float grad_scale = 1.0f);
  // The same step in pieces (e.g. one per thread): advance() once, then update() on disjoint
  // pieces; params and grads are the piece that starts at element `offset`. Same bits as step().
  void advance() { ++step_; }
  void update(std::span<float> params, std::span<const float> grads, int64_t offset, float lr,
              float grad_scale = 1.0f);
  // Mixed precision's update of the same piece: the fp32 master weights from bf16 gradients
  // (widened exactly), then `params` = the master rounded to bf16 (what the next forward reads).
  // The master gets the bits update() gives it from the widened gradients.
  void update_mixed(std::span<float> master, std::span<const bf16> grads, std::span<bf16> params,
                    int64_t offset, float lr, float grad_scale = 1.0f);

  const AdamWConfig& config() const { return config_; }
  int64_t count() const { return m_.size(); }
  int64_t step_count() const { return step_; }
  // State, for checkpoints.
  std::span<float> m() { return m_.span(); }
  std::span<float> v() { return v_.span(); }
  void set_step_count(int64_t step) { step_ = step; }

 private:
  AdamWConfig config_;
  Buffer<float> m_;  // (count) first moment
  Buffer<float> v_;  // (count) second moment
  int64_t step_ = 0;
};

}  // namespace dtrain::optim
