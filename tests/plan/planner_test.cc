// evaluate: every figure of a plan is the formula headers' figure (no second copy), the bad
// layouts the issue lists fail with the flag named, and a layout that does not fit is reported,
// not refused.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dtrain/core/check.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/plan/planner.h"

namespace dtrain::plan {
namespace {

PlanInput input(std::string_view model, std::string_view cluster, int64_t batch) {
  PlanInput in;
  in.model = model_preset(model);
  in.cluster = parse_cluster(cluster);
  in.training.global_batch = batch;
  in.training.tokens = 1e12;
  return in;
}

std::string error_of(const PlanInput& in, const Layout& l) {
  try {
    evaluate(in, l);
  } catch (const Error& e) {
    EXPECT_EQ(layout_error(in, l), e.what());
    return e.what();
  }
  return "";
}

TEST(Planner, BadLayoutsNameTheirFlags) {
  const PlanInput in = input("llama2-70b", "8x8xH100", 1024);
  Layout l;
  l.dp = 2;
  l.tp = 8;
  l.pp = 8;
  EXPECT_EQ(error_of(in, l),
            "--dp 2 x --tp 8 x --pp 8 = 128 GPUs does not match the cluster's 64 (8 nodes x 8)");
  PlanInput in48 = in;
  in48.cluster = parse_cluster("6x8xH100");
  l = {};
  l.dp = 16;
  l.tp = 3;
  EXPECT_EQ(error_of(in48, l), "--tp 3 does not divide --heads 64");
  l = {};
  l.dp = 8;
  l.tp = 8;
  l.micro_batch = 3;
  EXPECT_EQ(error_of(in, l), "--micro-batch 3 x --dp 8 = 24 does not divide --global-batch 1024");
  l = {};
  l.dp = 64;
  l.zero_stage = 4;
  EXPECT_EQ(error_of(in, l), "--zero must be 0, 1, 2 or 3, got 4");
  l = {};
  l.dp = 64;
  l.micro_batch = 0;
  EXPECT_EQ(error_of(in, l), "--micro-batch must be >= 1, got 0");
  l = {};
  l.dp = 64;
  l.tp = -1;
  EXPECT_EQ(error_of(in, l), "--tp must be >= 1, got -1");
  l = {};
  l.dp = 2;
  l.tp = 1;
  l.pp = 32;
  // 32 stages do not divide 80 layers: the balanced split runs them (2 or 3 per stage).
  EXPECT_EQ(error_of(in, l), "");
  l.stage_layers = {40, 40};
  EXPECT_EQ(error_of(in, l), "--stage-layers 40,40 has 2 entries, but --pp is 32");
  l.stage_layers.assign(32, 3);
  EXPECT_NE(error_of(in, l).find("sums to 96, not --layers 80"), std::string::npos);
  l = {};
  l.dp = 64;
  l.vp = 2;
  EXPECT_EQ(error_of(in, l), "--vp 2 needs --pp > 1");
  PlanInput in96 = input("llama2-70b", "12x8xH100", 1152);
  l = {};
  l.dp = 8;
  l.tp = 12;
  EXPECT_EQ(error_of(in96, l), "--tp 12 does not divide --heads 64");
  PlanInput gqa = input("llama2-7b", "1x6xH100", 6);
  gqa.model.heads = 12;
  gqa.model.kv_heads = 4;
  gqa.model.hidden = 12 * 128;
  l = {};
  l.tp = 6;
  EXPECT_EQ(error_of(gqa, l), "--tp 6 neither divides nor is a multiple of --kv-heads 4");
}

// Counts past the bounds are refused before they are multiplied together (dp x tp x pp,
// nodes x GPUs, dp x micro-batch), so no message prints a wrapped-around number.
// Llama 3 405B's published pipeline: 126 layers on 16 stages, the first and the last one layer
// fewer (Dubey et al. 2024 §3.3.2), planned at the 128K stage's layout (Table 4: TP 8, CP 16,
// PP 16, DP 8). The preset carries the 126 layers and their own parameter count.
TEST(Planner, Llama3PipelineSplitsUnevenly) {
  const PlanInput in = input("llama3-405b-128k", "2048x8xH100", 128);
  const ModelShape& m = in.model;
  ASSERT_EQ(m.layers, 126);
  EXPECT_EQ(m.params_override, 0);
  EXPECT_EQ(param_count(m),
            126 * layer_param_count(m) + embedding_param_count(m) + head_param_count(m));
  Layout l;
  l.tp = 8;
  l.cp = 16;
  l.pp = 16;
  l.dp = 8;
  l.zero_stage = 1;
  l.recompute = Recompute::full;
  ASSERT_EQ(layout_error(in, l), "");
  // floor(126 / 16) = 7 per stage; the 126 - 16 x 7 = 14 left over go to the 14 interior ones.
  std::vector<int64_t> published(16, 126 / 16 + 1);
  published.front() = published.back() = 126 / 16;
  EXPECT_EQ(pipeline_stage_layers(m, l), published);
  const Plan p = evaluate(in, l);
  EXPECT_EQ(p.stage_layers, published);
  EXPECT_TRUE(p.memory.fits());
  // Every stage's parameters, on one TP rank, add up to the model's (tp divides every tensor).
  int64_t total = 0;
  for (int k = 0; k < l.pp; ++k) total += stage_memory(in, l, k).stage_params;
  EXPECT_EQ(total * l.tp, param_count(m));
  // The same split given as --stage-layers plans the same figures.
  Layout given = l;
  given.stage_layers.assign(published.begin(), published.end());
  const Plan q = evaluate(in, given);
  EXPECT_EQ(q.time.step_s, p.time.step_s);
  EXPECT_EQ(q.memory.total(), p.memory.total());
}

// Each stage is priced on its own layers: one layer moved from stage 0 to stage 1 takes one
// layer's time off the first and puts it on the second; the reported stage is the slowest, and
// the step is no shorter than M times its work.
TEST(Planner, EachStageIsPricedOnItsOwnLayers) {
  const PlanInput in = input("megatron-1.7b", "1x8xA100", 64);  // 24 layers
  Layout even;
  even.dp = 2;
  even.pp = 4;
  even.schedule = ScheduleKind::gpipe;  // M micro-batches in flight on every stage
  Layout uneven = even;
  uneven.stage_layers = {5, 7, 6, 6};
  const Plan a = evaluate(in, even);
  const Plan b = evaluate(in, uneven);
  ASSERT_EQ(a.time.virtual_stage_times.size(), 4u);
  ASSERT_EQ(b.time.virtual_stage_times.size(), 4u);
  const StageTimes& a0 = a.time.virtual_stage_times[0];
  const StageTimes& a1 = a.time.virtual_stage_times[1];
  const StageTimes& b0 = b.time.virtual_stage_times[0];
  const StageTimes& b1 = b.time.virtual_stage_times[1];
  EXPECT_GT(b1.forward, a1.forward);
  EXPECT_NEAR(b1.forward - a1.forward, a0.forward - b0.forward, 1e-12);
  EXPECT_NEAR(b1.backward_input - a1.backward_input, a0.backward_input - b0.backward_input, 1e-12);
  // Stages 2 and 3 keep their 6 layers and their times.
  EXPECT_EQ(b.time.virtual_stage_times[2].forward, a.time.virtual_stage_times[2].forward);
  // Memory: under GPipe every stage holds M micro-batches, so the 7-layer stage outweighs the
  // 6-layer ones by one layer's activations for each, and one layer's states.
  const MemoryBreakdown m1 = stage_memory(in, uneven, 1);
  const MemoryBreakdown m2 = stage_memory(in, uneven, 2);
  EXPECT_EQ(m1.layers, 7);
  EXPECT_EQ(m2.layers, 6);
  EXPECT_EQ(m1.stage_params - m2.stage_params, layer_param_count(in.model));
  EXPECT_NEAR(m1.activations - m2.activations, m1.inflight_microbatches * m1.activation_per_layer,
              1e-6 * m1.activations);
  EXPECT_GE(b.memory.total(), m1.total());
  // The reported stage is the slowest one (its F, B, W with the sends) ...
  double slowest = 0;
  for (const StageTimes& t : b.time.virtual_stage_times) {
    slowest = std::max(slowest, t.forward + t.backward_input + t.backward_weight);
  }
  const StageTimes& s = b.time.stage_times;
  EXPECT_NEAR(s.forward + s.backward_input + s.backward_weight - 2 * b.time.pp_message_s, slowest,
              1e-9 * slowest);
  // ... and the pipeline's makespan is at least M of them; the uneven split is slower.
  EXPECT_GE(b.time.bubble.total_time, static_cast<double>(b.microbatches) * slowest);
  EXPECT_GT(b.time.step_s, a.time.step_s);
}

TEST(Planner, HugeCountsAreRefusedBeforeTheyOverflow) {
  const PlanInput in = input("llama2-70b", "8x8xH100", 1024);
  Layout l;
  l.dp = 2000000000;
  l.tp = 2000000000;
  EXPECT_EQ(layout_error(in, l), "--dp 2000000000 is more than 1000000 GPUs");
  l = {};
  l.dp = 64;
  l.micro_batch = int64_t{1} << 62;
  EXPECT_EQ(layout_error(in, l),
            "--micro-batch 4611686018427387904 is larger than --global-batch 1024");
  l = {};
  l.dp = 8;
  l.tp = 8;
  l.pp = 2;
  l.vp = 100000;
  EXPECT_EQ(layout_error(in, l), "--vp 100000 is more than --layers 80");

  PlanInput big = in;
  big.cluster.nodes = 2000000000;
  EXPECT_THROW(validate(big), Error);
  big = in;
  big.cluster.gpu.peak_flops = HUGE_VAL;
  EXPECT_THROW(validate(big), Error);
  big = in;
  big.training.global_batch = int64_t{1} << 40;
  EXPECT_THROW(validate(big), Error);
  big = in;
  big.model.layers = 100000;
  big.model.hidden = 1000000;
  try {
    validate(big);
    ADD_FAILURE() << "a model of 1e18 parameters was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 1e+17"), std::string::npos) << e.what();
  }
}

