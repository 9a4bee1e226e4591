// The train report's clock table (report/clock_report.h): the error column against hand-worked
// values, the phases it leaves without a percentage, and the clock's inputs read off a CP and an
// MoE layout.
#include <gtest/gtest.h>

#include <sstream>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/cpu_usage.h"
#include "dtrain/cost/moe.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "dtrain/report/clock_report.h"
#include "e2e/equality_support.h"

namespace dtrain::train {
namespace {

TEST(ClockReport, PhaseErrorIsSignedPercent) {
  // 11 ms predicted over 10 ms measured in a 20 ms step: +10.0%; 7.5 over 10: -25.0%.
  EXPECT_EQ(phase_error_text(11e-3, 10e-3, 20e-3), "+10.0%");
  EXPECT_EQ(phase_error_text(7.5e-3, 10e-3, 20e-3), "-25.0%");
  // A phase predicted at 0 that the run measured at 5 ms of 20: the whole miss, -100.0%.
  EXPECT_EQ(phase_error_text(0, 5e-3, 20e-3), "-100.0%");
}

TEST(ClockReport, NearZeroPhasesCarryNoPercent) {
  // 0 against 0: "-", not "-100.0%" or a division by zero.
  EXPECT_EQ(phase_error_text(0, 0, 20e-3), "-");
  // Both under 2% of a 20 ms step (0.4 ms): 0.087 ms predicted, 0.001 ms measured.
  EXPECT_EQ(phase_error_text(0.087e-3, 0.001e-3, 20e-3), "-");
  // 0.39 ms and 0.001 ms: still both under 0.4 ms.
  EXPECT_EQ(phase_error_text(0.39e-3, 0.001e-3, 20e-3), "-");
  // 1 ms predicted where 0.001 ms was measured: an over-prediction, no ratio of a near-zero.
  EXPECT_EQ(phase_error_text(1e-3, 0.001e-3, 20e-3), "over");
  // Above the floor the ratio is printed: 0.6 / 0.5 = +20.0%.
  EXPECT_EQ(phase_error_text(0.6e-3, 0.5e-3, 20e-3), "+20.0%");
}

ClockReport measured_beside(double other_load_cores, double window_s) {
  ClockReport c;
  c.rates = "cluster.json";
  c.predicted.step_s = 10e-3;
  c.measured.step_s = 12e-3;
  c.other_load_cores = other_load_cores;
  c.other_load_window_s = window_s;
  c.cores = 2;
  return c;
}

TEST(ClockReport, OtherProgramsLoadBeyondItsGrainSaysMeasureAgain) {
  // Over 2 s on 2 cores the counters' grain is 2 ticks over 2 s: 2 / (ticks_per_s x 2); busy
  // means more than 0.1 core beyond it.
  const double grain = other_load_grain_cores(2, 2.0);
  EXPECT_FALSE(machine_was_busy(measured_beside(0.05 + grain, 2.0)));
  EXPECT_TRUE(machine_was_busy(measured_beside(0.15 + grain, 2.0)));
  EXPECT_FALSE(machine_was_busy(measured_beside(-1, 2.0)));  // not measured
  // 0.25 of a core over a tenth of a second is within what whole ticks can misread there (at
  // Linux's 100 ticks a second, 2 cores x 0.01 s over 0.1 s = 0.2 of a core, plus the 0.1).
  EXPECT_FALSE(machine_was_busy(measured_beside(0.25, 0.1)));

  std::ostringstream quiet, busy;
  print_clock_report(quiet, measured_beside(0, 2.0));
  print_clock_report(busy, measured_beside(0.9, 2.0));
  EXPECT_NE(quiet.str().find(
                "other programs kept 0.00 of the 2 cores busy during the measured steps (2.00 s"),
            std::string::npos)
      << quiet.str();
  EXPECT_EQ(quiet.str().find("measure again"), std::string::npos);
  EXPECT_NE(busy.str().find("other programs kept 0.90 of the 2 cores"), std::string::npos);
  EXPECT_NE(busy.str().find("measure again with nothing else running"), std::string::npos);

  const nlohmann::json j = clock_to_json(measured_beside(0.9, 2.0));
  EXPECT_DOUBLE_EQ(j.at("other_load_cores").get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(j.at("other_load_window_s").get<double>(), 2.0);
  EXPECT_TRUE(j.at("machine_was_busy").get<bool>());
  EXPECT_TRUE(clock_to_json(measured_beside(-1, 0)).at("other_load_cores").is_null());
}

StepConfig tiny_step() {
  StepConfig c;
  c.model = model::gpt_preset("tiny").config;
  c.model.layers = 4;
  c.batch = 8;
  c.seq = 16;
  return c;
}

TEST(ClockReport, ContextParallelLayoutReachesTheClock) {
  LayoutOptions o;
  o.dp = 2;
  o.cp = 2;
  o.cp_algorithm = plan::CpAlgorithm::ulysses;
  const plan::EngineClockInput in =
      engine_clock_input(make_engine_config(tiny_step(), o), 1, comm::Algorithm::ring);
  EXPECT_EQ(in.cp, 2);
  EXPECT_EQ(in.cp_algorithm, plan::CpAlgorithm::ulysses);
  EXPECT_EQ(in.data_ranks(), 4);  // gradients over dp x cp
  EXPECT_EQ(in.model.seq, 16);    // the whole sequence: the clock splits it
}

TEST(ClockReport, MixtureOfExpertsLayoutReachesTheClock) {
  // Every second block routed (model::is_moe_layer: blocks 1 and 3), 4 experts, top 2; dp 2,
  // ep 2, pp 2: each stage holds one routed block, 2 of its experts.
  StepConfig step = tiny_step();
  step.model.moe = {.experts = 4, .top_k = 2, .every = 2};
  LayoutOptions o;
  o.dp = 2;
  o.ep = 2;
  o.pp = 2;
  o.microbatches = 2;
  const plan::EngineClockInput in =
      engine_clock_input(make_engine_config(step, o), 1, comm::Algorithm::ring);
  EXPECT_EQ(in.model.moe.experts, 4);
  EXPECT_EQ(in.model.moe.top_k, 2);
  EXPECT_EQ(in.ep, 2);
  // The plan's routed layers are the engine's: 1 and 3.
  for (int64_t l = 0; l < 4; ++l) {
    EXPECT_EQ(plan::is_moe_layer(in.model, l), model::is_moe_layer(step.model.moe, l)) << l;
  }
  // One routed block per stage, 2 experts of 8C^2 + 5C parameters each; the busiest stage's
  // parameters the plan's engine counts: the first's dense and routed block, wte and wpe (the
  // last holds the final LayerNorm, 2C, and the tied wte: fewer than wpe).
  const int64_t C = step.model.channels;
  EXPECT_EQ(in.stage_expert_params, 2 * (8 * C * C + 5 * C));
  const int64_t V = step.model.vocab;
  EXPECT_EQ(in.stage_params, plan::engine_layer_param_count(in.model, 1) +
                                 plan::engine_moe_layer_param_count(in.model, 2) + V * C +
                                 step.model.context * C);
  EXPECT_TRUE(in.tokens_per_expert.empty());  // the prediction assumes uniform routing
}

// An MoE engine config (4 experts, top 2, every block routed) on `o`'s layout, with a cluster
// file that carries measured rates or not (the engine gathers block routings only with them).
EngineConfig moe_clock_config(StepConfig& step, const LayoutOptions& o, bool rates) {
  step.model.moe = {.experts = 4, .top_k = 2, .every = 1};
  EngineConfig config = make_engine_config(step, o);
  plan::Cluster cluster;
  cluster.gpu.measured.present = rates;
  config.cluster = cluster;
  return config;
}

TEST(ClockReport, EngineKeepsEachRoutedBlocksRoutingForTheClock) {
  // dp 4, ep 2, pp 2, 2 micro-batches of 1 row of 16 tokens, 4 experts top 2, every block
  // routed: per step 2 stages x 2 EP groups x 2 blocks x 2 micro-batches = 16 entries, each the
  // rows its group's 4 experts computed: ep x 16 tokens x 2 = 64 (no capacity: none dropped).
  StepConfig step = tiny_step();
  LayoutOptions o;
  o.dp = 4;
  o.ep = 2;
  o.pp = 2;
  o.microbatches = 2;
  constexpr int kSteps = 2;
  for (const bool rates : {false, true}) {
    const EngineConfig config = moe_clock_config(step, o, rates);
    const std::vector<data::Batch> data = e2e::random_batches(step, kSteps);
    comm::threads::run_ranks(8, [&](comm::Communicator& comm) {
      Engine engine(config, comm);
      std::vector<StepStats> stats;
      for (const data::Batch& b : data) stats.push_back(engine.train_step(b, 1e-3f));
      if (comm.rank() != 0) return;
      // Only a clock with measured rates reads them: nothing is gathered otherwise.
      if (!rates) {
        EXPECT_TRUE(engine.block_routings().empty());
        return;
      }
      ASSERT_EQ(engine.block_routings().size(), static_cast<size_t>(kSteps));
      for (int s = 0; s < kSteps; ++s) {
        const auto& entries = engine.block_routings()[static_cast<size_t>(s)];
        ASSERT_EQ(entries.size(), 16u);
        std::vector<double> per_expert(4, 0.0);
        for (const std::vector<double>& rows : entries) {
          ASSERT_EQ(rows.size(), 4u);
          double sum = 0;
          for (size_t e = 0; e < 4; ++e) {
            sum += rows[e];
            per_expert[e] += rows[e];
          }
          EXPECT_EQ(sum, 64);
        }
        // Over the entries, each expert's rows are the step's routing report (gathered apart).
        for (size_t e = 0; e < 4; ++e) {
          EXPECT_EQ(per_expert[e],
                    static_cast<double>(stats[static_cast<size_t>(s)].expert_tokens[e]))
              << "step " << s << " expert " << e;
        }
      }
    });
  }
}

TEST(ClockReport, ALongRunKeepsTheFirstAndTheLatestRoutings) {
  // dp 2, ep 2, 2 blocks, 35 steps: the first step and the latest 32 are kept, 2 entries each.
  StepConfig step = tiny_step();
  step.model.layers = 2;
  LayoutOptions o;
  o.dp = 2;
  o.ep = 2;
  constexpr int kSteps = 35;
  const EngineConfig config = moe_clock_config(step, o, true);
  const std::vector<data::Batch> data = e2e::random_batches(step, kSteps);
  comm::threads::run_ranks(2, [&](comm::Communicator& comm) {
    Engine engine(config, comm);
    std::vector<std::vector<std::vector<double>>> first;
    for (int s = 0; s < kSteps; ++s) {
      engine.train_step(data[static_cast<size_t>(s)], 1e-3f);
      if (s == 0) first = engine.block_routings();
    }
    if (comm.rank() != 0) return;
    ASSERT_EQ(engine.block_routings().size(), 33u);
    EXPECT_EQ(engine.block_routings().front(), first.front());
    for (const auto& entries : engine.block_routings()) EXPECT_EQ(entries.size(), 2u);
  });
}

}  // namespace
}  // namespace dtrain::train
