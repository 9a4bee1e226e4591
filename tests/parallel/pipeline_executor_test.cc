// The pipeline executor on real ranks (threads backend), one step at a time, without the
// optimizer: the activation bytes it holds against the checker's in-flight count (GPipe M
// micro-batches, 1F1B at most P, ZB-H1 its F-to-W weight stash, min(P, M)), one micro-batch's
// bytes against the plan/ formulas (ZB-H1's with the kept output gradients), the
// bytes it sends against plan::pp_bytes_per_microbatch, the measured actions in the
// schedule's order and causally consistent across ranks, the measured timeline and bubble,
// and the forward-only evaluation against the whole model. Gradients and the training run
// against the single-rank reference are in tests/e2e/layout_equality_test.cc.
#include "dtrain/parallel/pipeline_executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/rng.h"
#include "dtrain/cost/activation_memory.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/cost/head_activation_memory.h"
#include "dtrain/cost/pipeline_model.h"
#include "dtrain/parallel/pipeline_checker.h"

namespace dtrain::parallel {
namespace {

using plan::ScheduleKind;

constexpr int64_t kBatch = 8;  // global B, divisible by every M
constexpr int64_t kSeq = 8;    // T
constexpr uint64_t kSeed = 3;

model::GptConfig config() {
  return {.vocab = 64, .context = 8, .layers = 8, .heads = 2, .channels = 16};
}

struct Tokens {
  std::vector<int32_t> inputs, targets;  // (B, T)
};

Tokens tokens() {
  Rng rng(11);
  Tokens t;
  for (int64_t i = 0; i < kBatch * kSeq; ++i) {
    t.inputs.push_back(static_cast<int32_t>(rng.uniform_int(64)));
    t.targets.push_back(static_cast<int32_t>(rng.uniform_int(64)));
  }
  return t;
}

// What one rank measured in one step.
struct RankResult {
  PipelineStepRecord record;
  std::vector<int64_t> chunk_bytes;  // (v) one micro-batch of each chunk
  int64_t microbatch_bytes = 0;
  int64_t activations_peak = 0;  // the tracker's, workspace included
  int64_t bytes_sent = 0;        // in the step
  float eval_loss = 0;
};

std::vector<RankResult> run_step(ScheduleKind kind, int P, int M, int v) {
  const model::GptConfig g = config();
  PipelineExecutorConfig ec;
  ec.schedule = plan::make_schedule(kind, P, M, v);
  ec.partition = balanced_partition(static_cast<int>(g.layers), P, v);
  ec.micro_batch = kBatch / M;
  ec.seq = kSeq;
  const Tokens data = tokens();
  std::vector<RankResult> out(static_cast<size_t>(P));
  comm::threads::run_ranks(P, [&](comm::Communicator& pp) {
    RankResult& r = out[static_cast<size_t>(pp.rank())];
    MemoryTracker tracker;
    model::GptModel m(g, stage_of(ec.partition, pp.rank()), &tracker);
    m.init_params(kSeed);
    PipelineExecutor ex(pp, m, ec, &tracker);
    for (int c = 0; c < v; ++c) r.chunk_bytes.push_back(ex.chunk_activation_bytes(c));
    r.microbatch_bytes = ex.microbatch_activation_bytes();
    const int64_t sent_before = pp.traffic().bytes_sent;
    r.record = ex.run(data.inputs, data.targets);
    r.bytes_sent = pp.traffic().bytes_sent - sent_before;
    r.activations_peak = tracker.peak_bytes(MemoryTag::activations);
    r.eval_loss = ex.evaluate(data.inputs, data.targets);
  });
  return out;
}

plan::ActivationShape layer_shape(int64_t b) {
  plan::ActivationShape a;
  a.seq = kSeq;
  a.micro_batch = b;
  a.hidden = config().channels;
  a.heads = config().heads;
  a.bytes_per_element = 4;
  a.dropout = false;
  a.count_layernorm_stats = true;
  return a;
}

plan::HeadActivationShape head_shape(int64_t b) {
  return {.seq = kSeq,
          .micro_batch = b,
          .hidden = config().channels,
          .vocab = config().vocab,
          .bytes_per_element = 4};
}

TEST(PipelineExecutor, OneMicroBatchOfAChunkIsThePlanFormulas) {
  // A chunk keeps its blocks' activations; the last virtual stage also the head's tensors
  // (final LN input included), every other one the (b, T, C) output it sends on; the first
  // virtual stage also the token ids (b*T int32).
  for (const auto& [P, v, M] : {std::tuple{4, 1, 2}, std::tuple{2, 2, 4}, std::tuple{2, 1, 1}}) {
    const int64_t bb = kBatch / M;
    const StagePartition part = balanced_partition(8, P, v);
    const std::vector<RankResult> got =
        run_step(v > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b, P, M, v);
    for (int r = 0; r < P; ++r) {
      int64_t sum = 0;
      for (int c = 0; c < v; ++c) {
        const int vs = part.virtual_stage(r, c);
        double want = part.layer_count(r, c) * plan::activation_bytes_per_layer(layer_shape(bb));
        if (vs == part.virtual_stages() - 1) {
          want += plan::head_activation_bytes(head_shape(bb));
        } else {
          want += plan::pp_bytes_per_microbatch(bb, kSeq, config().channels, 4, 1, false);
          if (vs == 0) want += 4.0 * static_cast<double>(bb * kSeq);
        }
        SCOPED_TRACE(testing::Message()
                     << "P " << P << " v " << v << " rank " << r << " chunk " << c);
        EXPECT_EQ(got[static_cast<size_t>(r)].chunk_bytes[static_cast<size_t>(c)],
                  static_cast<int64_t>(want));
        sum += static_cast<int64_t>(want);
      }
      EXPECT_EQ(got[static_cast<size_t>(r)].microbatch_bytes, sum);
    }
  }
}

TEST(PipelineExecutor, ZbH1MicroBatchAddsTheWeightGradientStash) {
  // A split backward keeps each block's four linears' output gradients from B to W, allocated
  // with the micro-batch's activations: plan's weight_grad_stash_bytes_per_layer per block on
  // top of the fused schedule's figure.
  for (const auto& [P, M] : {std::tuple{4, 2}, std::tuple{2, 4}}) {
    const int64_t bb = kBatch / M;
    const StagePartition part = balanced_partition(8, P, 1);
    const std::vector<RankResult> fused = run_step(ScheduleKind::one_f_one_b, P, M, 1);
    const std::vector<RankResult> split = run_step(ScheduleKind::zero_bubble_h1, P, M, 1);
    for (int r = 0; r < P; ++r) {
      const double stash =
          part.layer_count(r, 0) * plan::weight_grad_stash_bytes_per_layer(layer_shape(bb));
      EXPECT_EQ(split[static_cast<size_t>(r)].microbatch_bytes,
                fused[static_cast<size_t>(r)].microbatch_bytes + static_cast<int64_t>(stash))
          << "P " << P << " M " << M << " rank " << r;
    }
  }
}

// The bytes held at the worst moment when rank r runs its list in program order, allocating a
// chunk's micro-batch at its forward and freeing it at its fused backward, or, split, at W.
int64_t replayed_peak(const plan::PipelineSchedule& s, int r,
                      const std::vector<int64_t>& chunk_bytes) {
  int64_t live = 0, peak = 0;
  for (const plan::Action& a : s.per_rank[static_cast<size_t>(r)]) {
    const int64_t bytes = chunk_bytes[static_cast<size_t>(a.chunk)];
    if (a.kind == plan::ActionKind::forward) live += bytes;
    if (a.kind == plan::ActionKind::backward || a.kind == plan::ActionKind::backward_weight)
      live -= bytes;
    peak = std::max(peak, live);
  }
  return peak;
}

TEST(PipelineExecutor, PeakActivationsAreTheCheckersInFlightCountTimesOneMicroBatch) {
  for (int P : {2, 4}) {
    for (int M : {1, 2, 4, 8}) {
      for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                                ScheduleKind::interleaved, ScheduleKind::zero_bubble_h1}) {
        const int v = kind == ScheduleKind::interleaved ? 2 : 1;
        SCOPED_TRACE(testing::Message() << plan::name(kind) << " P " << P << " M " << M);
        const plan::PipelineSchedule s = plan::make_schedule(kind, P, M, v);
        const ScheduleReport checked = simulate_schedule(s);
        const std::vector<RankResult> res = run_step(kind, P, M, v);
        for (int r = 0; r < P; ++r) {
          const RankResult& rr = res[static_cast<size_t>(r)];
          // ZB-H1 holds a micro-batch (activations and kept output gradients) from F until
          // its W: the checker's weight stash; the fused schedules until B.
          const RankReport& cr = checked.ranks[static_cast<size_t>(r)];
          const bool split = kind == ScheduleKind::zero_bubble_h1;
          const double inflight = split ? cr.peak_weight_stash : cr.peak_inflight;
          const int64_t measured = rr.record.peak_inflight_bytes;
          // The tracker saw the workspace (b, T) plus exactly what was in flight.
          const int64_t ws =
              static_cast<int64_t>(plan::workspace_activation_bytes(head_shape(kBatch / M)));
          EXPECT_EQ(rr.activations_peak, ws + measured) << "rank " << r;
          EXPECT_EQ(measured, replayed_peak(s, r, rr.chunk_bytes)) << "rank " << r;
          if (v == 1) {
            // Every micro-batch of the stage is the same size: count x one micro-batch.
            EXPECT_EQ(measured, static_cast<int64_t>(inflight) * rr.microbatch_bytes)
                << "rank " << r;
            EXPECT_EQ(static_cast<double>(measured),
                      plan::peak_weight_stash_microbatches(kind, P, M, v, r) *
                          static_cast<double>(rr.microbatch_bytes))
                << "rank " << r;
            if (kind == ScheduleKind::gpipe) {
              EXPECT_EQ(measured, M * rr.microbatch_bytes) << "rank " << r;  // GPipe: M x
            } else if (split) {
              EXPECT_EQ(measured, std::min(P, M) * rr.microbatch_bytes) << "rank " << r;
            } else {
              EXPECT_EQ(measured, std::min(P - r, M) * rr.microbatch_bytes) << "rank " << r;
              EXPECT_LE(measured, P * rr.microbatch_bytes);  // 1F1B, ZB-H1: at most P x
            }
          } else {
            // Chunks differ in size (the head, the sent output, the ids), so the checker's
            // count (a chunk is 1/v) bounds the bytes by the largest and smallest chunk.
            const auto [lo, hi] = std::minmax_element(rr.chunk_bytes.begin(), rr.chunk_bytes.end());
            EXPECT_LE(measured, static_cast<int64_t>(std::llround(inflight * v)) * *hi);
            EXPECT_GE(measured, static_cast<int64_t>(std::llround(inflight * v)) * *lo);
          }
        }
      }
    }
  }
}

