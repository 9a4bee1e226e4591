// The block's pieces both of GptModel's pass files share (gpt.cc, gpt_sp.cc): the family's norm
// (GPT's LayerNorm or Llama's RMSNorm), the products' widths on one TP rank, and a linear's
// backward that a split (ZB-H1) backward halves.
#pragma once

#include <cstdint>
#include <cstring>

#include "dtrain/model/gemm.h"
#include "dtrain/model/gpt_config.h"

namespace dtrain::model::block {

inline void zero(float* p, int64_t count) {
  std::memset(p, 0, static_cast<size_t>(count) * sizeof(float));
}

// One linear's backward over BT rows: fused (matmul_backward) when `kept` is null; else only its
// input half, with the output gradient copied to `kept` for the weight half later (a split
// backward's W: matmul_backward is exactly its _input and _weight halves).
void matmul_backward_or_keep(float* dinp, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* weight, int64_t BT, int64_t in,
                             int64_t out, float* kept, const Compute& cx);

// The block's norm: GPT's LayerNorm (mean, 1/std, bias) or Llama's RMSNorm (1/rms; mean and
// bias unused, null).
void norm_forward(const GptConfig& g, float* out, float* mean, float* rstd, const float* in,
                  const float* w, const float* b, int64_t B, int64_t T, int64_t C,
                  const Compute& cx);
void norm_backward(const GptConfig& g, float* dinp, float* dw, float* db, const float* dout,
                   const float* in, const float* w, const float* mean, const float* rstd, int64_t B,
                   int64_t T, int64_t C);

// A block's product widths on one TP rank: qkv's [q | k | v] (3C, or Llama's (NH + 2 NKV) HS),
// the MLP's first product (GPT's 4C, Llama's [gate | up] 2F) and its activation's output (4C, F).
struct Widths {
  int64_t qkv, fc, act;
};
Widths widths(const GptConfig& g, int tp);

// The MLP's activation over `rows` rows: GPT's GELU of the fc output, Llama's silu(gate) * up of
// [gate | up]; its backward accumulates into dfc.
void activation_forward(const GptConfig& g, float* out, const float* fc, int64_t rows,
                        const Widths& w, const Compute& cx);
void activation_backward(const GptConfig& g, float* dfc, const float* fc, const float* dout,
                         int64_t rows, const Widths& w, const Compute& cx);

}  // namespace dtrain::model::block
