// The planner's engine profile and `dtrain train` describe one rank of dtrain's engine the same
// way, so predict_rank (cost/rank_prediction.h) gives both the same peak: on a grid of small
// layouts (DP, TP with and without SP, pipelines with every schedule and interleaving, ZeRO 0-3,
// each recompute mode, CP, fp32 and bf16; for GPT, for Llama (grouped-query, untied head) and for
// a Mixtral-like Llama under EP), every stage's description from plan::engine_rank_of
// equals the engine's (train::describe_rank over the table-free counts) field by field, and the
// plan's engine_peak_bytes equals train::planned_rank_peak_bytes, the figure the memory check
// before a run compares.
#include <gtest/gtest.h>

#include <string>

#include "dtrain/core/check.h"
#include "dtrain/engine/layout.h"
#include "dtrain/plan/planner.h"
#include "dtrain/report/rank_description.h"

namespace dtrain::train {
namespace {

struct Case {
  int dp = 1, tp = 1, pp = 1, cp = 1, vp = 1, zero = 0, microbatches = 1, ep = 1;
  bool sp = false, bf16 = false;
  Recompute recompute = Recompute::none;
  plan::ScheduleKind schedule = plan::ScheduleKind::one_f_one_b;
};

std::string label(const Case& k) {
  return str("dp", k.dp, " ep", k.ep, " tp", k.tp, k.sp ? "+sp" : "", " pp", k.pp, " vp", k.vp,
             " cp", k.cp, " zero", k.zero, " M", k.microbatches, " ", plan::name(k.schedule),
             " recompute ", name(k.recompute), k.bf16 ? " bf16" : " fp32");
}

void expect_same_rank(const plan::EngineRank& a, const plan::EngineRank& b) {
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.llama, b.llama);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.ffn, b.ffn);
  EXPECT_EQ(a.ep, b.ep);
  EXPECT_EQ(a.vocab_local, b.vocab_local);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.micro_batch, b.micro_batch);
  EXPECT_EQ(a.microbatches, b.microbatches);
  EXPECT_EQ(a.bucket_bytes, b.bucket_bytes);
  EXPECT_EQ(a.mixed_precision, b.mixed_precision);
  EXPECT_EQ(a.sequence_parallel, b.sequence_parallel);
  EXPECT_EQ(a.routed_blocks, b.routed_blocks);
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.split_backward, b.split_backward);
  EXPECT_EQ(a.inflight, b.inflight);
  for (int chunk = 0; chunk < a.partition.chunks(); ++chunk) {
    EXPECT_EQ(a.partition.layer_count(a.stage, chunk), b.partition.layer_count(b.stage, chunk));
  }
}

// The grid of layouts every model is compared on (EP ones for a model with experts).
std::vector<Case> layout_grid(bool experts) {
  std::vector<Case> cases;
  for (const bool bf16 : {false, true}) {
    for (const Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
      for (int zero = 0; zero <= 3; ++zero) {
        cases.push_back({.dp = 2, .zero = zero, .bf16 = bf16, .recompute = rc});
        cases.push_back(
            {.dp = 2, .tp = 2, .zero = zero, .sp = true, .bf16 = bf16, .recompute = rc});
      }
      cases.push_back({.tp = 2, .bf16 = bf16, .recompute = rc});
      cases.push_back({.dp = 2, .cp = 2, .zero = 1, .bf16 = bf16, .recompute = rc});
      for (const plan::ScheduleKind s : {plan::ScheduleKind::one_f_one_b, plan::ScheduleKind::gpipe,
                                         plan::ScheduleKind::zero_bubble_h1}) {
        cases.push_back(
            {.pp = 2, .zero = 3, .microbatches = 4, .bf16 = bf16, .recompute = rc, .schedule = s});
        cases.push_back({.dp = 2,
                         .pp = 2,
                         .zero = 2,
                         .microbatches = 2,
                         .bf16 = bf16,
                         .recompute = rc,
                         .schedule = s});
      }
      cases.push_back({.pp = 2,
                       .vp = 2,
                       .microbatches = 4,
                       .bf16 = bf16,
                       .recompute = rc,
                       .schedule = plan::ScheduleKind::interleaved});
    }
  }
  if (experts) {
    for (int zero = 0; zero <= 3; ++zero) {
      cases.push_back({.dp = 2, .zero = zero, .ep = 2});
      cases.push_back({.dp = 4, .zero = zero, .ep = 2, .recompute = Recompute::full});
    }
    cases.push_back({.dp = 2, .pp = 2, .zero = 1, .microbatches = 2, .ep = 2});
  }
  return cases;
}

