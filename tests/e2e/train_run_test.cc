// `dtrain train`'s entry point end to end (run_training: options, the layout's checks, one
// Engine and Trainer per rank thread, rank 0 reporting): on the default corpus every layout
// follows the single-rank run, and the one report (TrainSummary::layout) carries every rank's
// model-state memory equal to plan::model_state_bytes, its bytes per step beside the plan/
// formulas, the topology split as predicted, a pipeline's in-flight activations and bubble
// beside the checker's, and a trace and timeline of every rank's last step.
//
// Tolerance: the ranks sum the gradients in another order (~1e-7 relative per step); over 8
// steps of the default lr 3e-3 the losses stay within 1e-4 (observed ~1e-6).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "dtrain/cost/context_parallel.h"
#include "dtrain/cost/pipeline_model.h"
#include "dtrain/run/run.h"
#include "dtrain/schedule/pipeline_schedule.h"
#include "dtrain/trace/chrome_trace.h"

namespace dtrain::train {
namespace {

TrainOptions options() {
  TrainOptions o;
  o.model = "tiny";
  o.layers = 4;
  o.steps = 8;
  o.eval_every = 4;
  o.eval_batches = 2;
  o.seed = 3;
  return o;
}

double worst_loss_diff(const TrainSummary& a, const TrainSummary& b) {
  EXPECT_EQ(a.train_losses.size(), b.train_losses.size());
  double worst = 0;
  for (size_t k = 0; k < std::min(a.train_losses.size(), b.train_losses.size()); ++k) {
    worst = std::max(worst, std::fabs(static_cast<double>(a.train_losses[k]) - b.train_losses[k]));
  }
  for (size_t k = 0; k < std::min(a.evals.size(), b.evals.size()); ++k) {
    worst =
        std::max(worst, std::fabs(static_cast<double>(a.evals[k].val_loss) - b.evals[k].val_loss));
  }
  return worst;
}

// Every rank's model states equal plan::model_state_bytes; its TP, PP and embedding bytes equal
// their formulas, its DP bytes too (plan::stage_dp_bytes_moved, exact per rank).
void expect_counters_match_plan(const LayoutReport& r, const std::string& what) {
  for (const RankRow& k : r.ranks) {
    for (const StateRow& s : k.state) {
      EXPECT_EQ(s.current_bytes, s.formula_bytes)
          << what << " rank " << k.rank << " " << memory_tag_name(s.tag);
    }
    for (const char* site : {"tp_block", "tp_vocab", "pp", "embedding", "dp"}) {
      EXPECT_EQ(k.site(site).measured, k.site(site).planned)
          << what << " rank " << k.rank << " " << site;
    }
    EXPECT_EQ(static_cast<double>(k.microbatch_activation_bytes),
              k.planned_microbatch_activation_bytes)
        << what << " rank " << k.rank;
  }
}

// dp ranks at ZeRO `stage`, 32 KiB buckets (several per step).
TrainOptions dp_options(int dp, int stage) {
  TrainOptions o = options();
  o.layout.dp = dp;
  o.layout.zero_stage = stage;
  o.layout.bucket_bytes = 32 << 10;
  return o;
}

TEST(TrainRun, DataParallelAtEveryZeroStageFollowsTheSingleRankRun) {
  const TrainSummary serial = run_training(options(), nullptr);
  ASSERT_TRUE(serial.layout.has_value());
  EXPECT_EQ(serial.layout->ranks.size(), 1u);
  for (int dp : {2, 4}) {
    for (int stage = 0; stage <= 3; ++stage) {
      const TrainSummary s = run_training(dp_options(dp, stage), nullptr);
      const double worst = worst_loss_diff(s, serial);
      std::printf("  dp %d zero %d: max |loss diff| %.1e\n", dp, stage, worst);
      EXPECT_LE(worst, 1e-4) << "dp " << dp << " zero " << stage;
      ASSERT_TRUE(s.layout.has_value());
      EXPECT_EQ(s.layout->ranks.size(), static_cast<size_t>(dp));
      expect_counters_match_plan(*s.layout, str("dp ", dp, " zero ", stage));
    }
  }
}

// Context parallelism beside ZeRO-1 and ZeRO-2 (dp 2: the state sharded over the dp x cp
// ranks), alone and on pp 2 under zb-h1 and interleaved: the losses follow the single-rank run,
// every counter its formula (the DP group's bytes and the model states over DP x CP, the
// pipeline's bytes, and each CP rank's bytes and messages per step).
TEST(TrainRun, ContextParallelWithZero1And2CountersEqualThePlan) {
  const TrainSummary serial = run_training(options(), nullptr);
  struct CpCase {
    int cp, stage;
    plan::CpAlgorithm algo;
    std::optional<plan::ScheduleKind> schedule;  // pp 2, 2 micro-batches
  };
  for (const CpCase& k :
       {CpCase{2, 1, plan::CpAlgorithm::ring, {}}, CpCase{2, 2, plan::CpAlgorithm::all_gather, {}},
        CpCase{2, 2, plan::CpAlgorithm::ulysses, {}},
        CpCase{4, 1, plan::CpAlgorithm::all_gather, {}}, CpCase{4, 2, plan::CpAlgorithm::ring, {}},
        CpCase{2, 1, plan::CpAlgorithm::ring, plan::ScheduleKind::zero_bubble_h1},
        CpCase{2, 2, plan::CpAlgorithm::ulysses, plan::ScheduleKind::interleaved}}) {
    TrainOptions o = dp_options(2, k.stage);
    o.layout.cp = k.cp;
    o.layout.cp_algorithm = k.algo;
    const int pp = k.schedule.has_value() ? 2 : 1;
    if (k.schedule.has_value()) {
      o.layout.pp = pp;
      o.layout.microbatches = 2;
      o.layout.schedule = k.schedule;
    }
    const std::string what =
        str("dp 2 cp ", k.cp, " ", plan::name(k.algo), " zero ", k.stage,
            k.schedule.has_value() ? str(" pp 2 ", plan::name(*k.schedule)) : "");
    const TrainSummary s = run_training(o, nullptr);
    const double worst = worst_loss_diff(s, serial);
    std::printf("  %s: max |loss diff| %.1e\n", what.c_str(), worst);
    EXPECT_LE(worst, 1e-4) << what;
    ASSERT_TRUE(s.layout.has_value());
    EXPECT_EQ(s.layout->ranks.size(), static_cast<size_t>(2 * k.cp * pp));
    expect_counters_match_plan(*s.layout, what);
    ASSERT_EQ(s.layout->cp_ranks.size(), static_cast<size_t>(2 * k.cp * pp)) << what;
    for (const CpRankRow& r : s.layout->cp_ranks) {
      EXPECT_GT(r.bytes, 0) << what;
      EXPECT_EQ(r.bytes, r.bytes_formula) << what << " rank " << r.rank;
      EXPECT_EQ(r.messages, r.messages_formula) << what << " rank " << r.rank;
    }
  }
}

// MoE under CP: each CP rank's routing all-gathers (router choices and probability sums, one per
// routed block, micro-batch and forward pass) equal plan::cp_moe_routing_gather_bytes priced by
// plan::collective_traffic, apart from the attention's bytes, under both splits, with
// --moe-every 2 (half the blocks routed), with full recompute's second forward, and on a pipeline
// stage that holds only some routed blocks.
TEST(TrainRun, ContextParallelMoeRoutingBytesEqualThePlan) {
  struct Case {
    int cp;
    bool contiguous;
    int64_t every;
    Recompute recompute;
    int pp;
  };
  for (const Case& k :
       {Case{2, false, 1, Recompute::none, 1}, Case{2, true, 2, Recompute::none, 1},
        Case{4, false, 1, Recompute::full, 1}, Case{2, false, 2, Recompute::none, 2}}) {
    TrainOptions o = options();
    o.steps = 2;
    o.eval_every = 0;
    o.moe.experts = 4;
    o.moe.top_k = 2;
    o.moe.every = k.every;
    o.layout.cp = k.cp;
    o.layout.cp_contiguous = k.contiguous;
    o.recompute = k.recompute;
    if (k.pp > 1) {
      o.layout.pp = k.pp;
      o.layout.microbatches = 2;
    }
    const std::string what =
        str("cp ", k.cp, k.contiguous ? " contiguous" : " balanced", " moe-every ", k.every,
            " recompute ", plan::name(k.recompute), " pp ", k.pp);
    const TrainSummary s = run_training(o, nullptr);
    ASSERT_TRUE(s.layout.has_value()) << what;
    ASSERT_EQ(s.layout->cp_ranks.size(), static_cast<size_t>(k.cp * k.pp)) << what;
    for (const CpRankRow& r : s.layout->cp_ranks) {
      EXPECT_GT(r.routing_bytes, 0) << what << " rank " << r.rank;
      EXPECT_EQ(r.routing_bytes, r.routing_bytes_formula) << what << " rank " << r.rank;
      EXPECT_EQ(r.bytes, r.bytes_formula) << what << " rank " << r.rank;
    }
  }
}

// --dp-algo direct: the DP syncs read the peers' buffers in place (comm/algorithms/direct.cc) at
// every ZeRO stage; the losses follow the single-rank run, every counter its formula, and at dp 2
// the sums are the ring's (one addition per element, a + b either way): the same losses bit for
// bit. Bytes are those moved (sent, or read in place: docs/algorithms.md), so direct's ZeRO syncs,
// which only read, still move their bytes: summed over the group, what the ring sends (each
// chunk crosses once either way; ZeRO-0 at dp 4 aside, whose small last bucket takes the latency
// path, every rank reading each peer's whole bucket).
TEST(TrainRun, DirectDataParallelAtEveryZeroStageFollowsTheSingleRankRun) {
  const TrainSummary serial = run_training(options(), nullptr);
  for (int dp : {2, 4}) {
    for (int stage = 0; stage <= 3; ++stage) {
      TrainOptions o = dp_options(dp, stage);
      o.layout.dp_algorithm = comm::Algorithm::ring;
      const TrainSummary ring = run_training(o, nullptr);
      o.layout.dp_algorithm = comm::Algorithm::direct;
      const TrainSummary s = run_training(o, nullptr);
      const double worst = worst_loss_diff(s, serial);
      std::printf("  direct dp %d zero %d: max |loss diff| %.1e (ring: %.1e)\n", dp, stage, worst,
                  worst_loss_diff(ring, serial));
      EXPECT_LE(worst, 1e-4) << "dp " << dp << " zero " << stage;
      if (dp == 2) {
        EXPECT_EQ(worst_loss_diff(s, ring), 0.0) << "zero " << stage;
      }
      ASSERT_TRUE(s.layout.has_value());
      ASSERT_TRUE(ring.layout.has_value());
      expect_counters_match_plan(*s.layout, str("direct dp ", dp, " zero ", stage));
      if (stage > 0 || dp == 2) {
        double direct_bytes = 0, ring_bytes = 0;
        for (const auto& k : s.layout->ranks) direct_bytes += k.site("dp").measured;
        for (const auto& k : ring.layout->ranks) ring_bytes += k.site("dp").measured;
        EXPECT_GT(ring_bytes, 0) << "dp " << dp << " zero " << stage;
        EXPECT_DOUBLE_EQ(direct_bytes, ring_bytes) << "dp " << dp << " zero " << stage;
      }
    }
  }
}

// A declared topology (--ranks-per-node 2, 8 ranks = 4 nodes): the flat ring and the
// hierarchical all-reduce of every bucket follow the single-rank run, every rank's inter-node
// bytes summed equal the prediction exactly, and the hierarchical form sends fewer bytes across
// nodes (2(M-1)/M S per node instead of G times that). Also beside TP: the DP groups of a
// DP x TP mesh average two-level too.
TEST(TrainRun, TopologySplitsBytesByLinkAsPredicted) {
  const TrainSummary serial = run_training(options(), nullptr);
  for (int tp : {1, 2}) {
    double flat_inter = 0, hier_inter = 0;
    for (DpAllReduce mode : {DpAllReduce::flat, DpAllReduce::hierarchical}) {
      TrainOptions o = options();
      o.layout.dp = 8 / tp;
      o.layout.tp = tp;
      o.layout.bucket_bytes = 32 << 10;
      o.layout.ranks_per_node = 2 * tp;
      o.layout.dp_all_reduce = mode;
      const TrainSummary s = run_training(o, nullptr);
      ASSERT_TRUE(s.layout.has_value());
      const LayoutReport& r = *s.layout;
      EXPECT_LE(worst_loss_diff(s, serial), 1e-4) << name(mode);
      EXPECT_GT(r.inter_node_bytes, 0) << name(mode);
      EXPECT_EQ(r.inter_node_bytes, r.predicted_inter_node_bytes) << name(mode) << " tp " << tp;
      EXPECT_EQ(r.dp_all_reduce, name(mode));
      (mode == DpAllReduce::hierarchical ? hier_inter : flat_inter) = r.inter_node_bytes;
      std::printf(
          "  dp %d tp %d on %d nodes, %s: %.0f inter-node bytes per step (predicted %.0f)\n",
          8 / tp, tp, r.nodes, std::string(name(mode)).c_str(), r.inter_node_bytes,
          r.predicted_inter_node_bytes);
    }
    EXPECT_LT(hier_inter, flat_inter) << "tp " << tp;
  }
}

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// --pp 2 with 4 micro-batches: the losses, each stage's in-flight activations beside the
// checker's count and its bytes beside the plan, the bubble measured and predicted; and the
// trace and timeline of a composed run: per rank a compute, a communication and a
// communication-thread track, an event per action of the last step, TP collectives and DP
// syncs among them.
TEST(TrainRun, PipelineReportsTheBubbleAndEveryLayoutWritesATraceAndTimeline) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("dtrain_run_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  TrainOptions base = options();
  base.steps = 3;
  base.eval_every = 0;
  base.eval_batches = 1;
  const TrainSummary serial = run_training(base, nullptr);

  TrainOptions o = base;
  o.layout.pp = 2;
  o.layout.microbatches = 4;
  const TrainSummary s = run_training(o, nullptr);
  EXPECT_LE(worst_loss_diff(s, serial), 4e-6);
  ASSERT_TRUE(s.layout.has_value());
  const LayoutReport& p = *s.layout;
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.micro_batch, 2);  // the tiny preset's batch 8 in 4 micro-batches
  expect_counters_match_plan(p, "pp 2");
  int64_t params = 0;
  for (const RankRow& r : p.ranks) {
    EXPECT_EQ(r.measured_inflight, r.checker_inflight) << "stage " << r.rank;
    EXPECT_EQ(r.checker_inflight, std::min(2 - r.rank, 4));  // 1F1B: min(P - stage, M)
    params += r.param_count;
  }
  EXPECT_EQ(params, s.param_count + 256 * 32);  // both ends hold wte (V x C)
  EXPECT_GE(p.bubble.measured, 0.0);
  EXPECT_LT(p.bubble.measured, 1.0);
  const plan::BubbleEstimate predicted =
      plan::pipeline_bubble(plan::ScheduleKind::one_f_one_b, 2, 4, 1,
                            {p.bubble.forward_ms, p.bubble.backward_ms, p.bubble.weight_ms});
  EXPECT_NEAR(p.bubble.predicted, predicted.fraction_of_total, 1e-12);
  EXPECT_NEAR(p.bubble.predicted, 1.0 / 5.0, 1e-12);  // (P-1)/(M+P-1) for any F, B
  EXPECT_NEAR(p.bubble.simulated, p.bubble.predicted, 1e-9);

