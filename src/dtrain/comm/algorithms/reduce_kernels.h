// Internal to comm/: the element-wise kernels of the direct algorithm. Each reduces one block of
// several ranks' inputs into an accumulator, in rank order (so every rank that reduces an
// element gets the same bits), then stores the accumulator. The loops are compiled for
// AVX-512, AVX2 and the baseline and picked when the program loads (core/cpu_dispatch.h);
// every clone adds in the same order, so the choice does not change results.
#pragma once

#include <cstdint>

#include "dtrain/comm/collective_kind.h"
#include "dtrain/core/bf16.h"

namespace dtrain::comm::detail {

// acc[i] = src[0][i] (op) src[1][i] (op) ... (op) src[sources-1][i]. `avg` reduces like sum.
// bf16 inputs are accumulated in float32 (one rounding, when stored).
void reduce_block(float* acc, const float* const* src, int sources, int64_t n, ReduceOp op);
void reduce_block(int64_t* acc, const int64_t* const* src, int sources, int64_t n, ReduceOp op);
void reduce_block(float* acc, const bf16* const* src, int sources, int64_t n, ReduceOp op);

// acc[i] *= factor (the average's 1/N, applied once before the result is shared).
void scale_block(float* acc, int64_t n, float factor);

// dst[i] = acc[i] rounded to bf16.
void store_block(bf16* dst, const float* acc, int64_t n);

}  // namespace dtrain::comm::detail
