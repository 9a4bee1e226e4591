// Every op's backward against central finite differences of a double-precision reference of
// its forward (tests/model/reference_gpt.h), plus the fp32 forward against that reference.
// The scalar differentiated is L = sum(out * w) for a fixed random w, so the analytic input
// gradient is the op's backward with dout = w. Gradient buffers start at 0.5 (not 0) and the
// test subtracts it, which also proves that backward accumulates.
// Tolerances (stated per op): |fp32 analytic - double numeric| <= atol + rtol * |numeric|.
// The numeric side is exact to ~1e-9 (h = 1e-6 in double), so the slack is fp32 rounding.
#include <gtest/gtest.h>

#include <cmath>

#include "dtrain/model/ops/attention.h"
#include "dtrain/model/ops/crossentropy.h"
#include "dtrain/model/ops/encoder.h"
#include "dtrain/model/ops/gelu.h"
#include "dtrain/model/ops/layernorm.h"
#include "dtrain/model/ops/matmul.h"
#include "dtrain/model/ops/residual.h"
#include "gradcheck.h"
#include "reference_gpt.h"

namespace dtrain::model {
namespace {

using test::expect_close;
using test::minus;
using test::numeric_gradient;
using test::random_floats;
using test::to_double;
using test::weighted_sum;
constexpr float kPrefill = 0.5f;

TEST(LayerNormOp, BackwardMatchesFiniteDifferences) {
  // rtol 1e-4, atol 2e-5 (fp32 reductions over C = 24)
  const int64_t B = 2, T = 3, C = 24, N = B * T;
  const auto x = random_floats(N * C, 1, 1.5, 0.3);
  const auto w = random_floats(C, 2, 0.2, 1.0);
  const auto b = random_floats(C, 3, 0.1);
  const auto dout = random_floats(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), B, T, C);
  auto xd = to_double(x), wd = to_double(w), bd = to_double(b);
  expect_close(out, ref::layernorm(xd, wd.data(), bd.data(), N, C), 1e-5, 1e-5, "forward");

  std::vector<float> dx(N * C, kPrefill), dw(C, kPrefill), db(C, kPrefill);
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), B, T, C);
  auto loss = [&] { return weighted_sum(ref::layernorm(xd, wd.data(), bd.data(), N, C), dout); };
  expect_close(minus(dx, kPrefill), numeric_gradient(loss, xd), 1e-4, 2e-5, "dinp");
  expect_close(minus(dw, kPrefill), numeric_gradient(loss, wd), 1e-4, 2e-5, "dweight");
  expect_close(minus(db, kPrefill), numeric_gradient(loss, bd), 1e-4, 2e-5, "dbias");
}

void check_matmul(bool reference) {
  // rtol 1e-4, atol 1e-5 (sums of C = 13 or OC = 7 products)
  const int64_t BT = 6, C = 13, OC = 7;
  const auto x = random_floats(BT * C, 5);
  const auto w = random_floats(OC * C, 6, 0.5);
  const auto bias = random_floats(OC, 7);
  const auto dout = random_floats(BT * OC, 8);
  std::vector<float> out(BT * OC);
  if (reference) {
    matmul_forward_reference(out.data(), x.data(), w.data(), bias.data(), BT, C, OC);
  } else {
    matmul_forward(out.data(), x.data(), w.data(), bias.data(), BT, C, OC);
  }
  auto xd = to_double(x), wd = to_double(w), bd = to_double(bias);
  expect_close(out, ref::matmul(xd, wd.data(), bd.data(), BT, C, OC), 1e-5, 1e-5, "forward");

  std::vector<float> dx(BT * C, kPrefill), dw(OC * C, kPrefill), db(OC, kPrefill);
  if (reference) {
    matmul_backward_reference(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), BT,
                              C, OC);
  } else {
    matmul_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), BT, C, OC);
  }
  auto loss = [&] { return weighted_sum(ref::matmul(xd, wd.data(), bd.data(), BT, C, OC), dout); };
  expect_close(minus(dx, kPrefill), numeric_gradient(loss, xd), 1e-4, 1e-5, "dinp");
  expect_close(minus(dw, kPrefill), numeric_gradient(loss, wd), 1e-4, 1e-5, "dweight");
  expect_close(minus(db, kPrefill), numeric_gradient(loss, bd), 1e-4, 1e-5, "dbias");
}

