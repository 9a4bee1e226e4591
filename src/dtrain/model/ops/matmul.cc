// matmul_forward / matmul_backward through sgemm (bias pre-filled, then beta = 1), and the
// naive reference loops.
#include "dtrain/model/ops/matmul.h"

#include <cstring>

namespace dtrain::model {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t BT, int64_t C, int64_t OC, const Compute& cx) {
  float beta = 0.0f;
  if (bias != nullptr) {
    for (int64_t r = 0; r < BT; ++r) std::memcpy(out + r * OC, bias, OC * sizeof(float));
    beta = 1.0f;
  }
  // out (BT, OC) = inp (BT, C) @ weight^T (C, OC)
  sgemm(Trans::no, Trans::yes, BT, OC, C, 1.0f, inp, C, weight, C, beta, out, OC, cx);
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t BT,
                           int64_t C, int64_t OC, const Compute& cx) {
  // dinp (BT, C) += dout (BT, OC) @ weight (OC, C)
  sgemm(Trans::no, Trans::no, BT, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C, cx);
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int64_t BT, int64_t C, int64_t OC, const Compute& cx) {
  // dweight (OC, C) += dout^T (OC, BT) @ inp (BT, C)
  sgemm(Trans::yes, Trans::no, OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dweight, C, cx);
  if (dbias != nullptr) {
    for (int64_t r = 0; r < BT; ++r) {
      const float* d = dout + r * OC;
      for (int64_t o = 0; o < OC; ++o) dbias[o] += d[o];
    }
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t BT, int64_t C, int64_t OC, const Compute& cx) {
  if (dinp != nullptr) matmul_backward_input(dinp, dout, weight, BT, C, OC, cx);
  matmul_backward_weight(dweight, dbias, dout, inp, BT, C, OC, cx);
}

void matmul_forward_reference(float* out, const float* inp, const float* weight, const float* bias,
                              int64_t BT, int64_t C, int64_t OC) {
  for (int64_t r = 0; r < BT; ++r) {
    for (int64_t o = 0; o < OC; ++o) {
      float acc = bias != nullptr ? bias[o] : 0.0f;
      for (int64_t i = 0; i < C; ++i) acc += inp[r * C + i] * weight[o * C + i];
      out[r * OC + o] = acc;
    }
  }
}

void matmul_backward_reference(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, int64_t BT, int64_t C,
                               int64_t OC) {
  for (int64_t r = 0; r < BT; ++r) {
    for (int64_t o = 0; o < OC; ++o) {
      const float d = dout[r * OC + o];
      for (int64_t i = 0; i < C; ++i) {
        if (dinp != nullptr) dinp[r * C + i] += d * weight[o * C + i];
        dweight[o * C + i] += d * inp[r * C + i];
      }
      if (dbias != nullptr) dbias[o] += d;
    }
  }
}

}  // namespace dtrain::model
