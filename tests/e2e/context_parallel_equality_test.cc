// Context parallelism equals the serial run (DESIGN.md test 5, issue 33): cp in {2, 4} x each
// algorithm (ring, all-gather, ulysses) x {alone, with dp 2, with tp 2 + SP} trains K = 3 steps
// on the same batches as tests/reference/serial_engine.h and compares the loss of every step and
// the evaluation loss after the last, and every parameter and both AdamW moments, assembled from
// what each rank exports for a checkpoint (each element written by exactly one rank: the CP
// replicas write nothing twice). The max differences are printed per case.
// And the counters: the bytes each CP rank sends per layer in forward and backward (the CP
// group's own communicator, measured) equal cost/context_parallel.h's formulas, the causal work
// per rank equals plan::causal_attention_pairs (balanced: every rank the same).
//
// Tolerances are layout_equality_test.cc's, for the same reasons: the CP ranks sum each
// attention row's softmax block by block (a log-sum-exp merge) and the gradients over DP x CP,
// other orders of the same float sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/cost/context_parallel.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
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
constexpr double kMomentTol = 1e-4;  // relative to the tensor's largest |value|

// L2 C32 NH4 T16 B4: T divisible by 2 x 4 (the balanced ring at cp 4), NH by cp x tp = 4 x 2
// for Ulysses with TP is not (NH 4): that case is cp 2 x tp 2.
StepConfig base_config(Recompute recompute = Recompute::none) {
  StepConfig c;
  c.model = {.vocab = 64, .context = 16, .layers = 2, .heads = 4, .channels = 32};
  c.batch = 4;
  c.seq = 16;
  c.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
  c.grad_clip = 1.0f;
  c.init_seed = 5;
  c.recompute = recompute;
  return c;
}

struct Case {
  int cp = 2;
  plan::CpAlgorithm algo = plan::CpAlgorithm::ring;
  int dp = 1, tp = 1;
  bool sp = false;
  int zero = 0;
  int pp = 1;                                                     // with 2 micro-batches of 2 rows
  bool contiguous = false;                                        // --cp-split contiguous
  plan::ScheduleKind schedule = plan::ScheduleKind::one_f_one_b;  // with pp > 1
  std::string name() const {
    return str(
        "cp", cp, " ", plan::name(algo), " dp", dp, " tp", tp, sp ? " sp" : "",
        zero > 0 ? str(" zero", zero) : "", pp > 1 ? str(" pp", pp) : "",
        pp > 1 && schedule != plan::ScheduleKind::one_f_one_b ? str(" ", plan::name(schedule)) : "",
        contiguous ? " contiguous" : "");
  }
};

// What one CP rank measured, for the counter checks.
struct CpMeasure {
  parallel::ContextParallelCounters counters;
  int cp_rank = 0;
};

Outcome run_case(const StepConfig& c, const Case& k, const std::vector<data::Batch>& data,
                 std::vector<CpMeasure>* measures = nullptr,
                 parallel::CpWire wire = parallel::CpWire::by_precision) {
  LayoutOptions o;
  o.dp = k.dp;
  o.tp = k.tp;
  o.cp = k.cp;
  o.cp_algorithm = k.algo;
  o.sequence_parallel = k.sp;
  o.zero_stage = k.zero;
  o.pp = k.pp;
  o.cp_contiguous = k.contiguous;
  if (k.pp > 1) {
    o.microbatches = 2;
    o.schedule = k.schedule;
  }
  EngineConfig config = make_engine_config(c, o);
  config.cp_wire = wire;
  const int world = config.world();
  std::vector<checkpoint::RankState> states(static_cast<size_t>(world));
  std::vector<std::vector<float>> losses(static_cast<size_t>(world));
  if (measures != nullptr) measures->assign(static_cast<size_t>(world), {});
  comm::threads::run_ranks(world, [&](comm::Communicator& comm) {
    Engine engine(config, comm);
    std::vector<float>& mine = losses[static_cast<size_t>(comm.rank())];
    for (const data::Batch& b : data) mine.push_back(engine.train_step(b, kLr).loss);
    if (measures != nullptr) {
      CpMeasure& m = (*measures)[static_cast<size_t>(comm.rank())];
      m.counters = engine.cp_counters();
      m.cp_rank = engine.coord().cp;
    }
    mine.push_back(engine.eval_loss(data[0]));
    states[static_cast<size_t>(comm.rank())] = engine.export_state();
  });
  Outcome out = empty_outcome(c.model);
  out.losses = losses[0];
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(std::memcmp(losses[static_cast<size_t>(r)].data(), out.losses.data(),
                          out.losses.size() * sizeof(float)),
              0)
        << k.name() << ": rank " << r << "'s losses differ from rank 0's";
  }
  const model::ParamTable serial = model::gpt_param_table(c.model);
  for (const checkpoint::RankState& s : states) add_pieces(serial, s, out);
  return out;
}

