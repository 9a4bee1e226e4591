// Blockwise attention (what context parallelism runs) against the dense causal attention of the
// same tokens: forward output and every gradient, with the keys split into blocks of arbitrary
// tokens (the balanced ring's chunk pairs), in ascending positions (each query tile stops at its
// last visible key) and in another order (masked key by key), more query rows than one tile,
// grouped-query heads; and the branch-free exp it uses against libm's.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "dtrain/model/ops/attention.h"
#include "dtrain/model/ops/blockwise_attention.h"
#include "dtrain/model/ops/vector_math.h"
#include "gradcheck.h"

namespace dtrain::model {
namespace {

TEST(BlockwiseAttention, ExpRoundedIsLibmsExpButForRareLastBits) {
  int64_t differ = 0, total = 0;
  double worst = 0;
  for (double x = -110.0; x <= 88.0; x += 0.000731) {
    const auto f = static_cast<float>(x);
    const float got = exp_rounded_in_range(std::max(f, -200.0f));
    const float want = std::exp(f);
    ++total;
    if (got != want) {
      ++differ;
      // By one ulp: relative for normal floats, one step of 2^-149 below them.
      const double off = std::fabs(static_cast<double>(got) - want);
      worst = std::max(worst, want >= std::numeric_limits<float>::min()
                                  ? off / want
                                  : off / std::numeric_limits<float>::denorm_min() * 1e-7);
    }
  }
  EXPECT_LT(differ * 1000, total) << differ << " of " << total;  // under 0.1% of them
  EXPECT_LE(worst, 1.2e-7);                                      // and then by one ulp
  EXPECT_EQ(exp_rounded_in_range(0.0f), 1.0f);
  EXPECT_EQ(exp_rounded_in_range(-200.0f), 0.0f);  // what masked keys are brought to
}

struct Case {
  bool ascending;  // keys of each block in ascending positions
  int64_t kv_heads;
};

class BlockwiseVsDense : public testing::TestWithParam<Case> {};

TEST_P(BlockwiseVsDense, OutputAndGradientsMatchTheDenseAttention) {
  const Case k = GetParam();
  const int64_t B = 2, T = 150, NH = 4, NKV = k.kv_heads, HS = 8;
  const int64_t C = NH * HS, KVW = NKV * HS, W = C + 2 * KVW;
  const std::vector<float> qkv = test::random_floats(static_cast<size_t>(B * T * W), 11);
  const std::vector<float> dout = test::random_floats(static_cast<size_t>(B * T * C), 12);

  // The dense reference.
  std::vector<float> out_ref(static_cast<size_t>(B * T * C)),
      att(static_cast<size_t>(B * NH * T * T)), scratch(static_cast<size_t>(T * T)),
      dqkv_ref(static_cast<size_t>(B * T * W), 0.0f);
  gqa_attention_forward(out_ref.data(), att.data(), qkv.data(), B, T, NH, NKV, HS);
  gqa_attention_backward(dqkv_ref.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T,
                         NH, NKV, HS);

  // Keys in two blocks of the balanced split over 4 chunks: {0, 3} and {1, 2}; in ascending
  // positions or with the later chunk first.
  const int64_t chunk = (T + 3) / 4;
  auto chunk_tokens = [&](int c) {
    std::vector<int64_t> t;
    for (int64_t i = c * chunk; i < std::min(T, (c + 1) * chunk); ++i) t.push_back(i);
    return t;
  };
  std::vector<std::vector<int64_t>> blocks;
  for (auto [a, b] : {std::pair{0, 3}, std::pair{1, 2}}) {
    std::vector<int64_t> first = chunk_tokens(k.ascending ? a : b);
    const std::vector<int64_t> second = chunk_tokens(k.ascending ? b : a);
    first.insert(first.end(), second.begin(), second.end());
    blocks.push_back(first);
  }
  std::vector<int64_t> all(static_cast<size_t>(T));
  std::iota(all.begin(), all.end(), 0);
  const BlockShape shape{B, NH, HS, NH / NKV};
  const ConstTokenBlock q{qkv.data(), W, T * W, all.data(), T};
  auto pack = [&](const std::vector<int64_t>& tokens) {  // [K | V] of the block's tokens
    const auto Tk = static_cast<int64_t>(tokens.size());
    std::vector<float> kv(static_cast<size_t>(B * Tk * 2 * KVW));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < Tk; ++j) {
        const float* src = qkv.data() + (b * T + tokens[static_cast<size_t>(j)]) * W + C;
        std::copy(src, src + 2 * KVW, kv.data() + (b * Tk + j) * 2 * KVW);
      }
    }
    return kv;
  };