// With one chunk per rank the executor keeps every set of activations a step gave back and
// makes a set only when none is spare: after each step it holds exactly the sets of its in-flight
// peak (one spare, as before, would hold one), the next step reuses them, and no step's peak
// grows (each set freed and made again would fault its pages in anew). ZB-H1's weight-gradient
// stash, freed at W, is not part of a set.
TEST(PipelineExecutor, KeepsTheInFlightPeaksSetsForTheNextStepAndNoMore) {
  const model::GptConfig g = config();
  const int P = 2;
  const StagePartition part = balanced_partition(static_cast<int>(g.layers), P, 1);
  for (ScheduleKind kind :
       {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::zero_bubble_h1}) {
    for (int M : {1, 2, 4}) {
      SCOPED_TRACE(testing::Message() << plan::name(kind) << " P " << P << " M " << M);
      PipelineExecutorConfig ec;
      ec.schedule = plan::make_schedule(kind, P, M, 1);
      ec.partition = part;
      ec.micro_batch = kBatch / M;
      ec.seq = kSeq;
      const Tokens data = tokens();
      comm::threads::run_ranks(P, [&](comm::Communicator& pp) {
        const int r = pp.rank();
        MemoryTracker tracker;
        model::GptModel m(g, stage_of(ec.partition, r), &tracker);
        m.init_params(kSeed);
        PipelineExecutor ex(pp, m, ec, &tracker);
        const bool split = kind == ScheduleKind::zero_bubble_h1;
        const int64_t stash = split ? static_cast<int64_t>(part.layer_count(r, 0) *
                                                           plan::weight_grad_stash_bytes_per_layer(
                                                               layer_shape(ec.micro_batch)))
                                    : 0;
        const int64_t set = ex.microbatch_activation_bytes() - stash;
        // The most micro-batches in flight at once: GPipe M, 1F1B min(P - r, M), ZB-H1 min(P, M).
        const int64_t sets = kind == ScheduleKind::gpipe ? M
                             : split                     ? std::min(P, M)
                                                         : std::min(P - r, M);
        const int64_t before = tracker.current_bytes(MemoryTag::activations);
        int64_t first_peak = 0;
        for (int step = 0; step < 3; ++step) {
          const PipelineStepRecord rec = ex.run(data.inputs, data.targets);
          EXPECT_EQ(rec.peak_inflight_bytes, sets * (set + stash)) << "rank " << r;
          EXPECT_EQ(tracker.current_bytes(MemoryTag::activations) - before, sets * set)
              << "rank " << r << " step " << step;
          if (step == 0) first_peak = tracker.peak_bytes(MemoryTag::activations);
          EXPECT_EQ(tracker.peak_bytes(MemoryTag::activations), first_peak)
              << "rank " << r << " step " << step;
        }
      });
    }
  }
}

