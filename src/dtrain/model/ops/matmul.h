// Linear layer, torch.nn.Linear layout: out = inp @ weight^T + bias, weight (OC, C). The fast
// versions call sgemm (OpenBLAS); the *_reference versions are plain loops kept for tests.
#pragma once

#include <cstdint>

#include "dtrain/model/gemm.h"

namespace dtrain::model {

void matmul_forward(float* out,           // (BT, OC)
                    const float* inp,     // (BT, C)
                    const float* weight,  // (OC, C)
                    const float* bias,    // (OC), or null for none
                    int64_t BT, int64_t C, int64_t OC, const Compute& cx = {});

// Accumulates: dinp += dout @ weight, dweight += dout^T @ inp, dbias += column sums of dout.
// dinp or dbias may be null to skip them.
void matmul_backward(float* dinp,          // (BT, C)
                     float* dweight,       // (OC, C)
                     float* dbias,         // (OC)
                     const float* dout,    // (BT, OC)
                     const float* inp,     // (BT, C)
                     const float* weight,  // (OC, C)
                     int64_t BT, int64_t C, int64_t OC, const Compute& cx = {});

// matmul_backward in two halves, for a split (zero-bubble) backward; matmul_backward is
// exactly _input then _weight (the same sgemm calls, so the same bits).
// Accumulates dinp += dout @ weight.
void matmul_backward_input(float* dinp,          // (BT, C)
                           const float* dout,    // (BT, OC)
                           const float* weight,  // (OC, C)
                           int64_t BT, int64_t C, int64_t OC, const Compute& cx = {});
// Accumulates dweight += dout^T @ inp and, unless dbias is null, dbias += column sums of dout.
void matmul_backward_weight(float* dweight,     // (OC, C)
                            float* dbias,       // (OC)
                            const float* dout,  // (BT, OC)
                            const float* inp,   // (BT, C)
                            int64_t BT, int64_t C, int64_t OC, const Compute& cx = {});

// The same maths as plain triple loops (no BLAS), for tests.
void matmul_forward_reference(float* out, const float* inp, const float* weight, const float* bias,
                              int64_t BT, int64_t C, int64_t OC);
void matmul_backward_reference(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, int64_t BT, int64_t C,
                               int64_t OC);

}  // namespace dtrain::model
