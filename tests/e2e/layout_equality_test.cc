// Every layout of the one engine equals the single-rank reference (DESIGN.md test 5): the grid
//   (dp, tp, pp) in {(1,1,1), (2,1,1), (1,2,1), (1,1,2), (2,2,1), (2,1,2), (1,2,2), (2,2,2),
//   (4,2,1), (1,4,1)} x ZeRO 0-3 x sequence parallelism on/off (where tp > 1) x schedule {1f1b,
//   zb-h1, interleaved} (where pp > 1) x recompute {none, full}
// trains K = 3 steps on the same batches as tests/reference/serial_engine.h and compares the loss
// of every step and the evaluation loss after the last, and every parameter and both AdamW
// moments of the serial model, assembled from what each rank exports for a checkpoint (so ZeRO
// shards, TP slices and pipeline stages are all put back together, and every element is written
// by exactly one rank). Every rank's counters equal the plan/ formulas, exactly. Full recompute
// is compared with none of the same layout bit for bit: it reruns the same ops on the same
// inputs. The max differences over the grid are printed.
//
// Tolerance, and why it is not zero: the ranks compute the same sums in other orders - the DP
// average of B/dp-row gradients, the M micro-batches' accumulation, TP's row-parallel partial
// sums and f/g all-reduces (SP's reduce-scatters), the tied wte's halves added by the embedding
// group, the norm summed per rank - so gradients differ by float rounding (~1e-7 relative, more
// where a sum cancels). AdamW's first steps move a weight by about lr * m / (sqrt(v) + eps), a
// ratio in which such relative differences cancel to first order, so with lr = 1e-3 a parameter
// moves by a small fraction of lr: 1e-5 on the parameters (observed below 5e-6) and 4e-6 on the
// losses (about 8 float ulps at ln 256 = 5.5). The moments carry the gradients' differences
// themselves, relative to the gradient's size: m and v within 1e-4 of their tensor's largest
// |value| (v ~ g^2 doubles g's relative error; observed below 1e-5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "dtrain/report/layout_report.h"
#include "e2e/equality_support.h"
#include "reference/serial_engine.h"

namespace dtrain::train {
namespace {

constexpr int kSteps = 3;
constexpr float kLr = 1e-3f;

using e2e::add_pieces;
using e2e::empty_outcome;
using e2e::Outcome;

Outcome run_serial(const StepConfig& c, const std::vector<data::Batch>& data) {
  return e2e::run_serial(c, data, kLr);
}
constexpr double kParamTol = 1e-5;
constexpr double kLossTol = 4e-6;
constexpr double kMomentTol[] = {0, 1e-4, 1e-4};  // by StateKind: param (kParamTol), m, v

StepConfig base_config(Recompute recompute) {
  StepConfig c;
  c.model = model::gpt_preset("tiny").config;
  c.model.layers = 4;  // interleaving on 2 stages needs 4 chunks
  c.batch = 8;
  c.seq = 16;
  c.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
  c.grad_clip = 1.0f;
  c.init_seed = 42;
  c.recompute = recompute;
  return c;
}

// The serial state a run ends with: losses, then the three per-element arrays.
struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int zero = 0;
  bool sp = false;
  plan::ScheduleKind schedule = plan::ScheduleKind::one_f_one_b;
  int microbatches = 1;     // per DP rank
  bool bf16_grads = false;  // --grad-reduce bf16

