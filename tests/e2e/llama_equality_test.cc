// The Llama family in the engine against the serial reference (reference/serial_engine.h): data
// parallelism at every ZeRO stage and each recompute mode gives the serial run's losses, every
// parameter and both Adam moments after 3 steps (kLossTol, kParamTol, kMomentTol below), and
// every counter of the layout report equals its plan/ formula (the model states, one
// micro-batch's activations and the peak, the DP bytes); the parameter count is the planner's
// Llama formula's (plan::param_count of the same shape).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/cost/model_presets.h"
#include "dtrain/cost/moe.h"
#include "dtrain/cost/pipeline_model.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "dtrain/report/layout_report.h"
#include "e2e/equality_support.h"

namespace dtrain::train {
namespace {

constexpr int kSteps = 3;
constexpr float kLr = 1e-3f;
// fp32 sums in another order (the DP reductions) than the serial run's: the GPT grid's bounds.
constexpr double kLossTol = 4e-6, kParamTol = 1e-5, kMomentTol = 1e-4;

StepConfig llama_config(Recompute recompute) {
  StepConfig c;
  c.model = model::gpt_preset("llama-tiny").config;
  c.model.vocab = 96;
  c.model.channels = 32;
  c.model.ffn_hidden = 64;
  c.batch = 8;
  c.seq = 16;
  c.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
  c.grad_clip = 1.0f;
  c.init_seed = 42;
  c.recompute = recompute;
  return c;
}

e2e::Outcome run_layout(const StepConfig& c, const LayoutOptions& o,
                        const std::vector<data::Batch>& data, LayoutReport& report) {
  const EngineConfig config = make_engine_config(c, o);
  const int world = o.world();
  std::vector<checkpoint::RankState> states(static_cast<size_t>(world));
  std::vector<float> losses;
  comm::threads::run_ranks(world, [&](comm::Communicator& comm) {
    Engine engine(config, comm);
    std::vector<float> mine;
    for (const data::Batch& b : data) mine.push_back(engine.train_step(b, kLr).loss);
    LayoutReport r = gather_layout_report(engine, comm, o);
    mine.push_back(engine.eval_loss(data[0]));
    states[static_cast<size_t>(comm.rank())] = engine.export_state();
    if (comm.rank() == 0) {
      report = std::move(r);
      losses = mine;
    }
  });
  e2e::Outcome out = e2e::empty_outcome(c.model);
  out.losses = losses;
  const model::ParamTable serial = model::gpt_param_table(c.model);
  for (const checkpoint::RankState& s : states) e2e::add_pieces(serial, s, out);
  return out;
}

// A layout's axes and ZeRO stage, and a pipeline's micro-batches and schedule (ignored without
// one); the rest at their defaults.
LayoutOptions layout_of(int dp, int tp, int pp, int zero, int microbatches = 1,
                        plan::ScheduleKind schedule = plan::ScheduleKind::one_f_one_b) {
  LayoutOptions o;
  o.dp = dp;
  o.tp = tp;
  o.pp = pp;
  o.zero_stage = zero;
  if (pp > 1) {
    o.microbatches = microbatches;
    o.schedule = schedule;
  }
  return o;
}

// Runs the layout and compares it with the serial run, printing the largest differences after
// `label`.
e2e::Worst run_against_serial(const std::string& label, const StepConfig& c, const LayoutOptions& o,
                              const std::vector<data::Batch>& data, const e2e::Outcome& serial,
                              LayoutReport& report) {
  const e2e::Worst w = e2e::compare(c, serial, run_layout(c, o, data, report));
  std::printf("  %-48s: loss %.1e params %.1e m %.1e v %.1e\n", label.c_str(), w.loss, w.state[0],
              w.state[1], w.state[2]);
  return w;
}

// The fp32 layouts' bounds against the serial run (kLossTol, kParamTol, kMomentTol).
void expect_within_fp32_tolerances(const e2e::Worst& w) {
  EXPECT_LE(w.loss, kLossTol);
  EXPECT_LE(w.state[0], kParamTol);
  EXPECT_LE(w.state[1], kMomentTol);
  EXPECT_LE(w.state[2], kMomentTol);
}

// Every rank's counters beside plan/: the model states, one micro-batch's activations, and the
// bytes of every traffic site.
void expect_counters_equal_the_plan(const LayoutReport& report, size_t ranks) {
  ASSERT_EQ(report.ranks.size(), ranks);
  for (const RankRow& r : report.ranks) {
    SCOPED_TRACE(::testing::Message() << "rank " << r.rank);
    for (const StateRow& s : r.state) EXPECT_EQ(s.current_bytes, s.formula_bytes);
    EXPECT_EQ(static_cast<double>(r.microbatch_activation_bytes),
              r.planned_microbatch_activation_bytes);
    for (const SiteBytes& site : r.traffic) EXPECT_EQ(site.measured, site.planned) << site.site;
  }
}

TEST(LlamaEquality, DataParallelAtEveryZeroStageAndRecomputeMatchesTheSerialRun) {
  for (const Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
    const StepConfig c = llama_config(rc);
    const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
    const e2e::Outcome serial = e2e::run_serial(c, data, kLr);
    for (const int dp : {2, 4}) {
      for (int zero = 0; zero <= 3; ++zero) {
        const std::string label = str("llama ", name(rc), " dp ", dp, " zero ", zero);
        SCOPED_TRACE(label);
        LayoutReport report;
        const e2e::Worst w =
            run_against_serial(label, c, layout_of(dp, 1, 1, zero), data, serial, report);
        expect_within_fp32_tolerances(w);
        ASSERT_EQ(report.ranks.size(), static_cast<size_t>(dp));
        for (const RankRow& k : report.ranks) {
          SCOPED_TRACE(::testing::Message() << "rank " << k.rank);
          for (const StateRow& s : k.state) EXPECT_EQ(s.current_bytes, s.formula_bytes);
          EXPECT_EQ(static_cast<double>(k.microbatch_activation_bytes),
                    k.planned_microbatch_activation_bytes);
          EXPECT_EQ(static_cast<double>(k.activations_peak_bytes),
                    k.planned_activations_peak_bytes);
          if (zero == 3) {
            EXPECT_EQ(k.gathered_peak_bytes, k.gathered_formula_bytes + k.in_flight_grad_bytes);
          }
          for (const SiteBytes& site : k.traffic) {
            EXPECT_EQ(site.measured, site.planned) << site.site;
          }
          EXPECT_GT(k.site("dp").measured, 0);
        }
      }
    }
  }
}

// Pipelines: every schedule on 2 stages (the untied head's stage holds lm_head beside the final
// norm, no wte copy and no embedding group), interleaved on 4 chunks, and DP x PP with ZeRO;
// each against the serial run over the same micro-batches (the pipeline's M per DP rank), with
// the counters equal to plan/.
TEST(LlamaEquality, PipelinesWithEveryScheduleMatchTheSerialRun) {
  struct Case {
    int dp, pp, vp, zero, microbatches;
    plan::ScheduleKind schedule;
    Recompute recompute;
  };
  using plan::ScheduleKind;
  const Case cases[] = {
      {1, 2, 1, 0, 4, ScheduleKind::one_f_one_b, Recompute::none},
      {1, 2, 1, 0, 4, ScheduleKind::gpipe, Recompute::none},
      {1, 2, 1, 0, 4, ScheduleKind::zero_bubble_h1, Recompute::none},
      {1, 2, 1, 0, 4, ScheduleKind::zero_bubble_h1, Recompute::full},
      {1, 2, 2, 0, 4, ScheduleKind::interleaved, Recompute::selective},
      {2, 2, 1, 1, 2, ScheduleKind::one_f_one_b, Recompute::none},
      {2, 2, 1, 3, 2, ScheduleKind::one_f_one_b, Recompute::full},
      {2, 2, 1, 2, 2, ScheduleKind::zero_bubble_h1, Recompute::none},
  };
  for (const Case& k : cases) {
    StepConfig c = llama_config(k.recompute);
    c.model.layers = 4;
    const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
    const e2e::Outcome serial = e2e::run_serial(c, data, kLr, k.dp * k.microbatches);
    const std::string label = str("llama dp ", k.dp, " pp ", k.pp, " vp ", k.vp, " zero ", k.zero,
                                  " ", plan::name(k.schedule), " ", name(k.recompute));
    SCOPED_TRACE(label);
    LayoutOptions o = layout_of(k.dp, 1, k.pp, k.zero, k.microbatches, k.schedule);
    if (k.vp > 1) o.chunks = k.vp;
    LayoutReport report;
    const e2e::Worst w = run_against_serial(label, c, o, data, serial, report);
    expect_within_fp32_tolerances(w);
    expect_counters_equal_the_plan(report, static_cast<size_t>(k.dp * k.pp));
    for (const RankRow& r : report.ranks) {
      SCOPED_TRACE(::testing::Message() << "rank " << r.rank);
      if (k.vp == 1) {
        EXPECT_EQ(r.measured_inflight, r.checker_inflight);
      }
      EXPECT_GT(r.site("pp").measured, 0);
      EXPECT_EQ(r.site("embedding").measured, 0);  // untied: no wte sum between the ends
    }
  }
}

// Tensor parallelism: query heads, K/V heads (split when tp divides --kv-heads; above them each
// rank a copy of one, the copies' weight gradients summed), the gate, up and down projections
// and the vocabulary (the untied head's rows too) split as Megatron does, alone and with DP
// (ZeRO 1 and 3) and a pipeline, with and without sequence parallelism (the RMSNorm weights'
// gradients summed over TP); each against the serial run, every counter (TP's f and g,
// vocabulary reductions and K/V copies' sums, DP, PP) equal to plan/.
TEST(LlamaEquality, TensorParallelLayoutsMatchTheSerialRun) {
  struct Case {
    int dp, tp, pp, zero, microbatches;
    int64_t kv_heads;
    Recompute recompute;
    bool sp = false;
    plan::ScheduleKind schedule = plan::ScheduleKind::one_f_one_b;
  };
  const Case cases[] = {
      {1, 2, 1, 0, 1, 2, Recompute::none},
      {1, 2, 1, 0, 1, 4, Recompute::selective},
      {1, 4, 1, 0, 1, 4, Recompute::full},
      {2, 2, 1, 1, 1, 2, Recompute::none},
      {2, 2, 1, 3, 1, 2, Recompute::full},
      {1, 2, 2, 0, 4, 2, Recompute::none},
      {2, 2, 2, 1, 2, 2, Recompute::selective},
      {1, 2, 1, 0, 1, 2, Recompute::none, true},
      {2, 2, 1, 3, 1, 2, Recompute::full, true},
      {1, 2, 2, 0, 4, 2, Recompute::none, true, plan::ScheduleKind::zero_bubble_h1},
      // More TP ranks than K/V heads: each rank a copy of one head, the copies' gradients summed.
      {1, 4, 1, 0, 1, 2, Recompute::none},
      {1, 2, 1, 0, 1, 1, Recompute::selective},
      {2, 4, 1, 1, 1, 1, Recompute::full},
      {2, 4, 1, 3, 1, 2, Recompute::none, true},
      {1, 4, 2, 2, 4, 1, Recompute::none, false, plan::ScheduleKind::zero_bubble_h1},
  };
  for (const Case& k : cases) {
    StepConfig c = llama_config(k.recompute);
    c.model.layers = 4;
    c.model.kv_heads = k.kv_heads;
    const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
    const int64_t accumulation = k.pp > 1 ? k.dp * k.microbatches : 1;
    const e2e::Outcome serial = e2e::run_serial(c, data, kLr, accumulation);
    const std::string label = str("llama dp ", k.dp, " tp ", k.tp, " pp ", k.pp, " zero ", k.zero,
                                  " kv ", k.kv_heads, " ", name(k.recompute), k.sp ? " sp" : "");
    SCOPED_TRACE(label);
    LayoutOptions o = layout_of(k.dp, k.tp, k.pp, k.zero, k.microbatches, k.schedule);
    o.sequence_parallel = k.sp;
    LayoutReport report;
    const e2e::Worst w = run_against_serial(label, c, o, data, serial, report);
    expect_within_fp32_tolerances(w);
    expect_counters_equal_the_plan(report, static_cast<size_t>(k.dp * k.tp * k.pp));
    for (const RankRow& r : report.ranks) {
      EXPECT_GT(r.site("tp_block").measured, 0) << r.rank;
      // The K/V copies' gradient sums run exactly when TP holds copies.
      EXPECT_EQ(r.site("tp_kv_copy_grads").measured > 0, k.tp > k.kv_heads) << r.rank;
    }
  }
}

// Mixed precision (--precision bf16): the one-rank layout is the bf16 serial run's computation bit
// for bit; DP, TP and PP add roundings of their own (sums in another order that bf16 turns into
// whole bf16 steps: layout_equality_test.cc's Bf16 test derives the bounds used here), within
// 1e-4 + the forward's extra roundings x 2^-8 x the first loss, and parameters within 2 lr a step.
// Every counter equals plan/ with mixed precision's state bytes and 2-byte activations.
TEST(LlamaEquality, Bf16LayoutsMatchTheBf16SerialRun) {
  struct Case {
    int dp, tp, pp, zero, microbatches;
    int ep = 1;  // > 1: Mixtral-like (4 SwiGLU experts, top-2, the aux loss off as above)
  };
  const Case cases[] = {{1, 1, 1, 0, 1}, {2, 1, 1, 1, 1}, {2, 1, 1, 3, 1},    {1, 2, 1, 0, 1},
                        {1, 1, 2, 0, 4}, {2, 2, 2, 2, 2}, {2, 1, 1, 0, 1, 2}, {2, 2, 1, 1, 1, 2}};
  for (const Case& k : cases) {
    StepConfig c = llama_config(Recompute::none);
    c.model.layers = 4;
    c.precision = model::Precision::bf16;
    if (k.ep > 1) c.model.moe = {.experts = 4, .top_k = 2, .every = 1, .aux_loss_coef = 0.0};
    const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
    const int64_t accumulation = k.pp > 1 ? k.dp * k.microbatches : 1;
    const e2e::Outcome serial = e2e::run_serial(c, data, kLr, accumulation);
    const std::string label =
        str("llama bf16 dp ", k.dp, " ep ", k.ep, " tp ", k.tp, " pp ", k.pp, " zero ", k.zero);
    SCOPED_TRACE(label);
    LayoutOptions o = layout_of(k.dp, k.tp, k.pp, k.zero, k.microbatches);
    o.ep = k.ep;
    LayoutReport report;
    const e2e::Worst w = run_against_serial(label, c, o, data, serial, report);
    const double u = std::ldexp(1.0, -8);
    const int forward_roundings =
        (k.tp > 1 ? 2 * static_cast<int>(c.model.layers) * k.tp : 0) + (k.pp - 1);
    if (k.dp * k.tp * k.pp == 1) {
      EXPECT_EQ(w.loss, 0.0);
      EXPECT_EQ(w.state[0], 0.0);
    }
    EXPECT_LE(w.loss, 1e-4 + forward_roundings * u * serial.losses.front());
    EXPECT_LE(w.state[0], 2 * kSteps * kLr);
    expect_counters_equal_the_plan(report, static_cast<size_t>(k.dp * k.tp * k.pp));
  }
}

// Context parallelism with each algorithm: only the K/V heads travel (ring hops, the gathered
// [K|V], Ulysses' all-to-alls of NKV / cp heads), each token rotated at its global position in
// the balanced or contiguous split; against the serial run, every counter equal to plan/ (the
// CP bytes and attention pairs by plan::cp_traffic_per_layer and causal_attention_pairs with
// the K/V heads).
TEST(LlamaEquality, ContextParallelWithEveryAlgorithmMatchesTheSerialRun) {
  struct Case {
    int dp, tp, cp, zero;
    plan::CpAlgorithm algorithm;
    int64_t kv_heads;
    Recompute recompute;
  };
  using plan::CpAlgorithm;
  const Case cases[] = {
      {1, 1, 2, 0, CpAlgorithm::ring, 2, Recompute::none},
      {1, 1, 2, 0, CpAlgorithm::all_gather, 2, Recompute::selective},
      {1, 1, 2, 0, CpAlgorithm::ulysses, 2, Recompute::none},
      {1, 1, 4, 0, CpAlgorithm::ring, 1, Recompute::full},
      {1, 1, 4, 0, CpAlgorithm::all_gather, 2, Recompute::none},
      {1, 1, 4, 0, CpAlgorithm::ulysses, 4, Recompute::none},
      {1, 2, 2, 0, CpAlgorithm::ring, 2, Recompute::none},
      {2, 1, 2, 1, CpAlgorithm::ulysses, 2, Recompute::full},
      // More TP ranks than K/V heads: each TP rank's one K/V head copy travels the CP ring.
      {1, 4, 2, 0, CpAlgorithm::ring, 2, Recompute::none},
      {1, 2, 2, 0, CpAlgorithm::all_gather, 1, Recompute::selective},
  };
  for (const Case& k : cases) {
    StepConfig c = llama_config(k.recompute);
    c.model.kv_heads = k.kv_heads;
    const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
    const e2e::Outcome serial = e2e::run_serial(c, data, kLr);
    const std::string label =
        str("llama dp ", k.dp, " tp ", k.tp, " cp ", k.cp, " ", plan::name(k.algorithm), " kv ",
            k.kv_heads, " ", name(k.recompute));
    SCOPED_TRACE(label);
    LayoutOptions o = layout_of(k.dp, k.tp, 1, k.zero);
    o.cp = k.cp;
    o.cp_algorithm = k.algorithm;
    LayoutReport report;
    const e2e::Worst w = run_against_serial(label, c, o, data, serial, report);
    expect_within_fp32_tolerances(w);
    expect_counters_equal_the_plan(report, static_cast<size_t>(k.dp * k.tp * k.cp));
    ASSERT_EQ(report.cp_ranks.size(), static_cast<size_t>(k.dp * k.tp * k.cp));
    for (const CpRankRow& r : report.cp_ranks) {
      SCOPED_TRACE(::testing::Message() << "rank " << r.rank);
      EXPECT_GT(r.bytes, 0);
      EXPECT_EQ(r.bytes, r.bytes_formula);
      EXPECT_EQ(r.messages, r.messages_formula);
      EXPECT_EQ(r.pairs, r.pairs_formula);
    }
  }
}

// Expert parallelism on a Mixtral-like model (every block routed: 4 SwiGLU experts, top-2,
// dropless): EP alone (dp = ep), with more DP than EP, ZeRO 1-3, each recompute mode, expert TP
// (each expert's gate, up and down split as the dense MLP's) and a pipeline with 1F1B and
// ZB-H1, against the serial run of the same model with the load-balancing loss off (its value is
// a per-rank statistic: each DP rank's aux is of its own tokens, as in Megatron); every counter
// (the EP dispatch and combine, DP over the dense and the expert-data-parallel groups, TP, PP,
// the states with E / ep experts a rank) equal to plan/.
TEST(LlamaEquality, ExpertParallelMixtralMatchesTheSerialRun) {
  struct Case {
    int dp, ep, tp, pp, zero;
    Recompute recompute;
    plan::ScheduleKind schedule = plan::ScheduleKind::one_f_one_b;
  };
  using plan::ScheduleKind;
  const Case cases[] = {
      {2, 2, 1, 1, 0, Recompute::none},
      {4, 2, 1, 1, 1, Recompute::selective},
      {4, 4, 1, 1, 3, Recompute::full},
      {2, 2, 1, 1, 2, Recompute::none},
      {2, 2, 2, 1, 0, Recompute::none},
      {2, 2, 2, 1, 1, Recompute::full},
      {2, 2, 1, 2, 1, Recompute::none},
      {2, 2, 1, 2, 0, Recompute::none, ScheduleKind::zero_bubble_h1},
  };
  for (const Case& k : cases) {
    StepConfig c = llama_config(k.recompute);
    c.model.layers = 2;
    c.model.moe = {.experts = 4, .top_k = 2, .every = 1, .aux_loss_coef = 0.0};
    const int microbatches = k.pp > 1 ? 2 : 1;
    const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
    const e2e::Outcome serial = e2e::run_serial(c, data, kLr, k.pp > 1 ? k.dp * microbatches : 1);
    const std::string label =
        str("mixtral dp ", k.dp, " ep ", k.ep, " tp ", k.tp, " pp ", k.pp, " zero ", k.zero, " ",
            plan::name(k.schedule), " ", name(k.recompute));
    SCOPED_TRACE(label);
    LayoutOptions o = layout_of(k.dp, k.tp, k.pp, k.zero, microbatches, k.schedule);
    o.ep = k.ep;
    LayoutReport report;
    const e2e::Worst w = run_against_serial(label, c, o, data, serial, report);
    expect_within_fp32_tolerances(w);
    EXPECT_EQ(report.ep, k.ep);
    EXPECT_EQ(report.experts_per_rank, c.model.moe.experts / k.ep);
    expect_counters_equal_the_plan(report, static_cast<size_t>(k.dp * k.tp * k.pp));
    for (const RankRow& r : report.ranks) EXPECT_GT(r.site("ep").measured, 0) << r.rank;
  }
}

// Dense and Mixtral-like (4 SwiGLU experts, top-2, every block or every second routed: the
// planner's first_dense = every - 1 places its routed layers where the engine's are).
TEST(LlamaEquality, TheParameterCountIsThePlannersLlamaFormula) {
  for (const int64_t experts : {0, 4}) {
    for (const int64_t every : {1, 2}) {
      for (const int64_t kv : {1, 2, 4}) {
        for (const bool tied : {false, true}) {
          if (experts == 0 && every > 1) continue;
          model::GptConfig g = llama_config(Recompute::none).model;
          g.layers = 4;
          g.kv_heads = kv;
          g.tie_embeddings = tied;
          if (experts > 0) g.moe = {.experts = experts, .top_k = 2, .every = every};
          plan::ModelShape m;
          m.name = "custom";
          m.family = plan::ModelFamily::llama;
          m.layers = g.layers;
          m.hidden = g.channels;
          m.heads = g.heads;
          m.kv_heads = kv;
          m.ffn_hidden = g.ffn_hidden;
          m.vocab = g.vocab;
          m.seq = g.context;
          m.moe = {.experts = experts, .top_k = 2, .every = every, .first_dense = every - 1};
          // The planner's Llama has an untied head (Llama 2 and 3 do); a tied one is V * C fewer.
          const int64_t planned = plan::param_count(m) - (tied ? g.vocab * g.channels : 0);
          SCOPED_TRACE(::testing::Message() << "experts " << experts << " every " << every << " kv "
                                            << kv << " tied " << tied);
          EXPECT_EQ(model::gpt_param_count(g), planned);
          EXPECT_EQ(model::gpt_param_table(g).total_count(), planned);
          for (int64_t l = 0; l < g.layers; ++l) {
            EXPECT_EQ(model::is_moe_layer(g.moe, l), plan::is_moe_layer(m, l)) << "layer " << l;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dtrain::train
