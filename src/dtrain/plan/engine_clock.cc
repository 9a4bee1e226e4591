// The engine's clock: each kernel dtrain's GPT block, head, embedding and optimizer run, priced
// with the measured rates, then the step composed from the stage times, the TP collectives,
// the pipeline's schedule simulated on them and the DP communication thread's overlap.
#include "dtrain/plan/engine_clock.h"

#include <algorithm>
#include <cmath>

#include "dtrain/core/check.h"
#include "dtrain/plan/collective_cost.h"
#include "dtrain/plan/comm_model.h"
#include "dtrain/plan/memory_model.h"
#include "dtrain/plan/pipeline_schedule.h"
#include "dtrain/plan/pipeline_simulation.h"

namespace dtrain::plan {
namespace {

using comm::CollectiveOp;

// The engine's attention (model/ops/attention.cc) splits its (batch row, head) pairs over the
// rank's team when they hold at least 2^18 multiply-adds per member; each pair's products then
// run on one thread.
constexpr double kAttentionMinWorkPerMember = 262144;

// The engine's elementwise kernels compute in fp32 whatever the products' precision (bf16 keeps
// fp32 working copies), so they are priced at fp32's rates.
struct Kernels {
  const MeasuredRates& r;
  double seconds(KernelOp op, double elements, double calls = 1) const {
    return kernel_seconds(r, op, Precision::fp32, elements, calls);
  }
};

struct Shape {
  double B, T, C, NH, HS, F, t, BT, rows, C_local, F_local, NH_local;
};

Shape shape_of(const EngineClockInput& in) {
  const ModelShape& m = in.model;
  DTRAIN_CHECK(in.tp >= 1 && m.heads % in.tp == 0, "engine clock: --tp ", in.tp,
               " must divide the heads ", m.heads);
  Shape s{};
  s.B = static_cast<double>(in.micro_batch);
  s.T = static_cast<double>(m.seq);
  s.C = static_cast<double>(m.hidden);
  s.NH = static_cast<double>(m.heads);
  s.HS = s.C / s.NH;
  s.F = static_cast<double>(m.ffn_or_default());
  s.t = in.tp;
  s.BT = s.B * s.T;
  s.rows = in.sequence_parallel && in.tp > 1 ? s.BT / s.t : s.BT;  // LayerNorm, residual rows
  s.C_local = s.C / s.t;
  s.F_local = s.F / s.t;
  s.NH_local = s.NH / s.t;
  return s;
}

// The attention core of one micro-batch (attention_forward / attention_backward): per pair, two
// products forward (Q K^T: T x T x HS; att V: T x HS x T) and four backward (dV, datt, dQ, dK),
// and the causal softmax; the pairs shared out over the members.
struct Attention {
  double forward_s = 0, backward_s = 0;
};
Attention attention_seconds(const EngineClockInput& in, const Shape& s, const MeasuredRates& r) {
  const double pairs = s.B * s.NH_local;
  const double work = pairs * s.T * s.T * s.HS;
  const int members =
      in.threads > 1 && pairs >= 2 && work >= kAttentionMinWorkPerMember * in.threads ? in.threads
                                                                                      : 1;
  const double per_member = std::ceil(pairs / members);
  const double causal = s.T * (s.T + 1) / 2;  // elements of a pair's softmax
  const Kernels k{r};
  auto gemm1 = [&](double m, double n, double kk) {
    return gemm_seconds(r, in.precision, 1, m, n, kk);
  };
  Attention a;
  a.forward_s = per_member * (gemm1(s.T, s.T, s.HS) + gemm1(s.T, s.HS, s.T)) +
                k.seconds(KernelOp::softmax_forward, per_member * causal, per_member);
  a.backward_s = per_member * (3 * gemm1(s.T, s.HS, s.T) + gemm1(s.T, s.T, s.HS)) +
                 k.seconds(KernelOp::softmax_backward, per_member * causal, per_member);
  return a;
}

}  // namespace

PassTimes engine_layer_seconds(const EngineClockInput& in, const MeasuredRates& r) {
  const Shape s = shape_of(in);
  const Kernels k{r};
  auto gemm = [&](double m, double n, double kk) {
    return gemm_seconds(r, in.precision, in.threads, m, n, kk);
  };
  const Attention attention = attention_seconds(in, s, r);
  // block_forward_dense / _sp: LN1, QKV, attention, projection, residual, LN2, fc, GELU,
  // fc_proj, residual (sgemm(M = rows of the output, N = its columns, K = the inner size)).
  double forward =
      k.seconds(KernelOp::layernorm_forward, s.rows * s.C) + gemm(s.BT, 3 * s.C_local, s.C) +
      attention.forward_s + gemm(s.BT, s.C, s.C_local) +
      k.seconds(KernelOp::residual_forward, s.rows * s.C) +
      k.seconds(KernelOp::layernorm_forward, s.rows * s.C) + gemm(s.BT, s.F_local, s.C) +
      k.seconds(KernelOp::gelu_forward, s.BT * s.F_local) + gemm(s.BT, s.C, s.F_local) +
      k.seconds(KernelOp::residual_forward, s.rows * s.C);
  // bf16: pack_block rounds the kept tensors to bf16 after the forward, unpack_block widens
  // them again before the backward (LN outputs, QKV, attention output, GELU output).
  double conversions = 0;
  if (in.precision == Precision::bf16) {
    const double packed =
        2 * s.rows * s.C + s.BT * 3 * s.C_local + s.BT * s.C_local + s.BT * s.F_local;
    conversions = k.seconds(KernelOp::bf16_convert, packed, 5);
  }
  // B: each linear's input gradient (dinp (BT, in) = dout (BT, out) W), GELU, the LayerNorms,
  // the attention core's backward.
  const double backward_input =
      gemm(s.BT, s.F_local, s.C) + k.seconds(KernelOp::gelu_backward, s.BT * s.F_local) +
      gemm(s.BT, s.C, s.F_local) + k.seconds(KernelOp::layernorm_backward, s.rows * s.C) +
      gemm(s.BT, s.C_local, s.C) + attention.backward_s + gemm(s.BT, s.C, 3 * s.C_local) +
      k.seconds(KernelOp::layernorm_backward, s.rows * s.C);
  // W: each weight's gradient (dW (out, in) += dout^T (out, BT) inp (BT, in)).
  const double backward_weight = gemm(s.C, s.F_local, s.BT) + gemm(s.F_local, s.C, s.BT) +
                                 gemm(s.C, s.C_local, s.BT) + gemm(3 * s.C_local, s.C, s.BT);
  double recompute = 0;
  if (in.recompute == Recompute::selective) recompute = attention.forward_s;
  if (in.recompute == Recompute::full) recompute = forward;
  PassTimes p;
  p.forward_s = forward + conversions;
  p.recompute_s = recompute;
  p.backward_input_s = backward_input + recompute + conversions;
  p.backward_weight_s = backward_weight;
  return p;
}

PassTimes engine_head_seconds(const EngineClockInput& in, const MeasuredRates& r) {
  const Shape s = shape_of(in);
  const Kernels k{r};
  // The vocabulary rows this TP rank holds (model::tp_vocab_local: V padded to a multiple of tp).
  const double V = static_cast<double>(in.model.vocab);
  const double V_local = in.tp > 1 ? std::ceil(V / s.t) : V;
  auto gemm = [&](double m, double n, double kk) {
    return gemm_seconds(r, in.precision, in.threads, m, n, kk);
  };
  PassTimes p;
  p.forward_s = k.seconds(KernelOp::layernorm_forward, s.rows * s.C) + gemm(s.BT, V_local, s.C) +
                k.seconds(KernelOp::crossentropy_forward, s.BT * V_local);
  p.backward_input_s = k.seconds(KernelOp::crossentropy_backward, s.BT * V_local) +
                       gemm(s.BT, s.C, V_local) +
                       k.seconds(KernelOp::layernorm_backward, s.rows * s.C);
  p.backward_weight_s = gemm(V_local, s.C, s.BT);
  return p;
}

PassTimes engine_embedding_seconds(const EngineClockInput& in, const MeasuredRates& r) {
  const Shape s = shape_of(in);
  const Kernels k{r};
  PassTimes p;
  p.forward_s = k.seconds(KernelOp::encoder_forward, s.BT * s.C);
  p.backward_input_s = k.seconds(KernelOp::encoder_backward, s.BT * s.C);
  return p;
}

double engine_optimizer_seconds(double params, double grad_elements, Precision precision,
                                const MeasuredRates& r) {
  const Kernels k{r};
  double s = k.seconds(KernelOp::grad_norm, grad_elements) + k.seconds(KernelOp::adamw, params);
  // Mixed precision: the updated fp32 master weights rounded into the bf16 weights.
  if (precision == Precision::bf16) s += k.seconds(KernelOp::bf16_convert, params);
  return s;
}

namespace {

std::string_view link_name(bool inter_node) {
  return inter_node ? "inter_node" : "intra_node";
}

}  // namespace

double engine_collective_seconds(const Cluster& c, CollectiveOp op, comm::Algorithm algo,
                                 double bytes, int ranks, bool inter_node, Precision precision) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const MeasuredRates& r = c.gpu.measured;
  const std::string_view link = link_name(inter_node);
  if (r.present && has_collective_rate(r, comm::name(op), comm::name(algo), link)) {
    // The rates were fitted on the larger of what a rank sends and receives (measured_rates.h):
    // the direct algorithm's ranks read their peers' memory and send nothing in a reduce-scatter
    // or an all-gather.
    const CollectiveTraffic t = algo == comm::Algorithm::direct
                                    ? direct_traffic(op, bytes, ranks)
                                    : collective_traffic(op, algo, bytes, ranks);
    return collective_seconds(r, comm::name(op), comm::name(algo), link, ranks,
                              std::max(t.bytes_sent, t.bytes_received), precision);
  }
  const Link& l = inter_node ? c.inter_node : c.intra_node;
  return collective_cost(op, algo, bytes, ranks, l).time_s;
}