TEST(MatmulOp, BlasBackwardMatchesFiniteDifferences) {
  check_matmul(false);
}
TEST(MatmulOp, ReferenceBackwardMatchesFiniteDifferences) {
  check_matmul(true);
}

TEST(MatmulOp, BlasEqualsNaiveReferenceOnModelShapes) {
  // The sgemm path against the plain loops, on a (BT, C) x (OC, C)^T of the tiny model's size.
  // Tolerance 1e-5 relative to the largest |output|: two fp32 summation orders over C = 128.
  const int64_t BT = 64, C = 128, OC = 96;
  const auto x = random_floats(BT * C, 9), w = random_floats(OC * C, 10, 0.1);
  const auto bias = random_floats(OC, 11);
  std::vector<float> fast(BT * OC), slow(BT * OC);
  matmul_forward(fast.data(), x.data(), w.data(), bias.data(), BT, C, OC);
  matmul_forward_reference(slow.data(), x.data(), w.data(), bias.data(), BT, C, OC);
  double max_out = 0;
  for (float v : slow) max_out = std::max(max_out, std::fabs(static_cast<double>(v)));
  expect_close(fast, to_double(slow), 0, 1e-5 * max_out, "sgemm vs loops");
  // And with no bias (the LM head and the row-parallel outputs).
  matmul_forward(fast.data(), x.data(), w.data(), nullptr, BT, C, OC);
  matmul_forward_reference(slow.data(), x.data(), w.data(), nullptr, BT, C, OC);
  expect_close(fast, to_double(slow), 0, 1e-5 * max_out, "sgemm vs loops, no bias");
}

TEST(AttentionOp, BackwardMatchesFiniteDifferences) {
  // rtol 1e-4, atol 2e-5 (exp_approx ~1 ulp, fp32 softmax and sgemm sums over T and HS)
  const int64_t B = 2, T = 5, C = 12, NH = 3;
  const auto qkv = random_floats(B * T * 3 * C, 12);
  const auto dout = random_floats(B * T * C, 13);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  auto qd = to_double(qkv);
  expect_close(out, ref::attention(qd, B, T, C, NH), 1e-5, 1e-5, "forward");
  // The cached softmax is a causal distribution: rows sum to 1, zero above the diagonal.
  for (int64_t r = 0; r < B * NH; ++r) {
    for (int64_t i = 0; i < T; ++i) {
      double s = 0;
      for (int64_t j = 0; j < T; ++j) {
        const float a = att[(r * T + i) * T + j];
        if (j > i) {
          EXPECT_EQ(a, 0.0f);
        }
        s += a;
      }
      EXPECT_NEAR(s, 1.0, 1e-6);
    }
  }
  std::vector<float> dqkv(B * T * 3 * C, kPrefill), scratch(T * T);
  attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  auto loss = [&] { return weighted_sum(ref::attention(qd, B, T, C, NH), dout); };
  expect_close(minus(dqkv, kPrefill), numeric_gradient(loss, qd), 1e-4, 2e-5, "dqkv");
}

TEST(GeluOp, BackwardMatchesFiniteDifferences) {
  // rtol 1e-5, atol 1e-6 (elementwise, from -6 to 6 where the tails would cancel in 1 + tanh)
  const int64_t N = 64;
  std::vector<float> x(N);
  for (int64_t i = 0; i < N; ++i) x[i] = -6.0f + 12.0f * static_cast<float>(i) / (N - 1);
  const auto dout = random_floats(N, 14);
  std::vector<float> out(N);
  gelu_forward(out.data(), x.data(), N);
  auto xd = to_double(x);
  expect_close(out, ref::gelu(xd), 1e-6, 1e-7, "forward");
  std::vector<float> dx(N, kPrefill);
  gelu_backward(dx.data(), x.data(), dout.data(), N);
  auto loss = [&] { return weighted_sum(ref::gelu(xd), dout); };
  expect_close(minus(dx, kPrefill), numeric_gradient(loss, xd), 1e-5, 1e-6, "dinp");
}