  std::vector<float> out(static_cast<size_t>(B * T * C)), m(static_cast<size_t>(B * NH * T)),
      l(static_cast<size_t>(B * NH * T));
  const TokenBlock o{out.data(), C, T * C};
  attention_merge_init(m.data(), l.data(), o, shape, T);
  int64_t pairs = 0;
  for (const std::vector<int64_t>& tokens : blocks) {
    const std::vector<float> kv = pack(tokens);
    const auto Tk = static_cast<int64_t>(tokens.size());
    const ConstTokenBlock kb{kv.data(), 2 * KVW, Tk * 2 * KVW, tokens.data(), Tk};
    const ConstTokenBlock vb{kv.data() + KVW, 2 * KVW, Tk * 2 * KVW, tokens.data(), Tk};
    pairs += attention_merge_block(o, m.data(), l.data(), q, kb, vb, shape, {});
  }
  EXPECT_EQ(pairs, T * (T + 1) / 2);  // every causal pair once
  std::vector<float> lse(static_cast<size_t>(B * NH * T));
  attention_merge_finish(o, lse.data(), m.data(), l.data(), shape, T);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], out_ref[i], 2e-6) << i;

  std::vector<float> dqkv(static_cast<size_t>(B * T * W), 0.0f),
      rowdot(static_cast<size_t>(B * NH * T));
  const ConstTokenBlock go{dout.data(), C, T * C, all.data(), T};
  attention_row_dot(rowdot.data(), go, ConstTokenBlock{out.data(), C, T * C, all.data(), T}, shape);
  for (const std::vector<int64_t>& tokens : blocks) {
    const std::vector<float> kv = pack(tokens);
    const auto Tk = static_cast<int64_t>(tokens.size());
    std::vector<float> dkv(kv.size(), 0.0f);
    const ConstTokenBlock kb{kv.data(), 2 * KVW, Tk * 2 * KVW, tokens.data(), Tk};
    const ConstTokenBlock vb{kv.data() + KVW, 2 * KVW, Tk * 2 * KVW, tokens.data(), Tk};
    attention_block_backward(TokenBlock{dqkv.data(), W, T * W},
                             TokenBlock{dkv.data(), 2 * KVW, Tk * 2 * KVW},
                             TokenBlock{dkv.data() + KVW, 2 * KVW, Tk * 2 * KVW}, go, q, kb, vb,
                             lse.data(), rowdot.data(), shape, {});
    for (int64_t b = 0; b < B; ++b) {  // the block's dK, dV home to their tokens
      for (int64_t j = 0; j < Tk; ++j) {
        float* dst = dqkv.data() + (b * T + tokens[static_cast<size_t>(j)]) * W + C;
        const float* src = dkv.data() + (b * Tk + j) * 2 * KVW;
        for (int64_t c = 0; c < 2 * KVW; ++c) dst[c] += src[c];
      }
    }
  }
  for (size_t i = 0; i < dqkv.size(); ++i) ASSERT_NEAR(dqkv[i], dqkv_ref[i], 1e-5) << i;
}

INSTANTIATE_TEST_SUITE_P(All, BlockwiseVsDense,
                         testing::Values(Case{true, 4}, Case{true, 2}, Case{false, 2},
                                         Case{false, 1}),
                         [](const testing::TestParamInfo<Case>& p) {
                           return std::string(p.param.ascending ? "ascending" : "unordered") +
                                  "_kv" + std::to_string(p.param.kv_heads);
                         });

}  // namespace
}  // namespace dtrain::model
