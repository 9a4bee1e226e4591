// The Llama block's ops against central finite differences of double-precision references
// written from their definitions (Hugging Face's LlamaRMSNorm, F.silu(gate) * up, apply_rotary_
// pos_emb with rotate_half, repeat_kv's grouped attention), as ops_test.cc does for GPT's.
// L = sum(out * w) for a fixed random w; gradient buffers start at 0.5 and the test subtracts
// it (backward accumulates). Tolerances per op: |fp32 analytic - double numeric| <= atol +
// rtol * |numeric|.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/model/ops/attention.h"
#include "dtrain/model/ops/rmsnorm.h"
#include "dtrain/model/ops/rope.h"
#include "dtrain/model/ops/swiglu.h"
#include "dtrain/model/thread_team.h"
#include "gradcheck.h"
#include "reference_llama.h"

namespace dtrain::model {
namespace {

using test::expect_close;
using test::minus;
using test::numeric_gradient;
using test::random_floats;
using test::to_double;
using test::weighted_sum;
using Vec = std::vector<double>;
constexpr float kPrefill = 0.5f;

Vec rmsnorm_ref(const Vec& x, const Vec& w, int64_t N, int64_t C, double eps) {
  Vec out(x.size());
  for (int64_t r = 0; r < N; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < C; ++i) ms += x[r * C + i] * x[r * C + i];
    const double s = 1.0 / std::sqrt(ms / static_cast<double>(C) + eps);
    for (int64_t i = 0; i < C; ++i) out[r * C + i] = x[r * C + i] * s * w[i];
  }
  return out;
}

Vec swiglu_ref(const Vec& gu, int64_t N, int64_t F) {
  Vec out(static_cast<size_t>(N * F));
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t i = 0; i < F; ++i) {
      const double g = gu[r * 2 * F + i], u = gu[r * 2 * F + F + i];
      out[r * F + i] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  return out;
}

// Hugging Face's form literally: x * cos + rotate_half(x) * sin, cos and sin of each dim's
// angle (the two halves share theirs).
Vec rope_ref(const Vec& x, const std::vector<int64_t>& pos, int64_t B, int64_t T, int64_t heads,
             int64_t HS, int64_t stride, double theta) {
  Vec out = x;
  const int64_t half = HS / 2;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const double* v = x.data() + (b * T + t) * stride + h * HS;
        double* o = out.data() + (b * T + t) * stride + h * HS;
        for (int64_t d = 0; d < HS; ++d) {
          const int64_t i = d % half;
          const double angle =
              static_cast<double>(pos[static_cast<size_t>(t)]) * std::pow(theta, -2.0 * i / HS);
          const double rotated = d < half ? -v[d + half] : v[d - half];
          o[d] = v[d] * std::cos(angle) + rotated * std::sin(angle);
        }
      }
    }
  }
  return out;
}

TEST(RmsNormOp, BackwardMatchesFiniteDifferences) {
  // rtol 1e-4, atol 1e-5 (fp32 sums over C = 16)
  const int64_t N = 6, C = 16;
  const float eps = 1e-5f;
  const auto x = random_floats(N * C, 1);
  const auto w = random_floats(C, 2, 0.5, 1.0);
  const auto dout = random_floats(N * C, 3);
  std::vector<float> out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  Vec xd = to_double(x), wd = to_double(w);
  expect_close(out, rmsnorm_ref(xd, wd, N, C, eps), 1e-5, 1e-6, "forward");
  std::vector<float> dx(N * C, kPrefill), dw(C, kPrefill);
  rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  auto loss = [&] { return weighted_sum(rmsnorm_ref(xd, wd, N, C, eps), dout); };
  expect_close(minus(dx, kPrefill), numeric_gradient(loss, xd), 1e-4, 1e-5, "dx");
  expect_close(minus(dw, kPrefill), numeric_gradient(loss, wd), 1e-4, 1e-5, "dweight");
}

TEST(SwigluOp, BackwardMatchesFiniteDifferences) {
  // rtol 1e-5, atol 1e-6 (elementwise), gates from -8 to 8 where the sigmoid saturates
  const int64_t N = 4, F = 12;
  auto gu = random_floats(N * 2 * F, 4, 3.0);
  gu[0] = -8.0f;
  gu[1] = 8.0f;
  const auto dout = random_floats(N * F, 5);
  std::vector<float> out(N * F);
  swiglu_forward(out.data(), gu.data(), N, F);
  Vec gd = to_double(gu);
  expect_close(out, swiglu_ref(gd, N, F), 1e-6, 1e-7, "forward");
  std::vector<float> dgu(N * 2 * F, kPrefill);
  swiglu_backward(dgu.data(), gu.data(), dout.data(), N, F);
  auto loss = [&] { return weighted_sum(swiglu_ref(gd, N, F), dout); };
  expect_close(minus(dgu, kPrefill), numeric_gradient(loss, gd), 1e-5, 1e-6, "dgate_up");
}

