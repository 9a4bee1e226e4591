// adamw_update: one fused pass over the span. Bias corrections are computed in double once
// per call; the per-element work is float, in blocks of 16 that vectorize.
#include "dtrain/optim/adamw.h"
#include "dtrain/core/cpu_dispatch.h"

#include <algorithm>
#include <cmath>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "dtrain/core/check.h"

namespace dtrain::optim {

namespace {

constexpr int kBlock = 16;

// x[k] = sqrt(x[k]) for one block. IEEE sqrt is correctly rounded, so every path gives the
// same bits; the intrinsics exist because without -fno-math-errno GCC will not vectorize a
// loop that calls sqrt. (AVX-512's _mm512_sqrt_ps trips GCC 12's -Wmaybe-uninitialized.)
inline void sqrt_block(float* x) {
#if defined(__AVX__)
  for (int k = 0; k < kBlock; k += 8)
    _mm256_storeu_ps(x + k, _mm256_sqrt_ps(_mm256_loadu_ps(x + k)));
#elif defined(__SSE2__)
  for (int k = 0; k < kBlock; k += 4) _mm_storeu_ps(x + k, _mm_sqrt_ps(_mm_loadu_ps(x + k)));
#else
  for (int k = 0; k < kBlock; ++k) x[k] = std::sqrt(x[k]);
#endif
}

}  // namespace

DTRAIN_MULTIVERSION void adamw_update(std::span<float> params, std::span<const float> grads,
                                      std::span<float> m, std::span<float> v, const AdamWConfig& c,
                                      float lr, int64_t step, float grad_scale) {
  DTRAIN_CHECK(
      grads.size() == params.size() && m.size() == params.size() && v.size() == params.size(),
      "adamw_update: spans differ in length (params ", params.size(), ", grads ", grads.size(),
      ", m ", m.size(), ", v ", v.size(), ")");
  DTRAIN_CHECK(step >= 1, "adamw_update: step counts from 1 (got ", step, ")");
  const auto bias1 = static_cast<float>(1.0 - std::pow(static_cast<double>(c.beta1), step));
  const auto bias2 = static_cast<float>(1.0 - std::pow(static_cast<double>(c.beta2), step));
  const float b1 = c.beta1, b2 = c.beta2, eps = c.eps, wd = c.weight_decay;
  float* p = params.data();
  const float* g = grads.data();
  float* mp = m.data();
  float* vp = v.data();
  const auto n = static_cast<int64_t>(params.size());
  // Per element: g' = g * grad_scale; m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2;
  // p -= lr * ((m / bias1) / (sqrt(v / bias2) + eps) + wd * p).
  auto moments = [&](int64_t i) {
    const float gi = g[i] * grad_scale;
    mp[i] = b1 * mp[i] + (1.0f - b1) * gi;
    vp[i] = b2 * vp[i] + (1.0f - b2) * gi * gi;
  };
  auto apply = [&](int64_t i, float root) {
    p[i] -= lr * ((mp[i] / bias1) / (root + eps) + wd * p[i]);
  };
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    float root[kBlock];
    for (int k = 0; k < kBlock; ++k) {
      moments(i + k);
      root[k] = vp[i + k] / bias2;
    }
    sqrt_block(root);
    for (int k = 0; k < kBlock; ++k) apply(i + k, root[k]);
  }
  for (; i < n; ++i) {
    moments(i);
    apply(i, std::sqrt(vp[i] / bias2));
  }
}

AdamW::AdamW(int64_t count, const AdamWConfig& config, MemoryTracker* tracker)
    : config_(config),
      m_(count, MemoryTag::optimizer, tracker),
      v_(count, MemoryTag::optimizer, tracker) {}

void AdamW::step(std::span<float> params, std::span<const float> grads, float lr,
                 float grad_scale) {
  advance();
  update(params, grads, 0, lr, grad_scale);
}

void AdamW::update(std::span<float> params, std::span<const float> grads, int64_t offset, float lr,
                   float grad_scale) {
  DTRAIN_CHECK(offset >= 0 && offset + static_cast<int64_t>(params.size()) <= m_.size(),
               "AdamW::update: piece [", offset, ", ", offset + static_cast<int64_t>(params.size()),
               ") is outside the optimizer's ", m_.size(), " elements");
  const auto at = static_cast<size_t>(offset);
  adamw_update(params, grads, m_.span().subspan(at, params.size()),
               v_.span().subspan(at, params.size()), config_, lr, step_, grad_scale);
}

void AdamW::update_mixed(std::span<float> master, std::span<const bf16> grads,
                         std::span<bf16> params, int64_t offset, float lr, float grad_scale) {
  DTRAIN_CHECK(grads.size() == master.size() && params.size() == master.size(),
               "AdamW::update_mixed: spans differ in length (master ", master.size(), ", grads ",
               grads.size(), ", params ", params.size(), ")");
  // In pieces of a stack buffer's length: widen the gradients, update, round the result.
  constexpr size_t kPiece = 1024;
  float widened[kPiece];
  for (size_t at = 0; at < master.size(); at += kPiece) {
    const size_t n = std::min(kPiece, master.size() - at);
    to_float(grads.data() + at, widened, static_cast<int64_t>(n));
    update(master.subspan(at, n), std::span<const float>(widened, n),
           offset + static_cast<int64_t>(at), lr, grad_scale);
    to_bf16(master.data() + at, params.data() + at, static_cast<int64_t>(n));
  }
}

}  // namespace dtrain::optim