TEST(ResidualOp, ForwardAndBackwardAreExact) {
  // out = inp + delta + bias; backward passes dout to inp and delta and sums it into dbias.
  // Tolerance: exact for the elementwise parts, 1e-6 for the column sums.
  const int64_t BT = 4, C = 5;
  const auto x = random_floats(BT * C, 15), y = random_floats(BT * C, 16);
  const auto bias = random_floats(C, 17), dout = random_floats(BT * C, 18);
  std::vector<float> out(BT * C);
  residual_forward(out.data(), x.data(), y.data(), bias.data(), BT, C);
  for (int64_t i = 0; i < BT * C; ++i) EXPECT_EQ(out[i], x[i] + y[i] + bias[i % C]);
  std::vector<float> dx(BT * C, 0), dy(BT * C, 0), db(C, 0);
  residual_backward(dx.data(), dy.data(), db.data(), dout.data(), BT, C);
  std::vector<double> col(C, 0);
  for (int64_t i = 0; i < BT * C; ++i) {
    EXPECT_EQ(dx[i], dout[i]);
    EXPECT_EQ(dy[i], dout[i]);
    col[i % C] += dout[i];
  }
  expect_close(db, col, 0, 1e-6, "dbias");
}

TEST(EncoderOp, BackwardMatchesFiniteDifferences) {
  // Repeated tokens make the scatter-add accumulate. rtol 1e-6, atol 1e-6 (sums of 2-4 terms).
  const int64_t V = 7, B = 2, T = 4, C = 3, context = 6;
  const std::vector<int32_t> tokens = {3, 1, 3, 6, 0, 3, 1, 5};
  const auto wte = random_floats(V * C, 19), wpe = random_floats(context * C, 20);
  const auto dout = random_floats(B * T * C, 21);
  auto wted = to_double(wte), wped = to_double(wpe);
  auto forward = [&] {
    std::vector<double> out(B * T * C);
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t i = 0; i < C; ++i)
        out[r * C + i] = wted[tokens[r] * C + i] + wped[(r % T) * C + i];
    return out;
  };
  std::vector<float> out(B * T * C);
  encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  expect_close(out, forward(), 0, 1e-6, "forward");
  std::vector<float> dwte(V * C, kPrefill), dwpe(context * C, kPrefill);
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  auto loss = [&] { return weighted_sum(forward(), dout); };
  expect_close(minus(dwte, kPrefill), numeric_gradient(loss, wted), 1e-6, 1e-6, "dwte");
  expect_close(minus(dwpe, kPrefill), numeric_gradient(loss, wped), 1e-6, 1e-6, "dwpe");
}

TEST(CrossEntropyOp, BackwardMatchesFiniteDifferences) {
  // L = dloss * mean cross-entropy; rtol 1e-4, atol 1e-6 (exp_approx and fp32 softmax).
  const int64_t N = 6, V = 11;
  const float dloss = 0.7f;
  const auto logits = random_floats(N * V, 22, 2.0);
  const std::vector<int32_t> targets = {0, 10, 4, 4, 7, 2};
  std::vector<float> probs(N * V), losses(N);
  const float mean = crossentropy_softmax_forward(probs.data(), losses.data(), logits.data(),
                                                  targets.data(), N, V);
  auto zd = to_double(logits);
  EXPECT_NEAR(mean, ref::crossentropy(zd, targets, N, V), 1e-5);
  auto loss = [&] { return dloss * ref::crossentropy(zd, targets, N, V); };
  const std::vector<double> numeric = numeric_gradient(loss, zd);

  std::vector<float> dlogits(N * V, kPrefill);
  crossentropy_softmax_backward(dlogits.data(), probs.data(), targets.data(), dloss, N, V);
  expect_close(minus(dlogits, kPrefill), numeric, 1e-4, 1e-6, "dlogits (accumulating)");
  std::vector<float> inplace = probs;
  crossentropy_softmax_backward_inplace(inplace.data(), targets.data(), dloss, N, V);
  expect_close(inplace, numeric, 1e-4, 1e-6, "dlogits (in place)");
}

TEST(CrossEntropyOp, ForwardMayWriteOverItsLogits) {
  // The model passes one buffer as logits and probs; the result must not change.
  const int64_t N = 3, V = 300;
  const auto logits = random_floats(N * V, 23, 3.0);
  const std::vector<int32_t> targets = {299, 0, 150};
  std::vector<float> probs(N * V), losses(N), in_place = logits, losses2(N);
  const float a = crossentropy_softmax_forward(probs.data(), losses.data(), logits.data(),
                                               targets.data(), N, V);
  const float b = crossentropy_softmax_forward(in_place.data(), losses2.data(), in_place.data(),
                                               targets.data(), N, V);
  EXPECT_EQ(a, b);
  EXPECT_EQ(probs, in_place);
}

}  // namespace
}  // namespace dtrain::model
