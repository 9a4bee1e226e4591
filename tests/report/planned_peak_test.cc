// The start-up memory check's parameter counts without a table (stage_param_counts(config,
// stage)) against the same counts read off the stage's real TP-local table, and the planned peak
// bytes both ways, over a grid of layouts: the fast path must give the figures the table gives.
#include <gtest/gtest.h>

#include <chrono>
#include <ostream>

#include "dtrain/engine/layout.h"
#include "dtrain/model/gpt_stage.h"
#include "dtrain/model/moe_dispatch.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/parallel/data_parallel.h"
#include "dtrain/parallel/pipeline_executor.h"
#include "dtrain/report/layout_report.h"

namespace dtrain::train {

// A failing comparison prints the counts, not their bytes.
void PrintTo(const StageParamCounts& c, std::ostream* os) {
  *os << "params " << c.params << ", embeddings " << c.embeddings << ", experts " << c.experts
      << ", " << c.units.size() << " other units";
  for (size_t i = 0; i < c.units.size() && i < 4; ++i) *os << (i == 0 ? ": " : ", ") << c.units[i];
}

namespace {

// The table-based counts: what the engine's model holds at `stage` on one TP rank (and, under
// EP, its E / ep experts of each routed block).
StageParamCounts counts_from_table(const EngineConfig& c, int stage) {
  const model::GptStage gs = parallel::stage_of(c.partition, stage);
  const model::ParamTable table = model::ep_local_table(
      model::tp_local_table(model::gpt_stage_param_table(c.step.model, gs), c.step.model, c.tp),
      c.step.model.moe, c.ep);
  int64_t experts = 0;
  for (const model::ParamTensor& t : table.tensors()) {
    if (c.ep > 1 && model::is_expert_tensor(t.name)) experts += t.count;
  }
  return stage_param_counts(parallel::StageUnits(table, gs), table.total_count(), experts);
}

StepConfig small_step(Recompute recompute, model::Precision precision) {
  StepConfig s;
  // An odd vocabulary, so TP pads it; six blocks, so three stages of two or an uneven cut fit.
  s.model = {.vocab = 67, .context = 16, .layers = 6, .heads = 4, .channels = 32};
  s.batch = 24;  // 12 rows per rank at --dp 2: every micro-batch count below divides it
  s.seq = 16;
  s.recompute = recompute;
  s.precision = precision;
  return s;
}

struct PipelineCase {
  int pp;
  int microbatches;
  plan::ScheduleKind schedule;
  std::vector<int> stage_layers;
};

TEST(PlannedPeak, TableFreeCountsGiveTheTableFigures) {
  const std::vector<PipelineCase> pipelines = {
      {1, 1, plan::ScheduleKind::one_f_one_b, {}},    {2, 4, plan::ScheduleKind::one_f_one_b, {}},
      {3, 3, plan::ScheduleKind::gpipe, {1, 3, 2}},   {2, 4, plan::ScheduleKind::interleaved, {}},
      {2, 2, plan::ScheduleKind::zero_bubble_h1, {}},
  };
  int layouts = 0;
  for (const int dp : {1, 2}) {
    for (const int tp : {1, 2}) {
      for (const int zero : {0, 1, 2, 3}) {
        for (const Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
          for (const model::Precision precision :
               {model::Precision::fp32, model::Precision::bf16}) {
            for (const PipelineCase& p : pipelines) {
              if (zero > 0 && dp == 1) continue;  // ZeRO needs a DP group
              LayoutOptions o;
              o.dp = dp;
              o.tp = tp;
              o.pp = p.pp;
              o.zero_stage = zero;
              o.microbatches = p.microbatches;
              o.schedule = p.schedule;
              o.stage_layers = p.stage_layers;
              const EngineConfig c = make_engine_config(small_step(recompute, precision), o);
              for (int stage = 0; stage < c.pp; ++stage) {
                SCOPED_TRACE(testing::Message()
                             << "dp " << dp << " tp " << tp << " pp " << p.pp << " zero " << zero
                             << " recompute " << name(recompute) << " precision "
                             << model::precision_name(precision) << " schedule "
                             << plan::name(p.schedule) << " stage " << stage);
                const StageParamCounts table = counts_from_table(c, stage);
                const StageParamCounts fast = stage_param_counts(c, stage);
                EXPECT_EQ(fast, table);
                EXPECT_GT(table.params, 0);
                EXPECT_EQ(planned_rank_peak_bytes(c, stage),
                          planned_rank_peak_bytes(c, stage, table));
                ++layouts;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(layouts, 300);
}

// Mixtures of experts: routed blocks (every block, or every second) hold their router and E / ep
// experts, which EP shards over the expert-DP group; the counts, and the peaks they give, both
// ways.
TEST(PlannedPeak, ExpertCountsWithoutATable) {
  int layouts = 0;
  for (const int every : {1, 2}) {
    for (const int dp : {2, 4}) {
      for (const int ep : {1, 2}) {
        for (const int zero : {0, 1, 2, 3}) {
          for (const int pp : {1, 2}) {
            StepConfig step = small_step(Recompute::none, model::Precision::fp32);
            step.model.moe = {.experts = 4, .top_k = 2, .every = every};
            LayoutOptions o;
            o.dp = dp;
            o.ep = ep;
            o.pp = pp;
            o.zero_stage = zero;
            o.microbatches = pp;
            const EngineConfig c = make_engine_config(step, o);
            for (int stage = 0; stage < c.pp; ++stage) {
              SCOPED_TRACE(testing::Message()
                           << "every " << every << " dp " << dp << " ep " << ep << " zero " << zero
                           << " pp " << pp << " stage " << stage);
              const StageParamCounts table = counts_from_table(c, stage);
              EXPECT_EQ(stage_param_counts(c, stage), table);
              EXPECT_EQ(table.experts > 0, ep > 1);
              EXPECT_EQ(planned_rank_peak_bytes(c, stage),
                        planned_rank_peak_bytes(c, stage, table));
              ++layouts;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(layouts, 2 * 2 * 2 * 4 * 3);
}

// The point of the table-free counts: a model of 100,000 blocks (a table of 1.2 million named
// tensors) is sized in a small fraction of a second, and its figure grows with the blocks.
TEST(PlannedPeak, DeepModelsAreSizedWithoutATable) {
  StepConfig step = small_step(Recompute::none, model::Precision::fp32);
  step.model.layers = 100'000;
  const EngineConfig deep = make_engine_config(step, LayoutOptions{});
  const auto start = std::chrono::steady_clock::now();
  const double bytes = planned_rank_peak_bytes(deep, 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 0.5);
  step.model.layers = 6;
  const double shallow = planned_rank_peak_bytes(make_engine_config(step, LayoutOptions{}), 0);
  EXPECT_GT(bytes, 1000 * shallow);
}

}  // namespace
}  // namespace dtrain::train