double engine_send_seconds(const Cluster& c, double bytes, bool inter_node) {
  if (bytes <= 0) return 0;
  const MeasuredRates& r = c.gpu.measured;
  const std::string_view link = link_name(inter_node);
  if (r.present && has_collective_rate(r, "send_recv", "direct", link)) {
    return collective_seconds(r, "send_recv", "direct", link, 2, bytes);
  }
  const Link& l = inter_node ? c.inter_node : c.intra_node;
  return l.latency_us * 1e-6 + bytes / l.bandwidth_bytes_per_s;
}

TpSeconds engine_tp_seconds(const EngineClockInput& in, const Cluster& c, bool embedding,
                            bool head) {
  TpSeconds out;
  if (in.tp == 1) return out;
  const ModelShape& m = in.model;
  const double layers = static_cast<double>(m.layers / in.pp);
  const bool sp = in.sequence_parallel;
  // f and g travel in bf16 under --precision bf16 (TensorParallelGroup's bf16 wire); the
  // vocabulary's reductions always in fp32.
  const int64_t e = in.precision == Precision::bf16 ? 2 : 4;
  auto price_as = [&](const CollectiveCall& call, Precision precision) {
    return engine_collective_seconds(c, call.op, comm::Algorithm::ring, call.bytes, in.tp,
                                     in.inter_node_tp, precision);
  };
  auto price = [&](const CollectiveCall& call) { return price_as(call, in.precision); };
  for (const CollectiveCall& call :
       tp_collectives_per_layer(in.micro_batch, m.seq, m.hidden, e, sp, in.recompute)) {
    // Two of each kind run in the forward (attention's and the MLP's), the rest in backward
    // (their conjugates, and full recompute's rerun).
    const double one = price(call) * layers;
    out.forward_s += 2 * one;
    out.backward_s += static_cast<double>(call.count - 2) * one;
  }
  if (sp) {
    for (const CollectiveCall& call : sp_regather_collectives(in.micro_batch, m.seq, m.hidden, e))
      out.backward_s += price(call) * static_cast<double>(call.count) * layers;
  }
  // The vocabulary: the embedding's partial sums (forward), the cross-entropy's max and
  // sum-exp (forward) and the LM head's input gradient (backward). Under sequence parallelism
  // the activation-sized ones are a reduce-scatter, and the head's input and the embedding's
  // output gradient are all-gathered (the same bytes each way).
  const std::vector<CollectiveCall> vocab =
      tp_vocab_collectives(in.micro_batch, m.seq, m.hidden, 4, embedding, head);
  for (size_t i = 0; i < vocab.size(); ++i) {
    CollectiveCall call = vocab[i];
    const bool activation_sized = call.bytes >= static_cast<double>(in.micro_batch * m.seq) * 4 * 3;
    if (sp && activation_sized) call.op = CollectiveOp::reduce_scatter;
    const bool backward = head && i + 1 == vocab.size();  // the LM head's input gradient
    const double seconds = price_as(call, Precision::fp32);
    (backward ? out.backward_s : out.forward_s) += seconds;
    if (sp && activation_sized) {
      CollectiveCall gather = call;
      gather.op = CollectiveOp::all_gather;
      (backward ? out.forward_s : out.backward_s) += price_as(gather, Precision::fp32);
    }
  }
  return out;
}

