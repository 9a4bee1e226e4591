// The widest model of a shape family that fits with activations (largest_model.h), checked by
// evaluating the planner at the answer and one step of heads wider, independently of the search.
#include <gtest/gtest.h>

#include "dtrain/core/check.h"
#include "dtrain/plan/largest_model.h"

namespace dtrain::plan {
namespace {

PlanInput gpt3_on(const std::string& cluster) {
  PlanInput in;
  in.model = model_preset("gpt3-175b");
  in.training.global_batch = in.model.default_global_batch;
  in.cluster = parse_cluster(cluster);
  return in;
}

Layout megatron_layout() {
  Layout l;  // 8 x 8 x 16 = 1024 GPUs, Narayanan et al.'s GPT-3 layout class
  l.tp = 8;
  l.pp = 8;
  l.dp = 16;
  l.zero_stage = 1;
  l.recompute = Recompute::selective;
  l.sequence_parallel = true;
  return l;
}

TEST(LargestModel, WidestGpt3ShapeFitsAndTheNextWidthDoesNot) {
  const PlanInput in = gpt3_on("128x8xA100");
  const Layout l = megatron_layout();
  const LargestShape r = largest_model_shape(in, l);
  ASSERT_GT(r.model.hidden, 0);
  EXPECT_EQ(r.heads_step, 8);
  EXPECT_EQ(r.model.heads % 8, 0);
  EXPECT_EQ(r.model.hidden, r.model.heads * 128);  // GPT-3's head size, kept
  EXPECT_EQ(r.model.layers, 96);
  // Independently: the answer fits, one step of heads wider does not.
  PlanInput at = in;
  at.model = widen(in.model, r.model.heads);
  const Plan fit = evaluate(at, l);
  EXPECT_TRUE(fit.memory.fits());
  EXPECT_EQ(fit.memory.total(), r.memory.total());
  at.model = widen(in.model, r.model.heads + 8);
  const Plan over = evaluate(at, l);
  EXPECT_FALSE(over.memory.fits());
  EXPECT_EQ(over.memory.total(), r.too_wide.total());
  EXPECT_EQ(r.params, param_count(widen(in.model, r.model.heads)));
  // GPT-3 itself fits this layout (Narayanan et al. trained it on 1024 A100s), so the widest
  // member is at least as wide as GPT-3.
  EXPECT_GE(r.model.hidden, 12288);
  // With activations counted the answer is below the states-only bound for the same GPUs: the
  // states of ceil(Psi / (tp x pp)) per rank at ZeRO-1 over dp 16 (memory_model.h).
  const int64_t states_only =
      largest_model_params(in.cluster.gpu.memory_bytes, 16, 64, 1, in.training.state_bytes);
  EXPECT_LT(r.params, states_only);
}

TEST(LargestModel, ActivationsShrinkTheAnswer) {
  // Longer sequences at the same depth cost activations, not states: the widest fit narrows.
  PlanInput in = gpt3_on("128x8xA100");
  const Layout l = megatron_layout();
  const LargestShape short_seq = largest_model_shape(in, l);
  in.model.seq = 8192;
  const LargestShape long_seq = largest_model_shape(in, l);
  EXPECT_LT(long_seq.model.hidden, short_seq.model.hidden);
  // Full recompute keeps one tensor per layer instead of the selective set: wider again.
  Layout full = l;
  full.recompute = Recompute::full;
  EXPECT_GE(largest_model_shape(in, full).model.hidden, long_seq.model.hidden);
}

TEST(LargestModel, LlamaFamilyKeepsItsKvGroupsAndFfnRatio) {
  PlanInput in;
  in.model = model_preset("llama2-70b");  // 64 heads, 8 KV heads: groups of 8
  in.training.global_batch = in.model.default_global_batch;
  in.cluster = parse_cluster("64x8xA100");
  Layout l;
  l.tp = 8;
  l.pp = 4;
  l.dp = 16;
  l.zero_stage = 1;
  l.recompute = Recompute::full;
  const LargestShape r = largest_model_shape(in, l);
  ASSERT_GT(r.model.hidden, 0);
  EXPECT_EQ(r.heads_step, 64);
  EXPECT_EQ(r.model.heads / r.model.kv_heads, 8);
  EXPECT_EQ(r.model.ffn_hidden % 256, 0);
  const ModelShape same = widen(in.model, 64);
  EXPECT_EQ(same.ffn_hidden, 28672);  // the preset's own 28672 = 3.5 x 8192, a multiple of 256
}

TEST(LargestModel, RefusesWhatItCannotAnswer) {
  PlanInput in = gpt3_on("128x8xA100");
  Layout l = megatron_layout();
  l.pp = 7;  // does not divide 96 layers
  l.dp = 1024 / (8 * 7);
  EXPECT_THROW(largest_model_shape(in, l), Error);
  in.model.params_override = 1'000'000'000;
  EXPECT_THROW(largest_model_shape(in, megatron_layout()), Error);
  // Nothing fits a GPU too small for even 8 heads: hidden 0.
  PlanInput tiny = gpt3_on("128x8xA100");
  tiny.cluster.gpu.memory_bytes = 1e9;
  EXPECT_EQ(largest_model_shape(tiny, megatron_layout()).model.hidden, 0);
}

}  // namespace
}  // namespace dtrain::plan