// Every layout of the grid, every stage: the planner's description of the rank equals train's
// and both give the same peak; returns the (layout, stage) points compared.
int compare_on_grid(const model::GptConfig& g) {
  const int64_t batch = 8;
  int compared = 0;
  for (const Case& k : layout_grid(g.moe.enabled())) {
    SCOPED_TRACE(label(k));
    StepConfig step;
    step.model = g;
    step.batch = batch;
    step.seq = g.context;
    step.recompute = k.recompute;
    step.precision = k.bf16 ? model::Precision::bf16 : model::Precision::fp32;
    LayoutOptions o;
    o.dp = k.dp;
    o.tp = k.tp;
    o.pp = k.pp;
    o.cp = k.cp;
    o.ep = k.ep;
    o.zero_stage = k.zero;
    o.sequence_parallel = k.sp;
    o.schedule = k.schedule;
    if (k.vp > 1) o.chunks = k.vp;
    if (k.pp > 1) {
      o.microbatches = k.microbatches;
    }
    const EngineConfig c = make_engine_config(step, o);

    plan::PlanInput in;
    in.model.name = "custom";
    in.model.layers = g.layers;
    in.model.hidden = g.channels;
    in.model.heads = g.heads;
    if (g.llama()) {
      in.model.family = plan::ModelFamily::llama;
      in.model.kv_heads = g.kv_heads;
      in.model.ffn_hidden = g.ffn_hidden;
    }
    // The planner's routed layers where the engine's are (blocks every - 1, 2 every - 1, ...).
    in.model.moe = {.experts = g.moe.experts,
                    .top_k = g.moe.top_k,
                    .every = g.moe.every,
                    .first_dense = g.moe.every - 1};
    in.model.vocab = g.vocab;
    in.model.seq = g.context;
    in.model.count_final_norm = true;
    in.training.global_batch = batch;
    in.training.state_bytes = k.bf16 ? plan::kMixedPrecisionAdam : plan::kFp32Adam;
    in.training.activation_bytes = k.bf16 ? 2 : 4;
    in.training.activation_count =
        k.bf16 ? plan::ActivationCount::engine_mixed : plan::ActivationCount::engine;
    in.training.bucket_bytes = static_cast<double>(c.bucket_bytes);
    in.cluster = plan::parse_cluster(str("1x", c.world(), "xH100"));
    plan::Layout l;
    l.dp = k.dp;
    l.tp = k.tp;
    l.pp = k.pp;
    l.cp = k.cp;
    l.ep = k.ep;
    l.cp_algo = c.cp_algorithm;
    l.vp = k.vp;
    l.zero_stage = k.zero;
    l.sequence_parallel = k.sp;
    l.recompute = k.recompute;
    l.schedule = k.schedule;
    l.micro_batch = c.micro_batch();
    for (int stage = 0; stage < k.pp; ++stage) {
      SCOPED_TRACE(str("stage ", stage));
      const std::optional<plan::EngineRank> planned =
          plan::engine_rank_of(in, l, c.microbatches, stage);
      EXPECT_TRUE(planned.has_value());
      if (!planned) return compared;
      const plan::EngineRank engine = describe_rank(c, stage, stage_param_counts(c, stage));
      expect_same_rank(*planned, engine);
      EXPECT_EQ(plan::predict_rank(*planned).peak_bytes, planned_rank_peak_bytes(c, stage));
      EXPECT_GT(planned_rank_peak_bytes(c, stage), 0);
      ++compared;
    }
    // The plan carries the same figure for the stage it reports.
    const plan::Plan p = plan::evaluate(in, l);
    EXPECT_EQ(p.memory.engine_peak_bytes, planned_rank_peak_bytes(c, p.memory.stage));
  }
  return compared;
}

model::GptConfig small_gpt() {
  model::GptConfig g;
  g.layers = 4;
  g.channels = 32;
  g.heads = 4;
  g.vocab = 250;  // not a multiple of tp: the padded vocabulary's rows
  g.context = 32;
  return g;
}

TEST(EngineProfile, ThePlannerAndTrainPredictTheSameRankPeak) {
  EXPECT_GE(compare_on_grid(small_gpt()), 100);
}

// The Llama family: RMSNorm, grouped-query K/V heads (split over TP; multi-query: a copy of the
// one head on each TP rank), SwiGLU, no wpe, the untied head the last stage's unit.
TEST(EngineProfile, ThePlannerAndTrainPredictTheSameLlamaRankPeak) {
  for (const int64_t kv : {2, 1}) {
    model::GptConfig g = small_gpt();
    g.family = model::ModelFamily::llama;
    g.kv_heads = kv;
    g.ffn_hidden = 80;
    EXPECT_GE(compare_on_grid(g), 100);
  }
}

// Mixtral-like (every block routed to 2 of 4 SwiGLU experts; every second block routed): EP
// with DP, ZeRO 0-3 and a pipeline, beside the dense layouts.
TEST(EngineProfile, ThePlannerAndTrainPredictTheSameMixtralRankPeak) {
  for (const int64_t every : {1, 2}) {
    model::GptConfig g = small_gpt();
    g.family = model::ModelFamily::llama;
    g.kv_heads = 2;
    g.ffn_hidden = 80;
    g.moe = {.experts = 4, .top_k = 2, .every = every};
    EXPECT_GE(compare_on_grid(g), 100);
  }
}

TEST(EngineProfile, ThePapersCountHasNoEngineRank) {
  plan::PlanInput in;
  in.model = plan::model_preset("gpt3-175b");
  in.cluster = plan::parse_cluster("1x8xA100-80GB");
  EXPECT_FALSE(plan::engine_rank_of(in, plan::Layout{}, 1, 0).has_value());
}

}  // namespace
}  // namespace dtrain::train