TEST(Planner, MoreTpRanksThanKvHeadsReplicateThem) {
  const PlanInput in = input("llama2-70b", "8x8xH100", 1024);
  Layout l;
  l.dp = 4;
  l.tp = 16;
  EXPECT_EQ(layout_error(in, l), "");
  const Plan p = evaluate(in, l);
  // Each rank keeps a copy of one K/V head: more weights per rank than an even split of 1/16.
  EXPECT_GT(p.memory.stage_params, param_count(in.model) / 16);
}

TEST(Planner, ModelStatesComeFromTheMemoryModel) {
  // No TP, no PP: one rank's stage is the whole model.
  const PlanInput in = input("llama2-13b", "2x8xA100", 64);
  for (int zero = 0; zero <= 3; ++zero) {
    Layout l;
    l.dp = 16;
    l.zero_stage = zero;
    const Plan p = evaluate(in, l);
    EXPECT_EQ(p.memory.stage_params, param_count(in.model));
    const ModelStateBytes m =
        model_state_bytes(param_count(in.model), 16, zero, in.training.state_bytes);
    EXPECT_EQ(p.memory.params, static_cast<double>(m.params));
    EXPECT_EQ(p.memory.grads, static_cast<double>(m.grads));
    EXPECT_EQ(p.memory.optimizer, static_cast<double>(m.optimizer));
  }
}

