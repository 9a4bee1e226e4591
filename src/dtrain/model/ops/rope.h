// Rotary position embeddings (Su et al. 2021) in Hugging Face Llama's convention (rotate_half):
// within each head of HS dims, dim i < HS/2 pairs with dim i + HS/2, and with
// inv_freq_i = theta^(-2i/HS) and angle = position * inv_freq_i,
//   out_i = x_i cos - x_{i+HS/2} sin,   out_{i+HS/2} = x_{i+HS/2} cos + x_i sin
// (x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1]), so weights exported to Hugging
// Face's LlamaForCausalLM run unchanged there. Each token's angle comes from its own position
// in the whole sequence (`positions`), so a context-parallel rank's chunks (load-balanced or
// not) rotate exactly as the serial model does. In place: the rotation is orthogonal, so the
// backward is the rotation by -angle, in place on the gradient.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dtrain/model/gemm.h"

namespace dtrain::model {

inline constexpr float kDefaultRopeTheta = 10000.0f;  // Llama 2's; Llama 3 uses 500000

// cos and sin of every (position, pair): T rows of HS/2, from the angle computed in double and
// rounded once.
struct RopeTable {
  int64_t head_size = 0;
  std::vector<float> cos, sin;  // (T, HS/2)
};
RopeTable make_rope_table(std::span<const int64_t> positions, int64_t head_size, float theta);

// Rotates `heads` heads of every token row in place: row (b, t) of x starts at
// x + (b * T + t) * row_stride, head h at + h * HS (the q or k block of a qkv row).
void rope_forward(float* x, const RopeTable& table, int64_t B, int64_t T, int64_t heads,
                  int64_t row_stride, const Compute& cx = {});
// dx from dy in place: the rotation by -angle.
void rope_backward(float* dx, const RopeTable& table, int64_t B, int64_t T, int64_t heads,
                   int64_t row_stride, const Compute& cx = {});

}  // namespace dtrain::model