TEST(PipelineExecutor, SendsActivationsAndGradientsOfThePlannedSize) {
  for (ScheduleKind kind : {ScheduleKind::one_f_one_b, ScheduleKind::interleaved}) {
    const int P = 4, M = 4, v = kind == ScheduleKind::interleaved ? 2 : 1;
    const plan::PipelineSchedule s = plan::make_schedule(kind, P, M, v);
    const std::vector<RankResult> res = run_step(kind, P, M, v);
    const double per_message = plan::pp_bytes_per_microbatch(kBatch / M, kSeq, 16, 4, 1, false);
    for (int r = 0; r < P; ++r) {
      const auto& list = s.per_rank[static_cast<size_t>(r)];
      const auto sends = std::count_if(list.begin(), list.end(),
                                       [](const plan::Action& a) { return is_send(a.kind); });
      // Every virtual stage but the last sends M activations, every one but the first M
      // gradients: 2M(v) - (M on the first rank) - (M on the last).
      const int64_t expected_sends = 2 * M * v - (r == 0 ? M : 0) - (r == P - 1 ? M : 0);
      EXPECT_EQ(sends, expected_sends) << "rank " << r;
      EXPECT_EQ(res[static_cast<size_t>(r)].bytes_sent,
                static_cast<int64_t>(static_cast<double>(sends) * per_message))
          << plan::name(kind) << " rank " << r;
    }
  }
}

