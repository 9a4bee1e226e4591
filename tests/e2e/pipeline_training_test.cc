// `dtrain train --pp` through the real entry point (train::run_training with a PipelineSetup):
// the Trainer's losses, evaluations included, equal the serial run's; the summary's pipeline
// report holds every stage's in-flight activations beside the checker's count and its bytes
// sent beside the plan, the measured bubble and the predicted one as plan::pipeline_bubble
// gives it for the measured times; the --trace file is a Chrome trace with a compute and a
// communication track per rank and one event per action, and the --timeline file an SVG.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "dtrain/parallel/pipeline_schedule.h"
#include "dtrain/plan/pipeline_model.h"
#include "dtrain/train/run.h"

namespace dtrain::train {
namespace {

TrainOptions quick() {
  TrainOptions o;
  o.model = "tiny";
  o.layers = 4;
  o.steps = 3;
  o.eval_every = 0;
  o.eval_batches = 1;
  return o;
}

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PipelineTraining, MatchesTheSerialRunAndReportsTheBubbleTraceAndTimeline) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("dtrain_pp_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const TrainSummary serial = run_training(quick(), nullptr);

  TrainOptions o = quick();
  o.pipeline.pp = 2;
  o.pipeline.microbatches = 4;
  o.pipeline.schedule = "1f1b";
  o.pipeline.trace_path = (dir / "t.json").string();
  o.pipeline.timeline_path = (dir / "t.svg").string();
  const TrainSummary s = run_training(o, nullptr);

  // The same training: losses within float rounding (see pipeline_equality_test.cc).
  ASSERT_EQ(s.train_losses.size(), serial.train_losses.size());
  for (size_t i = 0; i < s.train_losses.size(); ++i) {
    EXPECT_NEAR(s.train_losses[i], serial.train_losses[i], 4e-6) << "step " << i + 1;
  }
  EXPECT_NEAR(s.final_val_loss, serial.final_val_loss, 4e-6);
  EXPECT_EQ(s.param_count, serial.param_count);

  ASSERT_TRUE(s.pipeline.has_value());
  const PipelineReport& p = *s.pipeline;
  ASSERT_EQ(p.stages.size(), 2u);
  EXPECT_EQ(p.micro_batch, 2);  // the tiny preset's batch 8 in 4 micro-batches
  int64_t params = 0;
  for (const PipelineStageRow& r : p.stages) {
    EXPECT_EQ(r.measured_inflight, r.checker_inflight) << "stage " << r.rank;
    EXPECT_EQ(r.checker_inflight, std::min(2 - r.rank, 4));  // 1F1B: min(P - stage, M)
    EXPECT_EQ(r.bytes_sent, r.formula_bytes_sent) << "stage " << r.rank;
    EXPECT_EQ(r.params_bytes, r.param_count * 4);
    EXPECT_EQ(r.optimizer_bytes, r.param_count * 8);
    params += r.param_count;
  }
  EXPECT_EQ(params, s.param_count + 256 * 32);  // both ends hold wte (V x C)
  EXPECT_GE(p.measured_bubble, 0.0);
  EXPECT_LT(p.measured_bubble, 1.0);
  const plan::BubbleEstimate predicted = plan::pipeline_bubble(
      plan::ScheduleKind::one_f_one_b, 2, 4, 1, {p.forward_ms, p.backward_ms, p.weight_ms});
  EXPECT_NEAR(p.predicted_bubble, predicted.fraction_of_total, 1e-12);
  EXPECT_NEAR(p.predicted_bubble, 1.0 / 5.0, 1e-12);  // (P-1)/(M+P-1) for any F, B
  EXPECT_NEAR(p.simulated_bubble, p.predicted_bubble, 1e-9);

  // The trace: per rank a compute track (2r) and a communication track (2r+1), an event per
  // action of the last step plus the steps after the pipeline (wte sum, norm, AdamW).
  const nlohmann::json trace = nlohmann::json::parse(read(dir / "t.json"));
  const parallel::PipelineSchedule schedule = parallel::make_1f1b(2, 4);
  std::map<int, int> events_per_track;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++events_per_track[e["tid"].get<int>()];
    EXPECT_GE(e["dur"].get<double>(), 0.0);
  }
  for (int r = 0; r < 2; ++r) {
    int compute = 0, communication = 0;
    for (const parallel::Action& a : schedule.per_rank[static_cast<size_t>(r)]) {
      (parallel::is_compute(a.kind) ? compute : communication) += 1;
    }
    EXPECT_EQ(events_per_track[2 * r], compute + 3) << "rank " << r;
    EXPECT_EQ(events_per_track[2 * r + 1], communication) << "rank " << r;
  }
  const std::string svg = read(dir / "t.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("rank 1"), std::string::npos);
  EXPECT_NE(svg.find("measured, bubble"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dtrain::train
