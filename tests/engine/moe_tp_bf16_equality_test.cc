// Mixture of experts under tensor parallelism and under --precision bf16.
//
// Tensor parallelism (expert TP: each expert's fc column-parallel and proj row-parallel across
// the TP group, the router replicated), with and without sequence parallelism and expert
// parallelism, equals the serial MoE run: 3 steps of a small MoE model
// (4 experts, top-2, every block routed), loss per step and after, every parameter and both
// AdamW moments, assembled from what each rank exports for a checkpoint (each element written by
// exactly one rank). tp 2 and tp 2 + SP run with the load-balancing loss on (every TP rank routes
// the same tokens, so the aux loss is the serial one); with EP (dp 2 ep 2 tp 2, +SP) each DP
// rank's aux loss is of its own tokens, so those compare with the aux loss off.
//
// Counters = formulas on every rank: the blocks' TP bytes (routed blocks by
// plan::moe_tp_collectives_per_layer with the rows each rank's experts computed), SP's
// re-gathers, full recompute's reruns (routed blocks by plan::moe_tp_rerun_collectives_per_layer
// with the same rows), and EP's exchange bytes by plan::ep_*_bytes with the measured routing.
//
// Tolerances are ep_equality_test's (float rounding of reordered sums: the row-parallel
// all-reduce sums each expert's output in two halves): parameters 1e-5, losses 4e-6, moments
// 1e-4 of their tensor's largest |value|. The max differences are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/check.h"
#include "dtrain/cost/moe.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "dtrain/report/layout_report.h"
#include "e2e/equality_support.h"
#include "reference/serial_engine.h"