double oversubscription(int ranks, int threads, int cores) {
  if (cores <= 0) return 1;
  return std::max(1.0, static_cast<double>(ranks) * threads / cores);
}

DpOverlap dp_overlap(double comm_s, double last_piece_s, double window_s, double interference) {
  DpOverlap o;
  if (comm_s <= 0) return o;
  o.exposed_s = exposed_time(comm_s, last_piece_s, window_s);
  o.slowdown_s = (std::max(1.0, interference) - 1) * (comm_s - o.exposed_s);
  return o;
}

bool has_measured_rates(const Cluster& c) {
  return c.gpu.measured.present;
}

EngineClock engine_clock(const EngineClockInput& in, const Cluster& c) {
  DTRAIN_CHECK(c.gpu.measured.present, "cluster ", c.name,
               ": the engine's clock needs \"gpu.measured\" (run dtrain calibrate --compute)");
  DTRAIN_CHECK(in.pp >= 1 && in.chunks >= 1 && in.microbatches >= 1 && in.dp >= 1 &&
                   in.threads >= 1 && in.model.layers % (in.pp * in.chunks) == 0,
               "engine clock: inconsistent layout (pp ", in.pp, ", chunks ", in.chunks,
               ", microbatches ", in.microbatches, ", layers ", in.model.layers, ")");
  const MeasuredRates& r = c.gpu.measured;
  EngineClock clock;
  // Threads beyond the cores wait for one (oversubscription); those that have one share the
  // cache and memory bus with the others (corun_factor).
  const int compute_threads = in.dp * in.tp * in.pp * in.threads;
  const double over = oversubscription(in.dp * in.tp * in.pp, in.threads, r.cores);
  clock.stretch = over * corun_factor(r, compute_threads);

  // The busiest stage per micro-batch: its blocks, plus the embedding on the first and the
  // head on the last (both with one stage).
  const double layers = static_cast<double>(in.model.layers / in.pp);
  const PassTimes block = engine_layer_seconds(in, r).scaled(layers);
  PassTimes first = block, last = block;
  first += engine_embedding_seconds(in, r);
  last += engine_head_seconds(in, r);
  if (in.pp == 1) last += engine_embedding_seconds(in, r);
  const TpSeconds tp_first = engine_tp_seconds(in, c, true, in.pp == 1);
  const TpSeconds tp_last = engine_tp_seconds(in, c, in.pp == 1, true);
  auto sum = [](const PassTimes& p, const TpSeconds& t) {
    return p.forward_s + p.backward_input_s + p.backward_weight_s + t.forward_s + t.backward_s;
  };
  const bool last_busiest = sum(last, tp_last) >= sum(first, tp_first);
  const PassTimes stage = (last_busiest ? last : first).scaled(clock.stretch);
  const TpSeconds tp = last_busiest ? tp_last : tp_first;
  clock.stage = stage;
  clock.tp_forward_s = tp.forward_s;
  clock.tp_backward_s = tp.backward_s;

  // Pipeline sends: one per chunk each way per micro-batch (in the engine's fp32 or bf16).
  const int64_t e = in.precision == Precision::bf16 ? 2 : 4;
  if (in.pp > 1) {
    const double bytes = pp_bytes_per_microbatch(in.micro_batch, in.model.seq, in.model.hidden, e,
                                                 in.tp, in.sequence_parallel);
    clock.send_s = engine_send_seconds(c, bytes, in.inter_node_pp) * in.chunks;
  }
  // The schedule the executor runs, replayed on each virtual stage's times (pipeline_
  // simulation.h): L / (P v) blocks with their TP collectives, the embedding on the first, the
  // head on the last; a rank is held by its sends (one message per chunk each way).
  const ScheduleKind kind = in.chunks > 1 ? ScheduleKind::interleaved : in.schedule;
  const PipelineSchedule schedule = make_schedule(kind, in.pp, in.microbatches, in.chunks);
  const TpSeconds tp_blocks = engine_tp_seconds(in, c, false, false);
  const TpSeconds tp_embedding = engine_tp_seconds(in, c, true, false);
  const TpSeconds tp_head = engine_tp_seconds(in, c, false, true);
  auto stage_times = [](const PassTimes& p, double stretch, double tp_forward_s,
                        double tp_backward_s) {
    return StageTimes{p.forward_s * stretch + tp_forward_s,
                      p.backward_input_s * stretch + tp_backward_s, p.backward_weight_s * stretch};
  };
  auto simulate = [&](double stretch) {
    PipelineSimulationInput sim;
    sim.virtual_stage_times = virtual_stage_times(
        in.pp, in.chunks, stage_times(block, stretch, tp_blocks.forward_s, tp_blocks.backward_s),
        stage_times(engine_embedding_seconds(in, r), stretch,
                    tp_embedding.forward_s - tp_blocks.forward_s,
                    tp_embedding.backward_s - tp_blocks.backward_s),
        stage_times(engine_head_seconds(in, r), stretch, tp_head.forward_s - tp_blocks.forward_s,
                    tp_head.backward_s - tp_blocks.backward_s));
    sim.send_s = clock.send_s / in.chunks;
    return simulate_pipeline(schedule, sim);
  };
  const PipelineSimulation pipeline = simulate(clock.stretch);
  const double own_sends_s = pipeline.ranks[static_cast<size_t>(pipeline.critical_rank)].sending_s;
  const double M = in.microbatches;

  // DP and ZeRO on the communication thread: gradient syncs behind backward (the last
  // micro-batch's at ZeRO 0-1, every one's at 2-3), weight gathers behind forward (ZeRO-3's
  // every micro-batch; ZeRO 1-2's after the update is waited for before the next step).
  DpOverlap forward_overlap, backward_overlap;
  if (in.dp > 1) {
    const StateBytes bytes{in.precision == Precision::bf16 ? 2 : 4, 4, 8};
    double forward_comm = 0, backward_comm = 0, forward_piece = 0, backward_piece = 0;
    double after_update = 0;
    for (const CollectiveCall& call :
         dp_collectives(in.stage_params, in.zero_stage, bytes, in.microbatches,
                        std::max<int64_t>(1, in.dp_pieces), 1)) {
      const comm::Algorithm algo =
          call.op == CollectiveOp::all_reduce ? in.dp_algorithm : comm::Algorithm::ring;
      // Under bf16 the gradients and the gathered weights travel and reduce as bf16.
      const double one = engine_collective_seconds(c, call.op, algo, call.bytes, in.dp,
                                                   in.inter_node_dp, in.precision);
      const double all = one * static_cast<double>(call.count);
      clock.dp_comm_s += all;
      if (call.overlaps_forward && in.zero_stage < 3) {
        after_update += all;  // ZeRO 1-2: the engine gathers the updated weights at once
      } else if (call.overlaps_forward) {
        forward_comm += all;
        forward_piece = std::max(forward_piece, one);
      } else {
        backward_comm += all;
        backward_piece = std::max(backward_piece, one);
      }
    }
    const double interference = r.comm_interference;
    const double backward_one = stage.backward_input_s + stage.backward_weight_s;
    forward_overlap = dp_overlap(forward_comm, forward_piece, M * stage.forward_s, interference);
    backward_overlap =
        dp_overlap(backward_comm, backward_piece,
                   in.zero_stage >= 2 ? M * backward_one : backward_one, interference);
    clock.phases.exposed_dp_s =
        forward_overlap.exposed_s + backward_overlap.exposed_s + after_update;
  }

  // The optimizer on this rank's part: its ZeRO shard at stages 1-3, everything at 0; the
  // norm's sum of squares over the gradients it owns (the same part).
  const double owned = static_cast<double>(in.stage_params) / (in.zero_stage >= 1 ? in.dp : 1);
  clock.phases.optimizer_s =
      engine_optimizer_seconds(owned, owned, in.precision, r) * clock.stretch;

  EnginePhases& p = clock.phases;
  p.forward_s = M * stage.forward_s + forward_overlap.slowdown_s;
  p.backward_s =
      M * (stage.backward_input_s + stage.backward_weight_s) + backward_overlap.slowdown_s;
  p.tp_comm_s = M * (tp.forward_s + tp.backward_s);
  const double busy = p.forward_s + p.backward_s + p.tp_comm_s;
  const double slowdown_s = forward_overlap.slowdown_s + backward_overlap.slowdown_s;
  // A rank waiting in the schedule's bubble gives its core back (the engine's waits spin only
  // microseconds, then yield or sleep), so with more threads than cores the step is the longer
  // of the ranks' stretched work and the schedule's critical path without oversubscription.
  const double schedule_s =
      over > 1
          ? std::max(busy + own_sends_s, simulate(clock.stretch / over).makespan_s + slowdown_s)
          : pipeline.makespan_s + slowdown_s;
  // The makespan sums the same seconds in another order: clamp the rounding (-1e-19 at P = 1).
  p.pipeline_wait_s = std::max(0.0, schedule_s - busy);
  // The bubble as the critical rank sees it (pipeline.bubble() without oversubscription).
  clock.pipeline_sends_s = own_sends_s;
  clock.bubble.ideal_time = busy + own_sends_s;
  clock.bubble.total_time = busy + p.pipeline_wait_s;
  clock.bubble.bubble_time = std::max(0.0, p.pipeline_wait_s - own_sends_s);
  clock.bubble.fraction_of_total =
      clock.bubble.total_time > 0 ? clock.bubble.bubble_time / clock.bubble.total_time : 0;
  clock.bubble.fraction_of_ideal =
      clock.bubble.ideal_time > 0 ? clock.bubble.bubble_time / clock.bubble.ideal_time : 0;
  p.step_s =
      p.forward_s + p.backward_s + p.tp_comm_s + p.pipeline_wait_s + p.exposed_dp_s + p.optimizer_s;
  return clock;
}

}  // namespace dtrain::plan
