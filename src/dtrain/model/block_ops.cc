// The block pieces of block_ops.h.
#include "dtrain/model/block_ops.h"

#include "dtrain/model/ops/gelu.h"
#include "dtrain/model/ops/layernorm.h"
#include "dtrain/model/ops/matmul.h"
#include "dtrain/model/ops/rmsnorm.h"
#include "dtrain/model/ops/swiglu.h"

namespace dtrain::model::block {

void matmul_backward_or_keep(float* dinp, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* weight, int64_t BT, int64_t in,
                             int64_t out, float* kept, const Compute& cx) {
  if (kept == nullptr) {
    matmul_backward(dinp, dweight, dbias, dout, inp, weight, BT, in, out, cx);
    return;
  }
  matmul_backward_input(dinp, dout, weight, BT, in, out, cx);
  std::memcpy(kept, dout, static_cast<size_t>(BT * out) * sizeof(float));
}

void norm_forward(const GptConfig& g, float* out, float* mean, float* rstd, const float* in,
                  const float* w, const float* b, int64_t B, int64_t T, int64_t C,
                  const Compute& cx) {
  if (g.llama()) {
    rmsnorm_forward(out, rstd, in, w, B * T, C, g.norm_eps, cx);
  } else {
    layernorm_forward(out, mean, rstd, in, w, b, B, T, C, cx);
  }
}

void norm_backward(const GptConfig& g, float* dinp, float* dw, float* db, const float* dout,
                   const float* in, const float* w, const float* mean, const float* rstd, int64_t B,
                   int64_t T, int64_t C) {
  if (g.llama()) {
    rmsnorm_backward(dinp, dw, dout, in, w, rstd, B * T, C);
  } else {
    layernorm_backward(dinp, dw, db, dout, in, w, mean, rstd, B, T, C);
  }
}

Widths widths(const GptConfig& g, int tp) {
  const int64_t F = g.ffn();
  return {(g.heads / tp + 2 * g.kv_heads_per_tp_rank(tp)) * g.head_size(),
          (g.llama() ? 2 * F : F) / tp, F / tp};
}

void activation_forward(const GptConfig& g, float* out, const float* fc, int64_t rows,
                        const Widths& w, const Compute& cx) {
  if (g.llama()) {
    swiglu_forward(out, fc, rows, w.act, cx);
  } else {
    gelu_forward(out, fc, rows * w.act, cx);
  }
}

void activation_backward(const GptConfig& g, float* dfc, const float* fc, const float* dout,
                         int64_t rows, const Widths& w, const Compute& cx) {
  if (g.llama()) {
    swiglu_backward(dfc, fc, dout, rows, w.act, cx);
  } else {
    gelu_backward(dfc, fc, dout, rows * w.act, cx);
  }
}

}  // namespace dtrain::model::block