struct Worst {
  double loss = 0, state[checkpoint::kStateKindCount] = {0, 0, 0};
};

Worst compare(const StepConfig& c, const Case& k, const Outcome& want, const Outcome& got) {
  Worst w;
  EXPECT_EQ(got.losses.size(), want.losses.size()) << k.name();
  for (size_t s = 0; s < std::min(got.losses.size(), want.losses.size()); ++s) {
    w.loss = std::max(w.loss, static_cast<double>(std::fabs(got.losses[s] - want.losses[s])));
  }
  const model::ParamTable serial = model::gpt_param_table(c.model);
  for (int kind = 0; kind < checkpoint::kStateKindCount; ++kind) {
    for (const model::ParamTensor& t : serial.tensors()) {
      double scale = 0, diff = 0;
      for (int64_t i = t.offset; i < t.offset + t.count; ++i) {
        const auto e = static_cast<size_t>(i);
        EXPECT_EQ(got.writes[kind][e], 1)
            << k.name() << ": " << name(static_cast<checkpoint::StateKind>(kind)) << " of "
            << t.name << " element " << i - t.offset << " written by " << got.writes[kind][e]
            << " ranks";
        if (got.writes[kind][e] != 1) return w;
        scale = std::max(scale, static_cast<double>(std::fabs(want.state[kind][e])));
        diff = std::max(diff,
                        static_cast<double>(std::fabs(got.state[kind][e] - want.state[kind][e])));
      }
      w.state[kind] = std::max(w.state[kind], kind == 0 ? diff : (scale > 0 ? diff / scale : diff));
    }
  }
  return w;
}

void expect_equal_to_serial(const std::vector<Case>& cases, Recompute recompute = Recompute::none,
                            int layers = 2) {
  StepConfig c = base_config(recompute);
  c.model.layers = layers;
  const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
  const Outcome serial = run_serial(c, data);
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name());
    const Outcome got = run_case(c, k, data);
    const Worst w = compare(c, k, serial, got);
    std::printf("  %-28s recompute %-9s max |loss diff| %.1e  param %.1e  m %.1e  v %.1e\n",
                k.name().c_str(), std::string(name(recompute)).c_str(), w.loss, w.state[0],
                w.state[1], w.state[2]);
    EXPECT_LE(w.loss, kLossTol);
    EXPECT_LE(w.state[0], kParamTol);
    EXPECT_LE(w.state[1], kMomentTol);
    EXPECT_LE(w.state[2], kMomentTol);
  }
}

constexpr plan::CpAlgorithm kAlgorithms[] = {plan::CpAlgorithm::ring, plan::CpAlgorithm::all_gather,
                                             plan::CpAlgorithm::ulysses};

TEST(ContextParallelEquality, AloneMatchesTheSerialRun) {
  std::vector<Case> cases;
  for (int cp : {2, 4}) {
    for (plan::CpAlgorithm a : kAlgorithms) cases.push_back({cp, a});
    for (plan::CpAlgorithm a : {plan::CpAlgorithm::ring, plan::CpAlgorithm::all_gather}) {
      Case contiguous{cp, a};
      contiguous.contiguous = true;
      cases.push_back(contiguous);
    }
  }
  expect_equal_to_serial(cases);
}

TEST(ContextParallelEquality, WithDataParallelMatchesTheSerialRun) {
  std::vector<Case> cases;
  for (int cp : {2, 4}) {
    for (plan::CpAlgorithm a : kAlgorithms) cases.push_back({cp, a, 2});
  }
  expect_equal_to_serial(cases);
}

TEST(ContextParallelEquality, WithTensorAndSequenceParallelMatchesTheSerialRun) {
  std::vector<Case> cases;
  for (int cp : {2, 4}) {
    for (plan::CpAlgorithm a : kAlgorithms) {
      // Ulysses needs the heads (4) divisible by cp x tp: cp 4 x tp 2 is refused (CLI test).
      if (a == plan::CpAlgorithm::ulysses && cp * 2 > 4) continue;
      cases.push_back({cp, a, 1, 2, true});
    }
  }
  expect_equal_to_serial(cases);
}

