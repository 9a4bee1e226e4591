// Blockwise attention (what context parallelism runs) against the dense causal attention of the
// same tokens: forward output and every gradient, with the keys split into blocks of arbitrary
// tokens (the balanced ring's chunk pairs), in ascending positions (each query tile stops at its
// last visible key) and in another order (masked key by key), more query rows than one tile,
// grouped-query heads; the same bits over a compute team as on one thread; and the branch-free
// exp it uses against libm's.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "dtrain/model/ops/attention.h"
#include "dtrain/model/ops/blockwise_attention.h"
#include "dtrain/model/ops/vector_math.h"
#include "dtrain/model/thread_team.h"
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

struct Shape {
  int64_t B = 2, T = 150, NH = 4, NKV = 4, HS = 8;
  int64_t C() const { return NH * HS; }
  int64_t KVW() const { return NKV * HS; }
  int64_t W() const { return C() + 2 * KVW(); }
};

struct Result {
  std::vector<float> out, dqkv;
  int64_t pairs = 0;
};

// The blockwise forward and backward over the whole sequence's queries, the keys in two blocks
// of the balanced split over 4 chunks ({0, 3} and {1, 2}), in ascending positions or with the
// later chunk first; each block's dK and dV added home to its tokens.
Result blockwise(const Shape& x, bool ascending, const std::vector<float>& qkv,
                 const std::vector<float>& dout, const Compute& cx) {
  const int64_t B = x.B, T = x.T, C = x.C(), KVW = x.KVW(), W = x.W();
  const int64_t chunk = (T + 3) / 4;
  auto chunk_tokens = [&](int c) {
    std::vector<int64_t> t;
    for (int64_t i = c * chunk; i < std::min(T, (c + 1) * chunk); ++i) t.push_back(i);
    return t;
  };
  std::vector<std::vector<int64_t>> blocks;
  for (auto [a, b] : {std::pair{0, 3}, std::pair{1, 2}}) {
    std::vector<int64_t> first = chunk_tokens(ascending ? a : b);
    const std::vector<int64_t> second = chunk_tokens(ascending ? b : a);
    first.insert(first.end(), second.begin(), second.end());
    blocks.push_back(first);
  }
  std::vector<int64_t> all(static_cast<size_t>(T));
  std::iota(all.begin(), all.end(), 0);
  const BlockShape shape{B, x.NH, x.HS, x.NH / x.NKV};
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

  Result r;
  r.out.resize(static_cast<size_t>(B * T * C));
  std::vector<float> m(static_cast<size_t>(B * x.NH * T)), l(m.size()), lse(m.size());
  const TokenBlock o{r.out.data(), C, T * C};
  attention_merge_init(m.data(), l.data(), o, shape, T);
  for (const std::vector<int64_t>& tokens : blocks) {
    const std::vector<float> kv = pack(tokens);
    const auto Tk = static_cast<int64_t>(tokens.size());
    const ConstTokenBlock kb{kv.data(), 2 * KVW, Tk * 2 * KVW, tokens.data(), Tk};
    const ConstTokenBlock vb{kv.data() + KVW, 2 * KVW, Tk * 2 * KVW, tokens.data(), Tk};
    r.pairs += attention_merge_block(o, m.data(), l.data(), q, kb, vb, shape, cx);
  }
  attention_merge_finish(o, lse.data(), m.data(), l.data(), shape, T);

  r.dqkv.assign(static_cast<size_t>(B * T * W), 0.0f);
  std::vector<float> rowdot(m.size());
  const ConstTokenBlock go{dout.data(), C, T * C, all.data(), T};
  attention_row_dot(rowdot.data(), go, ConstTokenBlock{r.out.data(), C, T * C, all.data(), T},
                    shape);
  for (const std::vector<int64_t>& tokens : blocks) {
    const std::vector<float> kv = pack(tokens);
    const auto Tk = static_cast<int64_t>(tokens.size());
    std::vector<float> dkv(kv.size(), 0.0f);
    const ConstTokenBlock kb{kv.data(), 2 * KVW, Tk * 2 * KVW, tokens.data(), Tk};
    const ConstTokenBlock vb{kv.data() + KVW, 2 * KVW, Tk * 2 * KVW, tokens.data(), Tk};
    attention_block_backward(TokenBlock{r.dqkv.data(), W, T * W},
                             TokenBlock{dkv.data(), 2 * KVW, Tk * 2 * KVW},
                             TokenBlock{dkv.data() + KVW, 2 * KVW, Tk * 2 * KVW}, go, q, kb, vb,
                             lse.data(), rowdot.data(), shape, cx);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < Tk; ++j) {
        float* dst = r.dqkv.data() + (b * T + tokens[static_cast<size_t>(j)]) * W + C;
        const float* src = dkv.data() + (b * Tk + j) * 2 * KVW;
        for (int64_t c = 0; c < 2 * KVW; ++c) dst[c] += src[c];
      }
    }
  }
  return r;
}

class BlockwiseVsDense : public testing::TestWithParam<Case> {};

TEST_P(BlockwiseVsDense, OutputAndGradientsMatchTheDenseAttention) {
  const Case k = GetParam();
  Shape x;
  x.NKV = k.kv_heads;
  const int64_t B = x.B, T = x.T, NH = x.NH, NKV = x.NKV, HS = x.HS;
  const std::vector<float> qkv = test::random_floats(static_cast<size_t>(B * T * x.W()), 11);
  const std::vector<float> dout = test::random_floats(static_cast<size_t>(B * T * x.C()), 12);

  // The dense reference.
  std::vector<float> out_ref(static_cast<size_t>(B * T * x.C())),
      att(static_cast<size_t>(B * NH * T * T)), scratch(static_cast<size_t>(T * T)),
      dqkv_ref(qkv.size(), 0.0f);
  gqa_attention_forward(out_ref.data(), att.data(), qkv.data(), B, T, NH, NKV, HS);
  gqa_attention_backward(dqkv_ref.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T,
                         NH, NKV, HS);

  const Result r = blockwise(x, k.ascending, qkv, dout, {});
  EXPECT_EQ(r.pairs, T * (T + 1) / 2);  // every causal pair once
  for (size_t i = 0; i < r.out.size(); ++i) ASSERT_NEAR(r.out[i], out_ref[i], 2e-6) << i;
  for (size_t i = 0; i < r.dqkv.size(); ++i) ASSERT_NEAR(r.dqkv[i], dqkv_ref[i], 1e-5) << i;
}

// Over a team the (row, K/V head) tasks are shared out and each computed as on one thread: the
// same bits as without a team (a shape large enough that the team is used).
TEST(BlockwiseAttention, ATeamGivesTheBitsOfOneThread) {
  Shape x;
  x.NKV = 2;
  x.HS = 16;
  const std::vector<float> qkv = test::random_floats(static_cast<size_t>(x.B * x.T * x.W()), 21);
  const std::vector<float> dout = test::random_floats(static_cast<size_t>(x.B * x.T * x.C()), 22);
  ThreadTeam team(2);
  GemmStats single_stats, team_stats;
  for (bool ascending : {true, false}) {
    const Result one = blockwise(x, ascending, qkv, dout, Compute{nullptr, &single_stats});
    const Result two = blockwise(x, ascending, qkv, dout, Compute{&team, &team_stats});
    EXPECT_EQ(one.out, two.out);
    EXPECT_EQ(one.dqkv, two.dqkv);
  }
  // Every GEMM counted either way.
  EXPECT_EQ(single_stats.calls, team_stats.calls);
  EXPECT_EQ(single_stats.flops, team_stats.flops);
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