TEST(PipelineExecutor, MeasuredActionsFollowTheScheduleAndCausality) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                            ScheduleKind::interleaved, ScheduleKind::zero_bubble_h1}) {
    const int P = 4, M = 8, v = kind == ScheduleKind::interleaved ? 2 : 1;
    SCOPED_TRACE(plan::name(kind));
    const plan::PipelineSchedule s = plan::make_schedule(kind, P, M, v);
    const std::vector<RankResult> res = run_step(kind, P, M, v);
    std::vector<std::vector<MeasuredAction>> actions;
    // (virtual stage, mb) -> when its forward / backward ran.
    std::map<std::pair<int, int>, MeasuredAction> forwards, backwards;
    for (int r = 0; r < P; ++r) {
      const std::vector<MeasuredAction>& got = res[static_cast<size_t>(r)].record.actions;
      const std::vector<plan::Action>& want = s.per_rank[static_cast<size_t>(r)];
      ASSERT_EQ(got.size(), want.size());
      double previous_end = 0;
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_EQ(got[k].action, want[k]) << "rank " << r << " action " << k;
        EXPECT_LE(got[k].start_us, got[k].end_us);
        if (!is_compute(got[k].action.kind)) continue;
        EXPECT_GE(got[k].start_us, previous_end) << "rank " << r << " action " << k;
        previous_end = got[k].end_us;
        const int vs = s.virtual_stage(r, got[k].action.chunk);
        const auto key = std::pair{vs, got[k].action.microbatch};
        if (got[k].action.kind == plan::ActionKind::forward) forwards[key] = got[k];
        if (got[k].action.kind == plan::ActionKind::backward ||
            got[k].action.kind == plan::ActionKind::backward_input) {
          backwards[key] = got[k];
        }
      }
      actions.push_back(got);
    }
    const int V = P * v;
    for (int mb = 0; mb < M; ++mb) {
      for (int vs = 0; vs < V; ++vs) {
        const auto key = std::pair{vs, mb};
        const auto before = std::pair(vs - 1, mb), after = std::pair(vs + 1, mb);
        if (vs > 0) {
          EXPECT_GE(forwards[key].start_us, forwards[before].end_us);
        }
        if (vs < V - 1) {
          EXPECT_GE(backwards[key].start_us, backwards[after].end_us);
        }
        EXPECT_GE(backwards[key].start_us, forwards[key].end_us);
      }
    }

    // The measured timeline: one row per rank, the checker's labels in the same order.
    const ScheduleReport unit = simulate_schedule(s);
    const trace::Timeline simulated = to_timeline(s, unit);
    double origin = actions[0][0].start_us;
    for (const auto& row : actions) {
      for (const MeasuredAction& m : row) origin = std::min(origin, m.start_us);
    }
    const trace::Timeline measured = to_measured_timeline(s, actions, origin);
    ASSERT_EQ(measured.rows.size(), static_cast<size_t>(P));
    EXPECT_EQ(measured.time_unit, "us");
    for (int r = 0; r < P; ++r) {
      const auto& m = measured.rows[static_cast<size_t>(r)].spans;
      const auto& u = simulated.rows[static_cast<size_t>(r)].spans;
      ASSERT_EQ(m.size(), u.size());
      for (size_t k = 0; k < m.size(); ++k) {
        EXPECT_EQ(m[k].label, u[k].label);
        EXPECT_EQ(m[k].kind, u[k].kind);
        EXPECT_GE(m[k].start, 0.0);
      }
    }

    // The bubble, defined as the checker's: 1 - sum(busy) / (P * makespan).
    const MeasuredBubble b = measured_bubble(s, actions);
    ASSERT_EQ(b.busy_us.size(), static_cast<size_t>(P));
    EXPECT_NEAR(b.makespan_us, measured.end_time(), 1e-6);
    double busy = 0;
    for (double x : b.busy_us) busy += x;
    EXPECT_NEAR(b.fraction_of_total, 1 - busy / (P * b.makespan_us), 1e-9);
    EXPECT_GE(b.fraction_of_total, 0.0);
    EXPECT_LT(b.fraction_of_total, 1.0);
    EXPECT_GT(b.forward_us, 0.0);
    EXPECT_GT(b.backward_input_us, 0.0);
  }
}