namespace dtrain::train {
namespace {

constexpr int kSteps = 3;
constexpr float kLr = 1e-3f;
constexpr double kParamTol = 1e-5;
constexpr double kLossTol = 4e-6;
constexpr double kMomentTol = 1e-4;

using e2e::add_pieces;
using e2e::compare;
using e2e::empty_outcome;
using e2e::Outcome;
using e2e::Worst;

StepConfig moe_config(double aux_loss_coef) {
  StepConfig c;
  c.model = model::gpt_preset("tiny").config;
  c.model.layers = 2;
  c.model.moe = {.experts = 4, .top_k = 2, .every = 1, .aux_loss_coef = aux_loss_coef};
  c.batch = 8;
  c.seq = 16;
  c.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
  c.grad_clip = 1.0f;
  c.init_seed = 42;
  return c;
}

struct Case {
  int dp, ep, tp;
  bool sp;
  int pp = 1;  // > 1: 4 micro-batches under ZB-H1 (the split MoE backward)
  bool recompute_full = false;
  int zero = 0;
  bool bf16_grad_reduce = false;
};

std::string label(const Case& k) {
  return str("dp", k.dp, " ep", k.ep, " tp", k.tp, k.sp ? " +SP" : "",
             k.pp > 1 ? str(" pp", k.pp, " zb-h1") : "", k.recompute_full ? " recompute full" : "",
             k.zero > 0 ? str(" zero ", k.zero) : "", k.bf16_grad_reduce ? " bf16 wire" : "");
}

Outcome run_engine(StepConfig c, const Case& k, const std::vector<data::Batch>& data) {
  if (k.recompute_full) c.recompute = Recompute::full;
  LayoutOptions o;
  o.dp = k.dp;
  o.ep = k.ep;
  o.tp = k.tp;
  o.sequence_parallel = k.sp;
  o.pp = k.pp;
  o.zero_stage = k.zero;
  if (k.bf16_grad_reduce) o.grad_reduce = model::Precision::bf16;
  if (k.pp > 1) {
    o.microbatches = 4;
    o.schedule = plan::ScheduleKind::zero_bubble_h1;
  }
  const EngineConfig config = make_engine_config(c, o);
  const int world = k.dp * k.tp * k.pp;
  std::vector<checkpoint::RankState> states(static_cast<size_t>(world));
  std::vector<std::vector<float>> losses(static_cast<size_t>(world));
  comm::threads::run_ranks(world, [&](comm::Communicator& comm) {
    Engine engine(config, comm);
    std::vector<float>& mine = losses[static_cast<size_t>(comm.rank())];
    for (const data::Batch& b : data) mine.push_back(engine.train_step(b, kLr).loss);
    LayoutReport report = gather_layout_report(engine, comm, o);
    mine.push_back(engine.eval_loss(data[0]));
    states[static_cast<size_t>(comm.rank())] = engine.export_state();
    if (comm.rank() == 0) {
      for (const RankRow& r : report.ranks) {
        SCOPED_TRACE(testing::Message() << label(k) << " rank " << r.rank);
        if (k.tp > 1) {
          EXPECT_GT(r.site("tp_block").measured, 0);
        }
        for (const char* site : {"tp_block", "tp_recompute", "tp_regather", "dp", "ep"}) {
          EXPECT_EQ(r.site(site).measured, r.site(site).planned) << site;
        }
        if (k.tp > 1 && k.recompute_full) {
          EXPECT_GT(r.site("tp_recompute").measured, 0);
        }
        for (const StateRow& st : r.state) EXPECT_EQ(st.current_bytes, st.formula_bytes);
      }
      const RankRow& r0 = report.ranks[0];
      std::printf(
          "%-22s rank 0 per step: tp block %.0f B (plan %.0f), recompute %.0f (plan %.0f), "
          "regather %.0f (plan %.0f), ep %.0f (plan %.0f)\n",
          label(k).c_str(), r0.site("tp_block").measured, r0.site("tp_block").planned,
          r0.site("tp_recompute").measured, r0.site("tp_recompute").planned,
          r0.site("tp_regather").measured, r0.site("tp_regather").planned, r0.site("ep").measured,
          r0.site("ep").planned);
    }
    if (k.ep == 1) return;
    const EngineTraffic& t = engine.traffic();
    if (c.precision == model::Precision::bf16) {
      EXPECT_EQ(2 * t.ep_plan_dispatch_forward, t.ep_plan_dispatch);  // 2-byte rows vs 4-byte
    }
    // Full recompute's rerun of each block forward redoes its forward exchanges.
    const double forward = plan::ep_forward_exchanges(c.recompute);
    EXPECT_EQ(static_cast<double>(t.ep.dispatch_forward.traffic.bytes_sent),
              forward * t.ep_plan_dispatch_forward);
    EXPECT_EQ(static_cast<double>(t.ep.combine_forward.traffic.bytes_sent),
              forward * t.ep_plan_combine);
    EXPECT_EQ(static_cast<double>(t.ep.counts.traffic.bytes_sent), forward * t.ep_plan_counts);
    EXPECT_EQ(static_cast<double>(t.ep.combine_backward.traffic.bytes_sent), t.ep_plan_dispatch);
    EXPECT_EQ(static_cast<double>(t.ep.dispatch_backward.traffic.bytes_sent), t.ep_plan_combine);
  });
  Outcome out = empty_outcome(c.model);
  out.losses = losses[0];
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(losses[static_cast<size_t>(r)], out.losses) << "rank " << r << "'s losses";
  }
  for (const checkpoint::RankState& s : states) add_pieces(model::gpt_param_table(c.model), s, out);
  return out;
}

void expect_within(const Worst& w, const std::string& what) {
  std::printf("%-34s loss %.2e  param %.2e  adam m %.2e  adam v %.2e\n", what.c_str(), w.loss,
              w.state[0], w.state[1], w.state[2]);
  EXPECT_LE(w.loss, kLossTol) << what;
  EXPECT_LE(w.state[0], kParamTol) << what;
  EXPECT_LE(w.state[1], kMomentTol) << what;
  EXPECT_LE(w.state[2], kMomentTol) << what;
}

TEST(MoeTensorParallelEquality, TpEqualsTheSerialRunWithTheAuxLoss) {
  const StepConfig c = moe_config(0.01);
  const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
  const Outcome serial = e2e::run_serial(c, data, kLr);
  for (const Case& k : {Case{1, 1, 2, false}, Case{1, 1, 2, true}}) {
    expect_within(compare(c, serial, run_engine(c, k, data)), label(k) + " vs serial (aux .01)");
  }
}

TEST(MoeTensorParallelEquality, EpWithTpEqualsTheSerialRunWithoutTheAuxLoss) {
  const StepConfig c = moe_config(0.0);
  const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
  const Outcome serial = e2e::run_serial(c, data, kLr);
  for (const Case& k : {Case{2, 2, 2, false}, Case{2, 2, 2, true}, Case{4, 4, 2, true}}) {
    expect_within(compare(c, serial, run_engine(c, k, data)), label(k) + " vs serial (aux 0)");
  }
}

// Full recompute reruns each block's forward before its backward: a routed block's rerun routes
// the same tokens and repeats attention's and the experts' all-reduces (and under EP its
// exchanges), counted in the TP recompute row (and EP's bytes) by their formulas; the run equals
// the serial run without recompute. tp 2 and tp 2 + SP with the aux loss, dp 2 ep 2 tp 2 + SP
// without; and tp 2 + SP under zb-h1, whose W reruns the forward once more.
TEST(MoeTensorParallelEquality, FullRecomputeEqualsTheSerialRun) {
  for (const double aux : {0.01, 0.0}) {
    const StepConfig c = moe_config(aux);
    const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
    const Outcome serial = e2e::run_serial(c, data, kLr);
    const std::vector<Case> cases =
        aux > 0 ? std::vector<Case>{{1, 1, 2, false, 1, true}, {1, 1, 2, true, 1, true}}
                : std::vector<Case>{{2, 2, 2, true, 1, true}, {1, 1, 2, true, 2, true}};
    for (const Case& k : cases) {
      expect_within(compare(c, serial, run_engine(c, k, data)),
                    label(k) + str(" vs serial (aux ", aux, ")"));
    }
  }
}

// --schedule zb-h1 splits each routed block's backward: B runs the experts' input-gradient
// products (and the router's backward), W their weight gradients from the output gradients B
// kept (model/ops/moe.h MoeWeightGradStash): the same sgemm calls as the fused backward. 2
// stages, 4 micro-batches, against the serial run with the aux loss off (a micro-batch's aux is
// of its own tokens): alone, with EP, and with TP + SP.
TEST(MoeZeroBubbleEquality, SplitBackwardEqualsTheSerialRun) {
  const StepConfig c = moe_config(0.0);
  const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
  const Outcome serial = e2e::run_serial(c, data, kLr);
  for (const Case& k : {Case{1, 1, 1, false, 2}, Case{2, 2, 1, false, 2}, Case{1, 1, 2, true, 2}}) {
    expect_within(compare(c, serial, run_engine(c, k, data)), label(k) + " vs serial (aux 0)");
  }
}

// --precision bf16 (mixed-precision Adam, bf16 matrix products and stored activations) against
// the bf16 serial MoE run (tests/reference/serial_engine.h), aux loss off (DP splits it). The
// engine's serial layout is the reference's computation: equal bits. Each other layout rounds
// more, every rounding within u = 2^-8 (layout_equality_test's accounting): DP averages each
// rank's bf16 gradient and rounds the average once more; TP's block all-reduces travel as bf16
// (about 2 tp roundings per all-reduce, 4 per block); EP's dispatch rows go as bf16, which the
// experts' fc rounds them to anyway (no rounding added), the other exchanges fp32. The bounds
// below are stated per tensor (max elementwise difference over the tensor's largest |value| for
// the moments): parameters within 2 lr a step (Adam moves a weight whose gradient is near zero by
// about lr whatever its sign), losses within 1e-3, moments within 0.25 of their largest value
// (a moment element near zero can change sign with one rounding). Measured: printed. The EP
// dispatch forward's bytes equal plan::ep_dispatch_bytes at plan::ep_row_wire_bytes (2 bytes),
// half the combine gradient's (4 bytes) for the same rows.
TEST(MoeBf16Equality, MatchesTheBf16SerialRun) {
  StepConfig c = moe_config(0.0);
  c.precision = model::Precision::bf16;
  const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
  const Outcome serial = e2e::run_serial(c, data, kLr);
  for (const Case& k : {Case{1, 1, 1, false}, Case{2, 2, 1, false}, Case{4, 4, 1, false},
                        Case{1, 1, 2, false}, Case{2, 2, 2, true}}) {
    const Worst w = compare(c, serial, run_engine(c, k, data));
    std::printf("%-34s loss %.2e  param %.2e  adam m %.2e  adam v %.2e\n",
                (label(k) + " bf16 vs serial bf16").c_str(), w.loss, w.state[0], w.state[1],
                w.state[2]);
    if (k.dp == 1 && k.tp == 1) {
      EXPECT_EQ(w.loss, 0.0) << "the serial layout is the reference's computation";
      EXPECT_EQ(w.state[0], 0.0);
      EXPECT_EQ(w.state[1], 0.0);
      EXPECT_EQ(w.state[2], 0.0);
    }
    EXPECT_LE(w.loss, 1e-3) << label(k);
    EXPECT_LE(w.state[0], 2 * kSteps * kLr) << label(k);
    EXPECT_LE(w.state[1], 0.25) << label(k);
    EXPECT_LE(w.state[2], 0.25) << label(k);
  }
}

// EP under --precision bf16 with ZeRO 1-3: dense state sharded over DP, expert state over the
// expert-DP group, both as bf16 weights / gradients with the fp32 master beside the moments.
// Against the bf16 serial run with MatchesTheBf16SerialRun's bounds, and against the same layout
// at the other stages. ZeRO moves where the state lives; what it changes in the arithmetic is
// where the gradient is rounded: stages 0 and 1 round each rank's accumulated gradient to bf16
// before the (fp32-wire) average and round the average (stage 1 only reduce-scatters where stage
// 0 all-reduces, the same ring sums): equal bits. Stages 2 and 3 average each rank's fp32 bucket
// and round once (as the serial run rounds its one gradient): equal bits to each other, and
// closer to the serial run than stages 0-1. The state and DP-byte counters equal plan/'s
// formulas on every rank (run_engine). --grad-reduce bf16 (every hop rounds) at stages 0 and 2,
// dp 2 ep 2 pp 2 (zb-h1) at stages 1 and 3 and dp 2 ep 2 tp 2 + SP at 2 and 3 are held to the
// serial bounds.
TEST(MoeBf16Equality, EpWithZeroMatchesTheBf16SerialRun) {
  StepConfig c = moe_config(0.0);
  c.precision = model::Precision::bf16;
  const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
  const Outcome serial = e2e::run_serial(c, data, kLr);
  auto within_serial = [&](const Worst& w, const std::string& what) {
    std::printf("%-40s loss %.2e  param %.2e  adam m %.2e  adam v %.2e\n", what.c_str(), w.loss,
                w.state[0], w.state[1], w.state[2]);
    EXPECT_LE(w.loss, 1e-3) << what;
    EXPECT_LE(w.state[0], 2 * kSteps * kLr) << what;
    EXPECT_LE(w.state[1], 0.25) << what;
    EXPECT_LE(w.state[2], 0.25) << what;
  };
  auto equal_bits = [&](const Worst& w, const std::string& what) {
    std::printf("%-40s loss %.2e  param %.2e  adam m %.2e  adam v %.2e\n", what.c_str(), w.loss,
                w.state[0], w.state[1], w.state[2]);
    EXPECT_EQ(w.loss, 0.0) << what;
    for (double d : w.state) EXPECT_EQ(d, 0.0) << what;
  };
  for (const Case& base : {Case{2, 2, 1, false}, Case{4, 2, 1, false}, Case{4, 4, 1, false}}) {
    std::vector<Outcome> runs;
    for (int zero = 0; zero <= 3; ++zero) {
      Case k = base;
      k.zero = zero;
      runs.push_back(run_engine(c, k, data));
      within_serial(compare(c, serial, runs.back()), label(k) + " vs serial bf16");
    }
    equal_bits(compare(c, runs[0], runs[1]), label(base) + " zero 1 vs zero 0");
    equal_bits(compare(c, runs[2], runs[3]), label(base) + " zero 3 vs zero 2");
  }
  for (int zero : {0, 2}) {
    const Case k{4, 2, 1, false, 1, false, zero, true};
    within_serial(compare(c, serial, run_engine(c, k, data)), label(k) + " vs serial bf16");
  }
  // With a pipeline (the tied wte deferred) and with TP + SP.
  for (const Case& k : {Case{2, 2, 1, false, 2, false, 1}, Case{2, 2, 1, false, 2, false, 3},
                        Case{2, 2, 2, true, 1, false, 2}, Case{2, 2, 2, true, 1, false, 3}}) {
    within_serial(compare(c, serial, run_engine(c, k, data)), label(k) + " vs serial bf16");
  }
}

}  // namespace
}  // namespace dtrain::train