TEST(RopeOp, ForwardIsHuggingFacesRotateHalfAndBackwardMatchesFiniteDifferences) {
  // Forward rtol 1e-5, atol 1e-6 (one fp32 rounding of cos, sin and two products); the backward
  // is the transpose of the rotation (linear: atol 1e-6).
  const int64_t B = 2, T = 5, heads = 3, HS = 8, stride = heads * HS + 4;  // a wider row: qkv's
  const float theta = 10000.0f;
  std::vector<int64_t> pos(T);
  std::iota(pos.begin(), pos.end(), int64_t{0});
  const RopeTable table = make_rope_table(pos, HS, theta);
  const auto x = random_floats(B * T * stride, 6);
  const auto dout = random_floats(B * T * stride, 7);
  std::vector<float> out = x;
  rope_forward(out.data(), table, B, T, heads, stride);
  Vec xd = to_double(x);
  expect_close(out, rope_ref(xd, pos, B, T, heads, HS, stride, theta), 1e-5, 1e-6, "forward");
  std::vector<float> dx = dout;
  rope_backward(dx.data(), table, B, T, heads, stride);
  auto loss = [&] { return weighted_sum(rope_ref(xd, pos, B, T, heads, HS, stride, theta), dout); };
  expect_close(dx, numeric_gradient(loss, xd), 1e-5, 1e-6, "dx");
  // Columns past the heads (the row's v block) are untouched both ways.
  for (int64_t r = 0; r < B * T; ++r) {
    for (int64_t c = heads * HS; c < stride; ++c) {
      EXPECT_EQ(out[r * stride + c], x[r * stride + c]);
      EXPECT_EQ(dx[r * stride + c], dout[r * stride + c]);
    }
  }
}

TEST(RopeOp, AContextParallelRanksTokensRotateByTheirGlobalPositions) {
  // A sequence of 16 tokens over cp = 2 in the load-balanced split: 4 chunks of 4, rank 1 holding
  // chunks 1 and 2 (positions 4-11); each of its rows rotates exactly as that row of the whole
  // sequence, bit for bit (the same table entries, the same arithmetic), positions past one
  // chunk included. And at Llama 3's theta and a 128k position the table is the double
  // formula's, rounded once.
  const int64_t T = 16, HS = 8, heads = 2, stride = heads * HS;
  std::vector<int64_t> all(T);
  std::iota(all.begin(), all.end(), int64_t{0});
  const std::vector<int64_t> mine = {4, 5, 6, 7, 8, 9, 10, 11};
  const auto x = random_floats(T * stride, 8);
  std::vector<float> whole = x;
  rope_forward(whole.data(), make_rope_table(all, HS, kDefaultRopeTheta), 1, T, heads, stride);
  std::vector<float> part(x.begin() + 4 * stride, x.begin() + 12 * stride);
  rope_forward(part.data(), make_rope_table(mine, HS, kDefaultRopeTheta), 1, 8, heads, stride);
  for (int64_t i = 0; i < 8 * stride; ++i) EXPECT_EQ(part[i], whole[4 * stride + i]) << i;
  const std::vector<int64_t> far = {131071};
  const RopeTable t = make_rope_table(far, HS, 500000.0f);
  for (int64_t i = 0; i < HS / 2; ++i) {
    const double angle = 131071.0 * std::pow(500000.0, -2.0 * static_cast<double>(i) / HS);
    EXPECT_EQ(t.cos[i], static_cast<float>(std::cos(angle)));
    EXPECT_EQ(t.sin[i], static_cast<float>(std::sin(angle)));
  }
  EXPECT_THROW(make_rope_table(far, 7, kDefaultRopeTheta), Error);
}

void check_gqa(int64_t NH, int64_t NKV, int threads) {
  // rtol 1e-4, atol 2e-5 (as AttentionOp: fp32 softmax and sgemm sums over T and HS)
  SCOPED_TRACE(testing::Message() << "NH " << NH << " NKV " << NKV << " threads " << threads);
  const int64_t B = 2, T = 5, HS = 4, W = (NH + 2 * NKV) * HS, C = NH * HS;
  ThreadTeam team(threads);
  const Compute cx{threads > 1 ? &team : nullptr};
  const auto qkv = random_floats(B * T * W, 9);
  const auto dout = random_floats(B * T * C, 10);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  gqa_attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, NKV, HS, cx);
  Vec qd = to_double(qkv);
  expect_close(out, ref::gqa_attention(qd, B, T, NH, NKV, HS), 1e-5, 1e-5, "forward");
  std::vector<float> dqkv(B * T * W, kPrefill), scratch(static_cast<size_t>(threads * T * T));
  gqa_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, NH,
                         NKV, HS, cx);
  auto loss = [&] { return weighted_sum(ref::gqa_attention(qd, B, T, NH, NKV, HS), dout); };
  expect_close(minus(dqkv, kPrefill), numeric_gradient(loss, qd), 1e-4, 2e-5, "dqkv");
}

TEST(GqaAttentionOp, BackwardMatchesFiniteDifferences) {
  check_gqa(4, 2, 1);  // grouped: two query heads per K/V head
  check_gqa(4, 1, 1);  // multi-query
  check_gqa(4, 2, 2);  // a team: each member a (row, K/V head)'s group
  check_gqa(3, 3, 1);  // multi-head
}

TEST(GqaAttentionOp, MultiHeadIsTheGptAttentionBitForBit) {
  const int64_t B = 2, T = 6, NH = 4, HS = 4, C = NH * HS;
  const auto qkv = random_floats(B * T * 3 * C, 11);
  const auto dout = random_floats(B * T * C, 12);
  std::vector<float> out1(B * T * C), out2(B * T * C), att1(B * NH * T * T), att2(att1.size());
  attention_forward(out1.data(), att1.data(), qkv.data(), B, T, C, NH);
  gqa_attention_forward(out2.data(), att2.data(), qkv.data(), B, T, NH, NH, HS);
  EXPECT_EQ(out1, out2);
  EXPECT_EQ(att1, att2);
  std::vector<float> d1(B * T * 3 * C, 0.0f), d2(d1.size(), 0.0f), scratch(T * T);
  attention_backward(d1.data(), scratch.data(), dout.data(), qkv.data(), att1.data(), B, T, C, NH);
  gqa_attention_backward(d2.data(), scratch.data(), dout.data(), qkv.data(), att2.data(), B, T, NH,
                         NH, HS);
  EXPECT_EQ(d1, d2);
}

}  // namespace
}  // namespace dtrain::model
