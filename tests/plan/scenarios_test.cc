// The scenarios run, and their key figures are the formulas' (read back from the JSON form, whose
// numbers are unrounded).
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dtrain/core/check.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/cost/memory_model.h"
#include "dtrain/cost/model_presets.h"
#include "dtrain/cost/pipeline_model.h"
#include "dtrain/plan/scenarios.h"

namespace dtrain::plan {
namespace {

nlohmann::json rows(const nlohmann::json& scenario, size_t table) {
  return scenario.at("tables").at(table).at("rows");
}

TEST(Scenarios, EveryScenarioRunsAndPrints) {
  ASSERT_EQ(scenarios().size(), 5u);
  for (const ScenarioInfo& s : scenarios()) {
    const ScenarioReport r = run_scenario(s.name);
    EXPECT_EQ(r.name, s.name);
    EXPECT_FALSE(r.tables.empty()) << s.name;
    EXPECT_FALSE(r.findings.empty()) << s.name;
    const std::string text = format_scenario(r);
    EXPECT_NE(text.find("Findings"), std::string::npos);
    const nlohmann::json j = nlohmann::json::parse(scenario_json(r).dump());
    EXPECT_EQ(j.at("name"), s.name);
  }
  EXPECT_NE(format_scenario_list().find("ddp-vs-fsdp"), std::string::npos);
}

TEST(Scenarios, UnknownNameListsTheKnownOnes) {
  try {
    run_scenario("size-1t");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("size-70b"), std::string::npos) << e.what();
  }
}

TEST(Scenarios, Size70bStatesAreSixteenBytesPerParameter) {
  const nlohmann::json j = scenario_json(run_scenario("size-70b"));
  const double psi = static_cast<double>(param_count(model_preset("llama2-70b")));
  const nlohmann::json states = rows(j, 0);
  EXPECT_DOUBLE_EQ(states.at(0).at("total per GPU").get<double>(), 16 * psi);  // ~1.1 TB
  // ZeRO-3 over 16 GPUs: 16 Psi / 16, about 69 GB per GPU.
  EXPECT_NEAR(states.at(3).at("total per GPU").get<double>(), psi, 16);
  EXPECT_NEAR(states.at(3).at("total per GPU").get<double>() / 1e9, 70, 1.5);
}

TEST(Scenarios, StalledScaleOutIsTheRingFormula) {
  const nlohmann::json j = scenario_json(run_scenario("stalled-scaleout"));
  const double grads = 2.0 * static_cast<double>(param_count(model_preset("megatron-1.7b")));
  const nlohmann::json flat = rows(j, 0);
  const int gpus[4] = {8, 16, 32, 64};
  for (int i = 0; i < 4; ++i) {
    const double n = gpus[i];
    EXPECT_NEAR(flat.at(i).at("bytes sent per rank").get<double>(), 2 * (n - 1) / n * grads,
                grads * 1e-12);
  }
  // Network-bound at 64: the all-reduce takes longer than the compute.
  EXPECT_GT(flat.at(3).at("all-reduce").get<double>(), flat.at(3).at("compute").get<double>());
  // Hierarchical + overlap recovers most of the step.
  const nlohmann::json fixes = rows(j, 1);
  EXPECT_GT(fixes.at(3).at("compute / step").get<double>(),
            2 * fixes.at(0).at("compute / step").get<double>());
}

TEST(Scenarios, PlacementKeepsTpInsideTheNode) {
  const nlohmann::json j = scenario_json(run_scenario("3d-placement"));
  const nlohmann::json t = rows(j, 0);
  EXPECT_EQ(t.at(0).at("rank order"), "tp-dp-pp");
  EXPECT_LT(t.at(0).at("TP time").get<double>(), t.at(1).at("TP time").get<double>());
  EXPECT_LT(t.at(0).at("step").get<double>(), t.at(1).at("step").get<double>());
  EXPECT_DOUBLE_EQ(t.at(0).at("TP bytes/rank").get<double>(),
                   t.at(1).at("TP bytes/rank").get<double>());
}

TEST(Scenarios, GpipeVs1f1bBubbleAndMemory) {
  const nlohmann::json j = scenario_json(run_scenario("gpipe-vs-1f1b"));
  const nlohmann::json t = rows(j, 0);
  // Rows: (gpipe, 1f1b, interleaved) at M = 8, then at M = 64.
  for (int m : {8, 64}) {
    const size_t base = m == 8 ? 0 : 3;
    const double p = 8;
    // The simulated schedules: GPipe and 1F1B wait alike; a little under the closed forms
    // (P-1)/(M+P-1) and (P-1)/M, since the head makes the last stage the slowest and the
    // lighter stages it waits for fill and drain sooner (planner_test.cc says by how much).
    const double gpipe = t.at(base).at("bubble / step").get<double>();
    const double onef = t.at(base + 1).at("bubble / step").get<double>();
    EXPECT_NEAR(gpipe, onef, 1e-12);
    EXPECT_LT(onef, (p - 1) / (m + p - 1));
    EXPECT_GT(onef, 0.97 * (p - 1) / (m + p - 1));
    const double onef_ideal = t.at(base + 1).at("bubble / ideal").get<double>();
    EXPECT_LT(onef_ideal, (p - 1) / m);
    EXPECT_GT(onef_ideal, 0.97 * (p - 1) / m);
    EXPECT_DOUBLE_EQ(t.at(base).at("in flight (stage 0)").get<double>(), m);
    EXPECT_DOUBLE_EQ(t.at(base + 1).at("in flight (stage 0)").get<double>(), std::min(8, m));
  }
  EXPECT_DOUBLE_EQ(t.at(3).at("activations (stage 0)").get<double>(),
                   8 * t.at(4).at("activations (stage 0)").get<double>());
}

TEST(Scenarios, FsdpMovesOneAndAHalfTimesTheBytes) {
  const nlohmann::json j = scenario_json(run_scenario("ddp-vs-fsdp"));
  const nlohmann::json t = rows(j, 0);
  ASSERT_EQ(t.at(0).at("sharding"), "DDP (none)");
  ASSERT_EQ(t.at(3).at("sharding"), "FSDP (ZeRO-3)");
  EXPECT_NEAR(
      t.at(3).at("bytes sent/rank").get<double>() / t.at(0).at("bytes sent/rank").get<double>(),
      1.5, 1e-9);
  EXPECT_LT(t.at(0).at("fits").get<double>(), 0);  // DDP does not fit
  EXPECT_GT(t.at(3).at("fits").get<double>(), 0);  // FSDP does
}

}  // namespace
}  // namespace dtrain::plan