// --params drives every parameter-count figure. The ZeRO paper's Figure 1 (Rajbhandari et al.
// 2020: Psi = 7.5B, N_d = 64, K = 12, GB = 10^9 bytes): model states per device 120 GB
// (baseline, 16 Psi), 31.4 GB (P_os: 4 Psi + 12 Psi/N), 16.6 GB (P_os+g: 2 Psi + 14 Psi/N) and
// 1.9 GB (P_os+g+p: 16 Psi/N = 1.875 GB), from a shape of another size (the llama2-7b preset's).
TEST(Planner, ParamsOverrideDrivesTheStateMemory) {
  PlanInput in = input("llama2-7b", "8x8xA100", 1024);
  in.model.params_override = 7'500'000'000;
  const double paper_gb[] = {120.0, 31.4, 16.6, 1.9};
  for (int zero = 0; zero <= 3; ++zero) {
    Layout l;
    l.dp = 64;
    l.zero_stage = zero;
    const MemoryBreakdown m = evaluate(in, l).memory;
    const double states_gb = (m.params + m.grads + m.optimizer) / 1e9;
    EXPECT_EQ(m.stage_params, 7'500'000'000);
    EXPECT_NEAR(states_gb, paper_gb[zero], 0.05) << "ZeRO-" << zero;
  }
  // With tp and pp the shape splits the override: every stage's share is the shape's share.
  Layout split;
  split.dp = 8;
  split.tp = 2;
  split.pp = 4;
  const PlanInput shape_only = input("llama2-7b", "8x8xA100", 1024);
  for (int stage = 0; stage < 4; ++stage) {
    const double scaled = static_cast<double>(stage_memory(in, split, stage).stage_params);
    const double own = static_cast<double>(stage_memory(shape_only, split, stage).stage_params);
    EXPECT_NEAR(scaled / own, 7.5e9 / static_cast<double>(shape_param_count(in.model)), 1e-9);
  }
}

// Training compute in the conventions people quote. Brown et al. 2020 (GPT-3), Table D.1: the
// 175B model's 300B tokens took 3.14e23 FLOPs = 3.64e3 PF-days, counted as 6 N D (their
// footnote: 6 FLOPs per parameter per token, attention left out). And Narayanan et al. 2021
// §5.1: GPT-3 on 1024 A100s at an achieved 140 TFLOP/s per GPU trains in "about 34 days",
// their Eq. 4: 8 T P / (n X) = 8 * 300e9 * 175e9 / (1024 * 140e12) s = 33.9 days; the planner
// counts the same with Eq. 3's exact terms (full recompute), which add s/(6h) and V/(16lh).
TEST(Planner, TrainingComputeAndAchievedRatesInTheirConventions) {
  PlanInput in = input("gpt3-175b", "128x8xA100", 1536);
  in.training.tokens = 300e9;
  Layout l;
  l.tp = 8;
  l.pp = 16;
  l.dp = 8;
  l.recompute = Recompute::full;
  const Plan predicted = evaluate(in, l);
  const TimeBreakdown& t = predicted.time;
  EXPECT_NEAR(t.total_flops_6nd, 3.14e23, 0.005e23);
  EXPECT_NEAR(t.total_flops_6nd / kFlopsPerPfDay, 3640, 5);
  EXPECT_EQ(t.step_source, StepTimeSource::predicted);
  EXPECT_EQ(t.predicted_step_s, t.step_s);
  // MFU and HFU: model and hardware FLOPs over the same step and peak.
  const double capacity = t.step_s * 1024 * in.cluster.gpu.peak_flops;
  EXPECT_DOUBLE_EQ(t.mfu, t.model_flops / capacity);
  EXPECT_DOUBLE_EQ(t.hfu, t.hardware_flops / capacity);
  EXPECT_GT(t.hfu, t.mfu);  // full recompute's forward again

  in.training.achieved_flops_per_gpu = 140e12;
  const TimeBreakdown a = evaluate(in, l).time;
  EXPECT_EQ(a.step_source, StepTimeSource::achieved_flops);
  EXPECT_DOUBLE_EQ(a.predicted_step_s, t.step_s);
  EXPECT_DOUBLE_EQ(a.hardware_flops_per_gpu, 140e12);
  const double iterations = 300e9 / (1536.0 * 2048);
  EXPECT_NEAR(a.days, a.hardware_flops * iterations / (1024 * 140e12) / 86400, 1e-9);
  const double paper_days = 8 * 300e9 * 175e9 / (1024 * 140e12) / 86400;
  EXPECT_NEAR(paper_days, 33.9, 0.05);
  EXPECT_NEAR(a.days / paper_days, 1.0, 0.05);

  // A measured step time sets tokens/s directly.
  in.training.achieved_flops_per_gpu = 0;
  in.training.step_time_s = 30;
  const TimeBreakdown m = evaluate(in, l).time;
  EXPECT_EQ(m.step_source, StepTimeSource::measured_step);
  EXPECT_DOUBLE_EQ(m.tokens_per_s, 1536.0 * 2048 / 30);
  EXPECT_DOUBLE_EQ(m.cluster_flops_per_s, m.hardware_flops / 30);

  // Both, or a rate above the peak, are refused (validate, as the CLI runs it).
  auto validation_error = [&] {
    try {
      validate(in);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  in.training.achieved_flops_per_gpu = 100e12;
  EXPECT_NE(validation_error().find("not both"), std::string::npos);
  in.training.step_time_s = 0;
  in.training.achieved_flops_per_gpu = 400e12;
  EXPECT_NE(validation_error().find("exceeds the GPU's peak of 312"), std::string::npos)
      << validation_error();
}

TEST(Planner, FirstStageOfOneFOneBHoldsAllLayersWorth) {
  // Korthikanti et al. 2022 §4.2.3: with 1F1B the first stage keeps P micro-batches of L/P
  // layers, L layers' worth whatever P.
  const PlanInput in = input("gpt3-175b", "8x8xA100", 64);
  double expected = -1;
  for (int pp : {2, 4, 8}) {
    Layout l;
    l.tp = 8;
    l.pp = pp;
    l.dp = 64 / (8 * pp);
    l.recompute = Recompute::selective;
    l.sequence_parallel = true;
    const MemoryBreakdown first = stage_memory(in, l, 0);
    EXPECT_EQ(first.inflight_microbatches, pp);
    const double per_layer_total = first.activations / static_cast<double>(in.model.layers);
    if (expected < 0) expected = per_layer_total;
    EXPECT_DOUBLE_EQ(per_layer_total, expected) << "pp=" << pp;
    EXPECT_DOUBLE_EQ(first.activation_per_layer, expected);
  }
}

// The bubble is the schedule simulated on the stages (pipeline_simulation.h). The head makes
// the last stage the slowest, the critical one: it waits for the lighter stages to fill and
// drain, a little less than the closed forms of equal stages ((P-1)/(M+P-1) of the step,
// Megatron's (P-1)/M of the ideal, /v interleaved), and is held by one gradient send per
// micro-batch (the activations it receives, it does not send).
TEST(Planner, BubbleIsTheSimulatedSchedule) {
  const PlanInput in = input("gpt3-175b", "8x8xA100", 64);
  Layout l;
  l.tp = 8;
  l.pp = 8;
  l.dp = 1;
  const Plan p = evaluate(in, l);
  EXPECT_EQ(p.microbatches, 64);
  const TimeBreakdown& t = p.time;
  EXPECT_LT(t.bubble.fraction_of_total, 7.0 / (64 + 7));
  EXPECT_GT(t.bubble.fraction_of_total, 0.97 * 7.0 / (64 + 7));
  EXPECT_LT(t.bubble.fraction_of_ideal, 7.0 / 64);
  EXPECT_GT(t.bubble.fraction_of_ideal, 0.97 * 7.0 / 64);
  // The step's rows add up to the simulated makespan.
  EXPECT_NEAR(t.compute_s + t.tp_s + t.pp_s + t.bubble_s, t.bubble.total_time,
              1e-12 * t.bubble.total_time);
  EXPECT_NEAR(t.step_s, t.bubble.total_time + t.dp_exposed_s + t.optimizer_s, 1e-12 * t.step_s);
  const GroupTraffic* pp = nullptr;
  for (const GroupTraffic& g : p.traffic) pp = g.group == "PP" ? &g : pp;
  ASSERT_NE(pp, nullptr);
  const double one_send = pp->time_s / static_cast<double>(pp->calls);
  EXPECT_NEAR(t.pp_s, 64 * one_send, 1e-12 * t.pp_s);
  l.schedule = ScheduleKind::interleaved;
  l.vp = 2;
  const double interleaved = evaluate(in, l).time.bubble.fraction_of_ideal;
  EXPECT_LT(interleaved, 7.0 / 64 / 2);
  EXPECT_GT(interleaved, 0.97 * 7.0 / 64 / 2);
}

TEST(Planner, SingleGpuStepIsItsFlops) {
  // One GPU, no communication, a cluster without rates (the one-efficiency clock): step =
  // hardware FLOPs / (peak x efficiency), and MFU = efficiency x model / hardware FLOPs. With
  // rates, time_model_test.cc's SingleGpuStepIsItsOperations.
  PlanInput in = input("megatron-1.7b", "1x1xA100", 4);
  in.cluster.gpu.rates = {};
  for (Recompute rc : {Recompute::none, Recompute::full}) {
    Layout l;
    l.recompute = rc;
    const Plan p = evaluate(in, l);
    const TrainingFlops f = training_flops(in.model, 4, rc, FlopsConvention::narayanan);
    const double rate = in.cluster.gpu.peak_flops * in.cluster.gpu.compute_efficiency;
    EXPECT_NEAR(p.time.step_s, f.hardware() / rate, 1e-9 * p.time.step_s);
    EXPECT_NEAR(p.time.mfu, in.cluster.gpu.compute_efficiency * f.model / f.hardware(), 1e-9);
    EXPECT_TRUE(p.traffic.empty());
    EXPECT_EQ(p.time.step_s, p.time.step_no_overlap_s);
    EXPECT_NEAR(p.time.days, 1e12 / p.time.tokens_per_s / 86400, 1e-9 * p.time.days);
  }
}

TEST(Planner, TrafficIsTheCommModels) {
  // Everything inside one node: TP and DP bytes per rank are the comm_model functions'.
  const PlanInput in = input("megatron-1.7b", "1x8xA100", 16);
  Layout l;
  l.dp = 4;
  l.tp = 2;
  l.micro_batch = 2;
  const Plan p = evaluate(in, l);
  const int64_t layers = in.model.layers;
  double tp_bytes = 0, dp_bytes = 0;
  for (const GroupTraffic& g : p.traffic) {
    EXPECT_FALSE(g.inter_node);
    if (g.group == "TP") tp_bytes += g.bytes_per_rank;
    if (g.group == "DP" || g.group == "ZeRO") dp_bytes += g.bytes_per_rank;
  }
  const CollectiveTraffic tp =
      tp_traffic_per_layer(2, in.model.seq, in.model.hidden, 2, 2, false, Recompute::none);
  EXPECT_NEAR(tp_bytes, tp.bytes_sent * static_cast<double>(layers) * 2, 1);  // M = 2
  const CollectiveTraffic dp =
      dp_traffic_per_step(p.memory.stage_params, 4, 0, in.training.state_bytes);
  EXPECT_NEAR(dp_bytes, dp.bytes_sent, dp.bytes_sent * 1e-12);
}

TEST(Planner, NotFittingIsReportedNotRefused) {
  const PlanInput in = input("llama2-70b", "1x8xA100", 8);
  Layout l;
  l.dp = 8;
  const Plan p = evaluate(in, l);
  EXPECT_FALSE(p.memory.fits());
  // Plain DP replicates 16 bytes per parameter.
  EXPECT_GT(p.memory.total(), 16.0 * static_cast<double>(param_count(in.model)));
  EXPECT_NEAR(p.memory.headroom(), p.memory.capacity - p.memory.total(), 1);
}

TEST(Planner, OverlapNeverSlowsAStep) {
  const PlanInput in = input("llama2-7b", "2x8xH100", 64);
  for (int zero = 0; zero <= 3; ++zero) {
    Layout l;
    l.dp = 16;
    l.zero_stage = zero;
    const Plan p = evaluate(in, l);
    EXPECT_LE(p.time.step_s, p.time.step_no_overlap_s) << zero;
    EXPECT_GE(p.time.step_s, p.time.compute_s) << zero;
    EXPECT_LE(p.time.dp_exposed_s, p.time.dp_s) << zero;
    EXPECT_GT(p.time.dp_s, 0) << zero;
  }
}

TEST(Planner, SixNdConventionChangesMfuByItsRatio) {
  PlanInput in = input("llama2-7b", "1x8xH100", 8);
  Layout l;
  l.dp = 8;
  l.zero_stage = 3;
  const Plan a = evaluate(in, l);
  in.training.flops = FlopsConvention::six_nd;
  const Plan b = evaluate(in, l);
  const double ratio =
      training_flops(in.model, 8, Recompute::none, FlopsConvention::six_nd).model /
      training_flops(in.model, 8, Recompute::none, FlopsConvention::narayanan).model;
  EXPECT_NEAR(b.time.model_flops / a.time.model_flops, ratio, 1e-12);
  EXPECT_NEAR(b.time.compute_s / a.time.compute_s, ratio, 1e-9);
}

}  // namespace
}  // namespace dtrain::plan