TEST(PipelineExecutor, LossAndEvaluationEqualTheWholeModel) {
  // The same initial parameters in one whole model: its forward loss on the batch is the mean
  // of the pipeline's micro-batch losses (equal sizes), up to float summation order.
  const model::GptConfig g = config();
  const Tokens data = tokens();
  MemoryTracker tracker;
  model::GptModel whole(g, &tracker);
  whole.init_params(kSeed);
  const float want = whole.forward(data.inputs, data.targets, kBatch, kSeq);
  for (const auto& [kind, P, M, v] :
       {std::tuple{ScheduleKind::one_f_one_b, 4, 4, 1},
        std::tuple{ScheduleKind::interleaved, 2, 8, 2}, std::tuple{ScheduleKind::gpipe, 2, 1, 1}}) {
    const std::vector<RankResult> res = run_step(kind, P, M, v);
    for (int r = 0; r < P; ++r) {
      const RankResult& rr = res[static_cast<size_t>(r)];
      if (r == P - 1) {
        EXPECT_NEAR(rr.record.loss, want, 2e-6) << plan::name(kind);
        EXPECT_NEAR(rr.eval_loss, want, 2e-6) << plan::name(kind);
      } else {
        EXPECT_EQ(rr.record.loss, 0.0f);  // only the last stage computes the loss
        EXPECT_EQ(rr.eval_loss, 0.0f);
      }
    }
  }
}