  std::string name() const {
    return str("dp", dp, " tp", tp, " pp", pp, " zero", zero, sp ? " sp" : "",
               pp > 1 ? str(" ", plan::name(schedule)) : "", " M", microbatches,
               bf16_grads ? " bf16-grad-reduce" : "");
  }
};

// Every rank's counters beside the plan/ formulas (report/layout_report.h), exactly: its model
// states, one micro-batch's activations for the recompute mode (and the in-flight count, one
// chunk a rank), and the bytes its groups sent per step - TP's f and g with SP's re-gathers and
// LayerNorm sums and full recompute's reruns, the vocabulary reductions, the activations
// between stages (SP's slices under SP), the DP syncs and ZeRO-3's gathers inside the pipeline,
// the tied embedding's sum.
void expect_counters_equal_the_plan(const LayoutReport& r, const Layout& l) {
  ASSERT_EQ(r.ranks.size(), static_cast<size_t>(l.dp * l.tp * l.pp));
  for (const RankRow& k : r.ranks) {
    SCOPED_TRACE(testing::Message() << "rank " << k.rank);
    for (const StateRow& s : k.state) EXPECT_EQ(s.current_bytes, s.formula_bytes);
    EXPECT_EQ(static_cast<double>(k.microbatch_activation_bytes),
              k.planned_microbatch_activation_bytes);
    if (r.chunks == 1) {
      EXPECT_EQ(k.measured_inflight, k.checker_inflight);
    }
    for (const SiteBytes& site : k.traffic) EXPECT_EQ(site.measured, site.planned) << site.site;
  }
}

Outcome run_layout(const StepConfig& c, const Layout& l, const std::vector<data::Batch>& data) {
  LayoutOptions o;
  o.dp = l.dp;
  o.tp = l.tp;
  o.pp = l.pp;
  o.zero_stage = l.zero;
  o.sequence_parallel = l.sp;
  o.microbatches = l.microbatches;
  if (l.bf16_grads) o.grad_reduce = model::Precision::bf16;
  if (l.pp > 1) o.schedule = l.schedule;
  const EngineConfig config = make_engine_config(c, o);
  const int world = l.dp * l.tp * l.pp;
  std::vector<checkpoint::RankState> states(static_cast<size_t>(world));
  std::vector<std::vector<float>> losses(static_cast<size_t>(world));
  LayoutReport report;
  comm::threads::run_ranks(world, [&](comm::Communicator& comm) {
    Engine engine(config, comm);
    std::vector<float>& mine = losses[static_cast<size_t>(comm.rank())];
    for (const data::Batch& b : data) mine.push_back(engine.train_step(b, kLr).loss);
    LayoutReport r = gather_layout_report(engine, comm, o);  // the training steps' counters
    mine.push_back(engine.eval_loss(data[0]));
    states[static_cast<size_t>(comm.rank())] = engine.export_state();
    if (comm.rank() == 0) report = std::move(r);
  });
  expect_counters_equal_the_plan(report, l);
  Outcome out = empty_outcome(c.model);
  out.losses = losses[0];
  for (int r = 1; r < world; ++r) {
    // Every rank reports the same loss, bit for bit (summed in rank order).
    EXPECT_EQ(std::memcmp(losses[static_cast<size_t>(r)].data(), out.losses.data(),
                          out.losses.size() * sizeof(float)),
              0)
        << l.name() << ": rank " << r << "'s losses differ from rank 0's";
  }
  const model::ParamTable serial = model::gpt_param_table(c.model);
  for (const checkpoint::RankState& s : states) add_pieces(serial, s, out);
  return out;
}

// The grid, each layout with its micro-batch count: the global batch of 8 on dp ranks, a
// pipeline with 2 micro-batches per DP rank at least (4 without DP), one layout with gradient
// accumulation and no pipeline.
std::vector<Layout> grid() {
  struct Shape {
    int dp, tp, pp, microbatches;
  };
  const Shape shapes[] = {{1, 1, 1, 1}, {2, 1, 1, 2}, {1, 2, 1, 1}, {1, 1, 2, 4}, {2, 2, 1, 1},
                          {2, 1, 2, 2}, {1, 2, 2, 4}, {2, 2, 2, 2}, {4, 2, 1, 1}, {1, 4, 1, 1}};
  std::vector<Layout> out;
  for (const Shape& s : shapes) {
    for (int zero = 0; zero <= 3; ++zero) {
      for (bool sp : {false, true}) {
        if (sp && s.tp == 1) continue;
        for (plan::ScheduleKind schedule :
             {plan::ScheduleKind::one_f_one_b, plan::ScheduleKind::zero_bubble_h1,
              plan::ScheduleKind::interleaved}) {
          if (s.pp == 1 && schedule != plan::ScheduleKind::one_f_one_b) continue;
          out.push_back({s.dp, s.tp, s.pp, zero, sp, schedule, s.microbatches});
        }
      }
    }
  }
  return out;
}

struct Worst {
  double loss = 0, state[checkpoint::kStateKindCount] = {0, 0, 0};
};

// Max |a - b| per kind (moments relative to their tensor's largest |value|), and whether every
// element was written by exactly one rank.
Worst compare(const StepConfig& c, const Layout& l, const Outcome& want, const Outcome& got) {
  Worst w;
  EXPECT_EQ(got.losses.size(), want.losses.size()) << l.name();
  for (size_t s = 0; s < std::min(got.losses.size(), want.losses.size()); ++s) {
    w.loss = std::max(w.loss, static_cast<double>(std::fabs(got.losses[s] - want.losses[s])));
  }
  const model::ParamTable serial = model::gpt_param_table(c.model);
  for (int k = 0; k < checkpoint::kStateKindCount; ++k) {
    for (const model::ParamTensor& t : serial.tensors()) {
      double scale = 0, diff = 0;
      for (int64_t i = t.offset; i < t.offset + t.count; ++i) {
        const auto e = static_cast<size_t>(i);
        EXPECT_EQ(got.writes[k][e], 1)
            << l.name() << ": " << name(static_cast<checkpoint::StateKind>(k)) << " of " << t.name
            << " element " << i - t.offset << " written by " << got.writes[k][e] << " ranks";
        if (got.writes[k][e] != 1) return w;
        scale = std::max(scale, static_cast<double>(std::fabs(want.state[k][e])));
        diff = std::max(diff, static_cast<double>(std::fabs(got.state[k][e] - want.state[k][e])));
      }
      const double d = k == 0 ? diff : (scale > 0 ? diff / scale : diff);
      w.state[k] = std::max(w.state[k], d);
    }
  }
  return w;
}

TEST(LayoutEquality, EveryLayoutZeroStageSpScheduleAndRecomputeMatchesTheSerialRun) {
  const std::vector<Layout> layouts = grid();
  Worst overall;
  int runs = 0;
  for (Recompute recompute : {Recompute::none, Recompute::full}) {
    const StepConfig c = base_config(recompute);
    const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
    const Outcome serial = run_serial(c, data);
    for (const Layout& l : layouts) {
      SCOPED_TRACE(l.name() + " recompute " + std::string(name(recompute)));
      const Outcome got = run_layout(c, l, data);
      ++runs;
      const Worst w = compare(c, l, serial, got);
      EXPECT_LE(w.loss, kLossTol);
      EXPECT_LE(w.state[0], kParamTol);
      EXPECT_LE(w.state[1], kMomentTol[1]);
      EXPECT_LE(w.state[2], kMomentTol[2]);
      overall.loss = std::max(overall.loss, w.loss);
      for (int k = 0; k < checkpoint::kStateKindCount; ++k) {
        overall.state[k] = std::max(overall.state[k], w.state[k]);
      }
      if (recompute == Recompute::full) {
        // The same layout without recompute: the same bits.
        const Outcome none = run_layout(base_config(Recompute::none), l, data);
        EXPECT_EQ(
            std::memcmp(none.losses.data(), got.losses.data(), got.losses.size() * sizeof(float)),
            0)
            << "full recompute's losses differ from none's";
        for (int k = 0; k < checkpoint::kStateKindCount; ++k) {
          EXPECT_EQ(std::memcmp(none.state[k].data(), got.state[k].data(),
                                got.state[k].size() * sizeof(float)),
                    0)
              << "full recompute's " << name(static_cast<checkpoint::StateKind>(k))
              << " differ from none's";
        }
      }
    }
  }
  std::printf(
      "%d runs: max |loss diff| %.3g, max |param diff| %.3g, max relative |m diff| %.3g, "
      "|v diff| %.3g\n",
      runs, overall.loss, overall.state[0], overall.state[1], overall.state[2]);
  EXPECT_EQ(runs, 2 * static_cast<int>(layouts.size()));
}

// The root mean square of the parameters' differences (max |diff| is set by the rare element
// whose gradient is near zero: Adam moves it by about lr whichever its sign).
double rms_param_diff(const Outcome& want, const Outcome& got) {
  double sum = 0;
  for (size_t e = 0; e < want.state[0].size(); ++e) {
    const double d = static_cast<double>(got.state[0][e]) - static_cast<double>(want.state[0][e]);
    sum += d * d;
  }
  return std::sqrt(sum / static_cast<double>(want.state[0].size()));
}

// ||m_got - m_want|| / ||m_want|| over the whole model: the first moment is a running mean of the
// gradients, so this is the gradients' norm-wise relative difference, free of Adam's sign flips.
double relative_moment_diff(const Outcome& want, const Outcome& got) {
  double diff = 0, ref = 0;
  const int m = static_cast<int>(checkpoint::StateKind::adam_m);
  for (size_t e = 0; e < want.state[m].size(); ++e) {
    const double d = static_cast<double>(got.state[m][e]) - static_cast<double>(want.state[m][e]);
    diff += d * d;
    ref += static_cast<double>(want.state[m][e]) * want.state[m][e];
  }
  return std::sqrt(diff / ref);
}

// --precision bf16 (mixed-precision Adam: bf16 weights and gradients, fp32 master and moments;
// bf16 activations on the TP block collectives and the pipeline's sends) on the grid's shapes
// (ZeRO 0-3, SP where tp > 1, 1F1B): each layout against the bf16 serial reference
// (tests/reference/serial_engine.h), which rounds the whole step's fp32 gradient to bf16 once.
// dp1 tp1 pp1 is that computation and must give its bits. A layout rounds more, each rounding
// within u = 2^-8 of what it rounds:
//   - the gradient: at ZeRO 0-1 each rank folds each of its M micro-batches into its bf16
//     gradient and the DP average is rounded once more (dp * M + 1); at ZeRO 2-3 the M
//     reduce-scatters accumulate into the bf16 shard (M); SP rounds the LayerNorm gradients'
//     tp partials (tp);
//   - the activations on the chain: each of a block's two forward all-reduces in bf16 rounds
//     its tp inputs and each ring hop's partial sum (about tp roundings), and backward's two
//     do the same (4 L tp for L blocks); each pipeline boundary rounds the activation going
//     forward and its gradient coming back (2 (P - 1)).
// To first order (tests/model/bf16_grad_test.cc: each rounded operand on a gradient's chain adds
// up to u to its relative error) the first moment's norm-wise difference is within (R + 1) u for
// R roundings, and the loss, one forward chain, within 1e-4 (the later steps' weights) plus the
// forward's roundings times u times the loss. Besides that, the fp32 values a layout rounds
// differ by summation order, and bf16 turns some of those ulps into whole bf16 steps: measured
// about 1.5e-3 under TP with fp32 activations. Measured overall: up to 6.3e-3 (dp2 pp2, ZeRO 0),
// as much as bf16 against fp32 (4.9e-3). Parameters within 2 lr a step (Adam moves a weight
// whose gradient is near zero by about lr whatever its sign). Counters equal the plan exactly
// (expect_counters_equal_the_plan): mixed precision's state bytes (plan::model_state_bytes with
// kMixedPrecisionAdam), bf16 parameter gathers, fp32 gradient syncs, TP and PP bytes at 2-byte
// activations.
TEST(LayoutEquality, Bf16LayoutsMatchTheBf16SerialRun) {
  StepConfig c = base_config(Recompute::none);
  c.precision = model::Precision::bf16;
  const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
  const Outcome serial = run_serial(c, data);
  StepConfig fp32 = c;
  fp32.precision = model::Precision::fp32;
  const Outcome serial32 = run_serial(fp32, data);
  const Worst from_fp32 = compare(c, {}, serial32, serial);
  const double rms_from_fp32 = rms_param_diff(serial32, serial);
  const double moment_from_fp32 = relative_moment_diff(serial32, serial);
  Worst overall;
  double rms = 0, moment = 0;
  int runs = 0;
  for (const Layout& l : grid()) {
    if (l.schedule != plan::ScheduleKind::one_f_one_b) continue;
    SCOPED_TRACE(l.name() + " bf16");
    const Outcome got = run_layout(c, l, data);
    ++runs;
    const Worst w = compare(c, l, serial, got);
    const double g = relative_moment_diff(serial, got);
    std::printf("  %-28s loss %.3g m %.3g\n", l.name().c_str(), w.loss, g);
    // The roundings this layout adds to the serial run's (see above).
    const bool split = l.dp > 1 || l.microbatches > 1 || l.pp > 1;
    const int gradient_roundings =
        (split ? (l.zero < 2 ? l.dp * l.microbatches + 1 : l.microbatches) : 0) + (l.sp ? l.tp : 0);
    const int layers = static_cast<int>(c.model.layers);
    const int forward_roundings = (l.tp > 1 ? 2 * layers * l.tp : 0) + (l.pp - 1);
    const int chain_roundings = 2 * forward_roundings;
    const double u = std::ldexp(1.0, -8);
    if (l.dp == 1 && l.tp == 1 && l.pp == 1) {
      EXPECT_EQ(w.loss, 0.0) << "the serial layout is the reference's computation";
      EXPECT_EQ(g, 0.0);
    }
    EXPECT_LE(g, (gradient_roundings + chain_roundings + 1) * u);
    EXPECT_LE(w.loss, 1e-4 + forward_roundings * u * serial.losses.front());
    EXPECT_LE(w.state[0], 2 * kSteps * kLr);
    rms = std::max(rms, rms_param_diff(serial, got));
    moment = std::max(moment, g);
    overall.loss = std::max(overall.loss, w.loss);
    for (int k = 0; k < checkpoint::kStateKindCount; ++k)
      overall.state[k] = std::max(overall.state[k], w.state[k]);
  }
  std::printf(
      "bf16, %d runs: max |loss diff| %.3g, |param diff| %.3g (rms %.3g), m norm-wise %.3g; the "
      "bf16 serial run from the fp32 one: %.3g, %.3g (rms %.3g), %.3g\n",
      runs, overall.loss, overall.state[0], rms, moment, from_fp32.loss, from_fp32.state[0],
      rms_from_fp32, moment_from_fp32);
  EXPECT_EQ(runs, 64);
}

// --grad-reduce bf16: the DP gradient syncs on bf16 copies (every ring hop rounds to bf16), on
// dp 4 and dp2 x tp2 x pp2, ZeRO 0-3, fp32 products. The DP bytes equal the plan with 2-byte
// gradient elements and 4-byte parameter gathers (expect_counters_equal_the_plan, exactly).
// The effect, against the fp32 serial run: each rank's gradient is rounded to bf16, each of the
// N - 1 ring hops rounds its partial sum and the average rounds once more, each within 2^-8 of
// what it rounds (at most sum_r |g_r|), so the averaged gradient is within (N + 1) * 2^-8 of
// sum_r |g_r| / N: the bound on the first moment's norm-wise difference (0.0195 for N = 4).
// Measured: 3.4e-3 (N = 4) and 2.9e-3 to 3.1e-3 (N = 2), nearly as large as mixed precision's own
// 4.9e-3 from fp32: why fp32 stays the default (DeepSpeed#2768, Megatron-LM#372 ask for fp32
// accumulation).
TEST(LayoutEquality, Bf16GradientReduceMatchesTheSerialRun) {
  const StepConfig c = base_config(Recompute::none);
  const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
  const Outcome serial = run_serial(c, data);
  StepConfig bf16_products = c;
  bf16_products.precision = model::Precision::bf16;
  const double bf16_moment = relative_moment_diff(serial, run_serial(bf16_products, data));
  double worst_loss = 0, worst_moment = 0;
  for (const Layout& shape :
       {Layout{4, 1, 1}, Layout{2, 2, 2, 0, false, plan::ScheduleKind::one_f_one_b, 2}}) {
    for (int zero = 0; zero <= 3; ++zero) {
      Layout l = shape;
      l.zero = zero;
      l.bf16_grads = true;
      SCOPED_TRACE(l.name());
      const Outcome got = run_layout(c, l, data);
      const Worst w = compare(c, l, serial, got);
      const double m = relative_moment_diff(serial, got);
      EXPECT_LE(w.loss, 1e-4);
      EXPECT_LE(m, (l.dp + 1) * std::ldexp(1.0, -8));
      EXPECT_GT(m, 1e-4) << "the gradients were not reduced in bf16";
      worst_loss = std::max(worst_loss, w.loss);
      worst_moment = std::max(worst_moment, m);
    }
  }
  std::printf(
      "bf16 gradient reduce, 8 runs: max |loss diff| %.3g, m norm-wise %.3g (mixed precision: "
      "%.3g)\n",
      worst_loss, worst_moment, bf16_moment);
}

}  // namespace
}  // namespace dtrain::train