// What crosses the stages is the CP shard (B x T/cp rows); ZeRO-3 shards over DP x CP.
TEST(ContextParallelEquality, WithPipelineAndZero3MatchesTheSerialRun) {
  std::vector<Case> cases;
  for (int cp : {2, 4}) {
    for (plan::CpAlgorithm a : kAlgorithms) {
      Case pipeline{cp, a};
      pipeline.pp = 2;
      cases.push_back(pipeline);
      Case zero3{cp, a, 2};
      zero3.zero = 3;
      cases.push_back(zero3);
    }
  }
  expect_equal_to_serial(cases);
}

// ZeRO-1 and ZeRO-2 shard the optimizer state (ZeRO-2 the gradients too) over DP x CP: with
// dp 2 a shard per each of the dp x cp ranks.
TEST(ContextParallelEquality, WithZero1And2MatchesTheSerialRun) {
  std::vector<Case> cases;
  for (int cp : {2, 4}) {
    for (int zero : {1, 2}) {
      for (plan::CpAlgorithm a : kAlgorithms) {
        Case k{cp, a, 2};
        k.zero = zero;
        cases.push_back(k);
      }
    }
  }
  expect_equal_to_serial(cases);
}

// The zero-bubble schedule splits each backward into B (input gradients) and W (weight
// gradients): the CP attention backward has no weights, so it runs whole in B (its dQ, dK, dV
// are input gradients) and W finds nothing of CP's to do. The interleaved schedule runs two
// model chunks per stage (4 layers on pp 2), each block's CP state held under its own key.
TEST(ContextParallelEquality, WithZeroBubbleAndInterleavedSchedulesMatchesTheSerialRun) {
  std::vector<Case> cases;
  for (int cp : {2, 4}) {
    for (plan::ScheduleKind schedule :
         {plan::ScheduleKind::zero_bubble_h1, plan::ScheduleKind::interleaved}) {
      for (plan::CpAlgorithm a : kAlgorithms) {
        Case k{cp, a};
        k.pp = 2;
        k.schedule = schedule;
        cases.push_back(k);
      }
    }
  }
  expect_equal_to_serial(cases, Recompute::none, 4);
}

// Full recompute reruns each block's forward (its CP communication too); selective has nothing
// to rerun under CP (the blockwise backward recomputes the probabilities from the log-sum-exp).
TEST(ContextParallelEquality, WithRecomputeMatchesTheSerialRun) {
  for (Recompute recompute : {Recompute::selective, Recompute::full}) {
    std::vector<Case> cases;
    for (int cp : {2, 4}) {
      for (plan::CpAlgorithm a : kAlgorithms) cases.push_back({cp, a});
    }
    expect_equal_to_serial(cases, recompute);
  }
}

// --precision bf16 against the bf16 serial run: the blockwise attention rounds the same operands
// to bf16 (Q and K for the scores, the probabilities and V for the output) but its probabilities
// are the unnormalised exp of a running max, rounded before the division by the row sum, and the
// CP ranks' DP x CP gradient average folds one more bf16 rounding per rank; so, like
// layout_equality_test.cc's bf16 grid, the tolerance is bf16's, not fp32's: the loss within
// 1e-4 + 4 layers' roundings (2^-8) of it, the first moment norm-wise within 8 roundings, the
// parameters within 2 lr a step. And bit for bit the same run with K/V on the wire in fp32.
TEST(ContextParallelEquality, Bf16MatchesTheBf16SerialRun) {
  StepConfig c = base_config();
  c.precision = model::Precision::bf16;
  const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
  const Outcome serial = run_serial(c, data);
  const double u = std::ldexp(1.0, -8);
  for (int cp : {2, 4}) {
    for (plan::CpAlgorithm a : kAlgorithms) {
      for (int dp : {1, 2}) {
        const Case k{cp, a, dp};
        SCOPED_TRACE(k.name());
        const Outcome got = run_case(c, k, data);
        double loss = 0, param = 0, m_diff = 0, m_norm = 0;
        for (size_t s = 0; s < got.losses.size(); ++s) {
          loss = std::max(loss, static_cast<double>(std::fabs(got.losses[s] - serial.losses[s])));
        }
        for (size_t e = 0; e < got.state[0].size(); ++e) {
          param =
              std::max(param, static_cast<double>(std::fabs(got.state[0][e] - serial.state[0][e])));
          const double d = got.state[1][e] - serial.state[1][e];
          m_diff += d * d;
          m_norm += static_cast<double>(serial.state[1][e]) * serial.state[1][e];
        }
        const double m_rel = std::sqrt(m_diff / m_norm);
        std::printf("  %-28s bf16 max |loss diff| %.1e  param %.1e  m norm-wise %.1e\n",
                    k.name().c_str(), loss, param, m_rel);
        EXPECT_LE(loss, 1e-4 + 4 * c.model.layers * u * serial.losses.front());
        EXPECT_LE(m_rel, 8 * u);
        EXPECT_LE(param, 2 * kSteps * kLr);
        // K/V (Ulysses: Q, K, V, O) in bf16 on the wire change no bit: every product reading
        // them rounds them to bf16 anyway (the gradients travel in fp32 either way).
        const Outcome fp32_wire = run_case(c, k, data, nullptr, parallel::CpWire::fp32);
        EXPECT_EQ(std::memcmp(got.losses.data(), fp32_wire.losses.data(),
                              got.losses.size() * sizeof(float)),
                  0);
        for (int kind = 0; kind < checkpoint::kStateKindCount; ++kind) {
          EXPECT_EQ(std::memcmp(got.state[kind].data(), fp32_wire.state[kind].data(),
                                got.state[kind].size() * sizeof(float)),
                    0)
              << name(static_cast<checkpoint::StateKind>(kind));
        }
      }
    }
  }
}