TEST(PipelineExecutor, RefusesAnInvalidScheduleInsteadOfHanging) {
  const model::GptConfig g = config();
  PipelineExecutorConfig ec;
  ec.schedule = plan::make_1f1b(2, 2);
  ec.schedule.per_rank[1].pop_back();  // rank 1 never runs its last backward
  ec.partition = balanced_partition(8, 2, 1);
  ec.micro_batch = kBatch / 2;
  ec.seq = kSeq;
  try {
    comm::threads::run_ranks(2, [&](comm::Communicator& pp) {
      MemoryTracker tracker;
      model::GptModel m(g, stage_of(ec.partition, pp.rank()), &tracker);
      PipelineExecutor ex(pp, m, ec, &tracker);
    });
    FAIL() << "an invalid schedule was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("invalid schedule: rank"), std::string::npos) << e.what();
  }
}

TEST(PipelineExecutor, StageModelsHoldOnlyTheirTensors) {
  const model::GptConfig g = config();
  const StagePartition part = balanced_partition(8, 2, 2);  // rank 0: blocks 0-1, 4-5
  MemoryTracker t0, t1, whole_tracker;
  model::GptModel first(g, stage_of(part, 0), &t0);
  model::GptModel last(g, stage_of(part, 1), &t1);
  model::GptModel whole(g, &whole_tracker);
  first.init_params(kSeed);
  last.init_params(kSeed);
  whole.init_params(kSeed);
  // Each block is on exactly one stage; wte on both (tied); wpe on the first, lnf on the last.
  EXPECT_EQ(first.param_count() + last.param_count(), whole.param_count() + g.vocab * g.channels);
  EXPECT_EQ(t0.current_bytes(MemoryTag::params), first.param_count() * 4);
  EXPECT_NO_THROW(first.param_table().index_of("h.5.mlp.fc.w"));
  EXPECT_THROW(first.param_table().index_of("h.2.mlp.fc.w"), Error);
  EXPECT_THROW(first.param_table().index_of("lnf.w"), Error);
  EXPECT_NO_THROW(last.param_table().index_of("lnf.w"));
  EXPECT_THROW(last.param_table().index_of("wpe"), Error);
  // Initialised as in the whole model, tensor by tensor (so both wte copies are equal).
  for (model::GptModel* m : {&first, &last}) {
    const model::ParamTable& table = m->param_table();
    for (size_t i = 0; i < table.size(); ++i) {
      const std::span<float> got = m->param(static_cast<int>(i));
      const std::span<float> want = whole.param(whole.param_table().index_of(table[i].name));
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end())) << table[i].name;
    }
  }
}

}  // namespace
}  // namespace dtrain::parallel
