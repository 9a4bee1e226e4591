// The split backward (ZB-H1's B then W) under sequence parallelism, on 2 TP rank threads: B
// (block_backward_input) leaves the four linears' weight gradients to W (block_backward_weight),
// W re-gathers the LayerNorm-output slices its column-parallel weight gradients read, and the
// gradients are the fused backward's bits on every rank (the same sgemm calls on the same
// operands; the gathers copy), for every recompute mode. The TP counters show where the
// re-gathers moved: the same number as the fused backward's, run in W.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/rng.h"
#include "dtrain/model/gpt.h"
#include "dtrain/parallel/tensor_parallel.h"
#include "random_tokens.h"

namespace dtrain::parallel {
namespace {

using testing::random_tokens;

struct RankGrads {
  std::vector<float> grads;
  int64_t regathers = 0;  // the TP group's regather calls during the backward
};

// Every TP rank's gradient after one forward and backward on the whole (tiny) model with
// sequence parallelism, fused or split (every block's B top down, the embedding, then the W's).
std::vector<RankGrads> sp_grads(bool split, Recompute recompute) {
  const model::GptConfig g = model::gpt_preset("tiny").config;
  const int64_t B = 2, T = 8;
  constexpr int kTp = 2;
  std::vector<RankGrads> out(kTp);
  comm::threads::run_ranks(kTp, [&](comm::Communicator& comm) {
    TensorParallelGroup tp(comm, /*sequence_parallel=*/true);
    MemoryTracker tracker;
    model::GptModel m(g, &tracker, &tp, nullptr, recompute);
    m.init_params(5);
    m.zero_grads();
    m.forward(random_tokens(B * T, g.vocab, 6), random_tokens(B * T, g.vocab, 7), B, T);
    model::GptActivations& acts = m.activations();
    model::GptWorkspace& ws = m.workspace();
    const int64_t before = tp.counters().regather.calls;
    if (!split) {
      m.backward(acts, ws, 0.5f);
    } else {
      model::WeightGradStash stash(g, B, T, &tracker, model::LayerRange{0, g.layers}, kTp);
      m.head_backward(acts, ws, 0.5f);
      for (int64_t l = g.layers - 1; l >= 0; --l) m.block_backward_input(acts, ws, l, stash);
      m.embedding_backward(acts, ws);
      EXPECT_EQ(tp.counters().regather.calls, before) << "B re-gathers nothing";
      for (int64_t l = 0; l < g.layers; ++l) m.block_backward_weight(acts, ws, stash, l);
    }
    RankGrads& r = out[static_cast<size_t>(comm.rank())];
    r.grads.assign(m.grads().begin(), m.grads().end());
    r.regathers = tp.counters().regather.calls - before;
  });
  return out;
}

TEST(SequenceParallelSplit, InputThenWeightIsTheFusedBackwardBitForBitOnEveryRank) {
  for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
    const std::vector<RankGrads> fused = sp_grads(false, recompute);
    const std::vector<RankGrads> split = sp_grads(true, recompute);
    for (size_t r = 0; r < fused.size(); ++r) {
      ASSERT_EQ(fused[r].grads.size(), split[r].grads.size());
      EXPECT_EQ(std::memcmp(fused[r].grads.data(), split[r].grads.data(),
                            fused[r].grads.size() * sizeof(float)),
                0)
          << "rank " << r << ", recompute " << name(recompute);
      size_t nonzero = 0;
      for (float v : split[r].grads) nonzero += v != 0.0f ? 1 : 0;
      EXPECT_GT(nonzero, split[r].grads.size() / 2) << "not trivially equal";
      // Two re-gathers per block (the LN1 and LN2 outputs), fused or split.
      const int64_t layers = model::gpt_preset("tiny").config.layers;
      EXPECT_EQ(fused[r].regathers, 2 * layers);
      EXPECT_EQ(split[r].regathers, 2 * layers);
    }
  }
}

}  // namespace
}  // namespace dtrain::parallel