// Bytes per rank per layer, forward and backward, measured on the CP group's communicator over
// the steps, against cost/context_parallel.h (fp32 on the wire: e = 4).
TEST(ContextParallelCounters, BytesPerLayerAndCausalWorkEqualThePlanFormulas) {
  const StepConfig c = base_config();
  const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
  std::printf("  %-10s %-3s %16s %16s %16s %16s\n", "algorithm", "cp", "fwd B/layer", "fwd formula",
              "bwd B/layer", "bwd formula");
  for (int cp : {2, 4}) {
    for (plan::CpAlgorithm a : kAlgorithms) {
      const Case k{cp, a};
      SCOPED_TRACE(k.name());
      std::vector<CpMeasure> measures;
      (void)run_case(c, k, data, &measures);
      plan::CpShape s;
      s.seq = c.seq;
      s.micro_batch = c.batch;
      s.hidden = c.model.channels;
      s.heads = c.model.heads;
      s.cp = cp;
      s.bytes_per_element = 4;
      const plan::CpLayerTraffic want = plan::cp_traffic_per_layer(s, a, Recompute::none);
      const double passes = static_cast<double>(c.model.layers) * kSteps;  // one micro-batch
      for (const CpMeasure& m : measures) {
        const double fwd = static_cast<double>(m.counters.forward.traffic.bytes_sent) / passes;
        const double bwd = static_cast<double>(m.counters.backward.traffic.bytes_sent) / passes;
        EXPECT_EQ(fwd, want.forward.bytes_sent);
        EXPECT_EQ(bwd, want.backward.bytes_sent);
        EXPECT_EQ(static_cast<double>(m.counters.forward.calls) / passes,
                  static_cast<double>(want.forward.messages));
        EXPECT_EQ(static_cast<double>(m.counters.backward.calls) / passes,
                  static_cast<double>(want.backward.messages));
        if (a != plan::CpAlgorithm::ulysses) {
          // Per (row, head): the balanced split's pairs, the same on every rank.
          const int64_t pairs =
              plan::causal_attention_pairs(c.seq, cp, m.cp_rank, plan::CpSplit::balanced);
          EXPECT_EQ(m.counters.attention_pairs,
                    pairs * c.batch * c.model.heads * c.model.layers * kSteps);
        }
        // Full recompute reruns the forward before each backward: plan/ counts it there.
        EXPECT_EQ(m.counters.recompute.traffic.bytes_sent, 0);
        if (&m == &measures.front()) {
          std::printf("  %-10s %-3d %16.0f %16.0f %16.0f %16.0f\n",
                      std::string(plan::name(a)).c_str(), cp, fwd, want.forward.bytes_sent, bwd,
                      want.backward.bytes_sent);
        }
      }
      // The same layout under full recompute: backward + the reruns = the formula's backward.
      std::vector<CpMeasure> full;
      (void)run_case(base_config(Recompute::full), k, data, &full);
      const plan::CpLayerTraffic want_full = plan::cp_traffic_per_layer(s, a, Recompute::full);
      for (const CpMeasure& m : full) {
        EXPECT_EQ(static_cast<double>(m.counters.forward.traffic.bytes_sent) / passes,
                  want_full.forward.bytes_sent);
        EXPECT_EQ(static_cast<double>(m.counters.backward.traffic.bytes_sent +
                                      m.counters.recompute.traffic.bytes_sent) /
                      passes,
                  want_full.backward.bytes_sent);
      }
    }
  }
}

}  // namespace
}  // namespace dtrain::train