  // A composed run's trace.
  TrainOptions c = base;
  c.layout.dp = 2;
  c.layout.tp = 2;
  c.layout.pp = 2;
  c.layout.microbatches = 2;
  c.layout.zero_stage = 3;
  c.layout.trace_path = (dir / "t.json").string();
  c.layout.timeline_path = (dir / "t.svg").string();
  const TrainSummary composed = run_training(c, nullptr);
  EXPECT_LE(worst_loss_diff(composed, serial), 4e-6);
  ASSERT_TRUE(composed.layout.has_value());
  EXPECT_EQ(composed.layout->trace_path, c.layout.trace_path);
  const nlohmann::json trace = nlohmann::json::parse(read(dir / "t.json"));
  const plan::PipelineSchedule schedule = plan::make_1f1b(2, 2);
  std::map<int, int> compute_events, comm_events, async_events;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const int tid = e["tid"].get<int>();
    const std::string kind = e["cat"];
    const int rank = tid / trace::kTracksPerRank;
    if (kind == "forward" || kind == "backward") {
      EXPECT_EQ(tid, trace::compute_track(rank));
      ++compute_events[rank];
    }
    if (kind == "send" || kind == "recv") {
      EXPECT_EQ(tid, trace::communication_track(rank));
      ++comm_events[rank];
    }
    if (kind == "collective") {
      EXPECT_EQ(tid, trace::communication_track(rank));
    }
    if (kind == "async_collective") {
      EXPECT_EQ(tid, trace::async_track(rank));
      ++async_events[rank];
    }
    EXPECT_GE(e["dur"].get<double>(), 0.0);
  }
  for (int rank = 0; rank < 8; ++rank) {
    const int stage = rank / 4;  // tp-dp-pp: ranks 0-3 hold stage 0
    int compute = 0, communication = 0;
    for (const plan::Action& a : schedule.per_rank[static_cast<size_t>(stage)]) {
      (plan::is_compute(a.kind) ? compute : communication) += 1;
    }
    EXPECT_EQ(compute_events[rank], compute) << "rank " << rank;
    EXPECT_EQ(comm_events[rank], communication) << "rank " << rank;
    EXPECT_GT(async_events[rank], 0) << "rank " << rank << ": no ZeRO-3 gathers in the trace";
  }
  const std::string svg = read(dir / "t.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("rank 7"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// The summary's measured-beside-planned memory lines, on a grid of layouts: every rank's
// activation peak equals the plan/ figure exactly (TP included: the MLP gradients in the
// workspace are the rank's 4C/tp columns), and every ZeRO-3 rank's working set equals the plan
// plus the one difference the report names, a unit's gradient still held by the communication
// thread (0, or exactly that unit's fp32 gradient bytes).
TEST(TrainRun, MeasuredMemoryEqualsThePlanPlusTheNamedDifference) {
  struct Grid {
    int dp, tp, pp, zero;
    bool sp = false;
    Recompute recompute = Recompute::none;
    model::Precision precision = model::Precision::fp32;
  };
  const std::vector<Grid> grid = {
      {1, 4, 1, 0},
      {1, 2, 1, 0, true},
      {2, 2, 1, 0},
      {1, 2, 2, 0},
      {1, 4, 1, 0, false, Recompute::full},
      {2, 1, 1, 3},
      {2, 2, 1, 3, true, Recompute::full},
      {2, 1, 2, 3},
      // Mixed precision at every ZeRO stage, with and without a pipeline: with pp 2 each stage
      // has one block, whose bf16 gathered copy and fp32 working copy are held together.
      {2, 1, 1, 1, false, Recompute::none, model::Precision::bf16},
      {2, 1, 1, 2, false, Recompute::none, model::Precision::bf16},
      {2, 1, 1, 3, false, Recompute::none, model::Precision::bf16},
      {2, 1, 2, 1, false, Recompute::none, model::Precision::bf16},
      {2, 1, 2, 2, false, Recompute::none, model::Precision::bf16},
      {2, 1, 2, 3, false, Recompute::none, model::Precision::bf16},
  };
  for (const Grid& g : grid) {
    TrainOptions o = options();
    o.layers = 2;
    o.steps = 2;
    o.eval_every = 0;
    o.eval_batches = 1;
    o.layout.dp = g.dp;
    o.layout.tp = g.tp;
    o.layout.pp = g.pp;
    o.layout.microbatches = g.pp;
    o.layout.zero_stage = g.zero;
    o.layout.sequence_parallel = g.sp;
    o.recompute = g.recompute;
    o.precision = g.precision;
    const std::string what =
        str("dp ", g.dp, " tp ", g.tp, " pp ", g.pp, " zero ", g.zero, g.sp ? " sp" : "",
            " recompute ", name(g.recompute), " ", model::precision_name(g.precision));
    const TrainSummary s = run_training(o, nullptr);
    ASSERT_TRUE(s.layout.has_value()) << what;
    for (const RankRow& k : s.layout->ranks) {
      EXPECT_EQ(static_cast<double>(k.activations_peak_bytes), k.planned_activations_peak_bytes)
          << what << " rank " << k.rank;
      for (const StateRow& state : k.state) {
        EXPECT_EQ(state.current_bytes, state.formula_bytes)
            << what << " rank " << k.rank << " " << memory_tag_name(state.tag);
      }
      if (g.zero != 3) continue;
      EXPECT_EQ(k.gathered_peak_bytes, k.gathered_formula_bytes + k.in_flight_grad_bytes)
          << what << " rank " << k.rank;
      EXPECT_EQ(k.in_flight_grad_bytes > 0, !k.in_flight_grad_unit.empty()) << what;
    }
  }
}

}  // namespace
}  // namespace dtrain::train
