// The engine's clock: the step composed from the stage times (engine_compute.cc), the TP
// collectives, the pipeline's schedule simulated on them and the DP communication thread's
// overlap (engine_comm.cc).
#include "dtrain/clock/engine_clock.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "dtrain/clock/engine_clock_internal.h"
#include "dtrain/core/check.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/cost/moe.h"
#include "dtrain/schedule/pipeline_schedule.h"
#include "dtrain/schedule/pipeline_simulation.h"

namespace dtrain::plan {
namespace detail {

// Routed blocks on the stage that holds the most of them.
int64_t busiest_stage_moe_layers(const EngineClockInput& in) {
  const int64_t layers = in.model.layers / in.pp;
  int64_t routed = 0;
  for (int stage = 0; stage < in.pp; ++stage) {
    routed = std::max(routed, moe_layers_in(in.model, stage * layers, layers));
  }
  return routed;
}

}  // namespace detail

namespace {

using comm::CollectiveOp;
using detail::busiest_stage_moe_layers;

}  // namespace

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

std::string engine_clock_moe_gap(bool moe, int tp, int ep, int zero_stage, Recompute recompute,
                                 Precision precision) {
  if (!moe) return {};
  if (tp > 1) {
    return str("--tp ", tp,
               " with --experts: the engine clock (a cluster file with gpu.measured) does not "
               "price the MoE layer under TP (expert tensor parallelism) yet");
  }
  if (ep > 1 && (zero_stage != 0 || recompute == Recompute::full || precision != Precision::fp32)) {
    return str("--ep ", ep,
               ": the engine clock (a cluster file with gpu.measured) prices EP at --zero 0, "
               "fp32, without full recompute so far (here: --zero ",
               zero_stage, ", ", name(precision), ", recompute ", name(recompute), ")");
  }
  return {};
}

bool has_measured_rates(const Cluster& c) {
  return c.gpu.measured.present;
}

namespace {

// ZeRO-3's syncs on the busiest stage (the last when `head`, else the first; a single stage
// both): its units' sizes and compute from the layout, their collectives from `dp_seconds`, run
// through zero3_steps. The exposed part is what the timeline adds to the compute; the hidden
// collectives slow compute by `interference`, booked to forward for the forward's gathers
// (`forward`'s slowdown) and to backward for the rest (the result's).
template <typename DpSeconds>
DpOverlap zero3_overlap(const EngineClockInput& in, const Cluster& c, bool head, double stretch,
                        const TpSeconds& stage_tp, DpSeconds&& dp_seconds, PartnerWaits waits,
                        double interference, double* comm_s, DpOverlap* forward) {
  const MeasuredRates& r = c.gpu.measured;
  Zero3Stage z;
  z.head = head;
  z.embedding = in.pp == 1 || !head;
  z.embeddings_deferred = in.pp > 1;
  z.blocks = in.model.layers / in.pp;
  const double layers = std::max(1, z.blocks);
  const PassTimes block = engine_block_seconds(in, c).scaled(stretch);
  const TpSeconds block_tp = engine_tp_seconds(in, c, false, false);
  z.block.forward_s = block.forward_s + block_tp.forward_s / layers;
  z.block.backward_s =
      block.backward_input_s + block.backward_weight_s + block_tp.backward_s / layers;
  const PassTimes embedding = engine_embedding_seconds(in, r).scaled(stretch);
  const PassTimes head_pass = engine_head_seconds(in, r).scaled(stretch);
  if (z.embedding) {
    z.embeddings.forward_s = embedding.forward_s;
    z.embeddings.backward_s = embedding.backward_input_s + embedding.backward_weight_s;
  }
  if (z.head) {
    z.final_norm.forward_s = head_pass.forward_s;
    z.final_norm.backward_s = head_pass.backward_input_s + head_pass.backward_weight_s;
  }
  // The vocabulary's TP reductions go with the head's compute (with the embedding's on a
  // first stage).
  Zero3Unit& vocab = z.head ? z.final_norm : z.embeddings;
  vocab.forward_s += std::max(0.0, stage_tp.forward_s - block_tp.forward_s);
  vocab.backward_s += std::max(0.0, stage_tp.backward_s - block_tp.backward_s);
  // Parameters: blocks as the engine cuts them, the final LayerNorm (2C), the embeddings the rest
  // of the stage's.
  // A routed block holds its router and E / ep experts: the stage's mean block.
  double block_params = static_cast<double>(engine_layer_param_count(in.model, in.tp));
  if (in.model.moe.enabled() && z.blocks > 0) {
    const double routed = static_cast<double>(busiest_stage_moe_layers(in));
    block_params += routed / z.blocks *
                    static_cast<double>(engine_moe_layer_param_count(in.model, in.ep) -
                                        engine_layer_param_count(in.model, in.tp));
  }
  const double norm_params = z.head ? 2.0 * static_cast<double>(in.model.hidden) : 0;
  const double embedding_params =
      std::max(0.0, static_cast<double>(in.stage_params) - z.blocks * block_params - norm_params);
  const double param_bytes = in.precision == Precision::bf16 ? 2 : 4, grad_bytes = 4;
  auto collectives = [&](Zero3Unit& u, double params) {
    if (params <= 0) return;
    u.gather_s = dp_seconds(CollectiveOp::all_gather, comm::Algorithm::ring, params * param_bytes);
    u.reduce_scatter_s =
        dp_seconds(CollectiveOp::reduce_scatter, comm::Algorithm::ring, params * grad_bytes);
  };
  collectives(z.block, block_params);
  collectives(z.final_norm, norm_params);
  collectives(z.embeddings, embedding_params);

  const CommTimeline t = run_comm_timeline(zero3_steps(z, in.microbatches), waits);
  *comm_s = t.comm_s;
  DpOverlap o;
  o.exposed_s = std::max(0.0, t.span_s - t.compute_s);
  const double slowdown = (interference - 1) * std::max(0.0, t.comm_s - o.exposed_s);
  const double forward_gathers =
      in.microbatches * ((z.embedding || z.head ? z.embeddings.gather_s : 0) +
                         z.blocks * z.block.gather_s + (z.head ? z.final_norm.gather_s : 0));
  const double forward_share = t.comm_s > 0 ? std::min(1.0, forward_gathers / t.comm_s) : 0;
  forward->slowdown_s = slowdown * forward_share;
  o.slowdown_s = slowdown - forward->slowdown_s;
  return o;
}

}  // namespace

EngineClock engine_clock(const EngineClockInput& in, const Cluster& c) {
  DTRAIN_CHECK(c.gpu.measured.present, "cluster ", c.name,
               ": the engine's clock needs \"gpu.measured\" (run dtrain calibrate --compute)");
  DTRAIN_CHECK(in.pp >= 1 && in.chunks >= 1 && in.microbatches >= 1 && in.dp >= 1 &&
                   in.threads >= 1 && in.model.layers % (in.pp * in.chunks) == 0,
               "engine clock: inconsistent layout (pp ", in.pp, ", chunks ", in.chunks,
               ", microbatches ", in.microbatches, ", layers ", in.model.layers, ")");
  const MeasuredRates& r = c.gpu.measured;
  if (in.ranks_per_node == 0 && c.gpus_per_node > 0) {
    EngineClockInput on_nodes = in;
    on_nodes.ranks_per_node = c.gpus_per_node;
    return engine_clock(on_nodes, c);
  }
  const bool has_cache = r.cache.l1d_bytes > 0 || r.cache.l2_bytes > 0 || r.cache.l3_bytes > 0;
  if ((!in.price_cache_residency && has_cache) ||
      (!in.price_partner_waits && r.oversubscribed_wait_s > 0)) {
    // The effects left unpriced are taken out of the rates once: no caches known prices every
    // product cold, and no wait prices collectives at their idle-machine rates.
    Cluster plain = c;
    if (!in.price_cache_residency) {
      plain.gpu.measured.cache.l1d_bytes = 0;
      plain.gpu.measured.cache.l2_bytes = 0;
      plain.gpu.measured.cache.l3_bytes = 0;
    }
    if (!in.price_partner_waits) plain.gpu.measured.oversubscribed_wait_s = 0;
    return engine_clock(in, plain);
  }
  EngineClock clock;
  // Threads beyond the cores wait for one (oversubscription); those that have one share the
  // cache and memory bus with the others (corun_factor).
  const int compute_threads = in.ranks() * in.threads;
  const double over = oversubscription(in.ranks(), in.threads, r.cores);
  clock.stretch = over * corun_factor(r, compute_threads);

  // The busiest stage per micro-batch: its blocks, plus the embedding on the first and the
  // head on the last (both with one stage).
  const double layers = static_cast<double>(in.model.layers / in.pp);
  const PassTimes block = engine_block_seconds(in, c).scaled(layers);
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
    const double bytes = pp_bytes_per_microbatch(in.micro_batch, in.model.seq / in.cp,
                                                 in.model.hidden, e, in.tp, in.sequence_parallel);
    clock.send_s = engine_send_seconds(c, bytes, in.inter_node_pp) * in.chunks;
  }
  // The schedule the executor runs, replayed on each virtual stage's times (pipeline_
  // simulation.h): L / (P v) blocks with their TP collectives, the embedding on the first, the
  // head on the last; a rank is held by its sends (one message per chunk each way).
  const ScheduleKind kind = in.chunks > 1 ? ScheduleKind::interleaved : in.schedule;
  const auto schedule = cached_pipeline_replay(kind, in.pp, in.microbatches, in.chunks);
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
    return schedule->run(sim);
  };
  const PipelineSimulation pipeline = simulate(clock.stretch);
  const double own_sends_s = pipeline.ranks[static_cast<size_t>(pipeline.critical_rank)].sending_s;
  const double M = in.microbatches;

  // DP and ZeRO on the communication thread: gradient syncs behind backward (the last
  // micro-batch's at ZeRO 0-1, every one's at 2), ZeRO 1-2's gather of the updated weights
  // waited for before the next step, ZeRO-3's per-unit gathers and reduce-scatters run through
  // the executor's order (zero3_steps). With more threads than cores (each DP rank's
  // communication thread beside the compute threads) every collective waits for its partner.
  DpOverlap forward_overlap, backward_overlap;
  if (in.data_ranks() > 1) {
    const int ranks = in.ranks();
    // Beside compute the ranks' compute and communication threads want the cores; while the
    // compute threads wait for a collective, only the communication threads do.
    const PartnerWaits waits{partner_wait_seconds(r, compute_threads + ranks),
                             partner_wait_seconds(r, ranks)};
    auto dp_seconds = [&](CollectiveOp op, comm::Algorithm algo, double bytes) {
      return engine_dp_collective_seconds(in, c, op, algo, bytes);
    };
    const double interference = std::max(1.0, r.comm_interference);
    if (in.zero_stage == 3) {
      const DpOverlap z = zero3_overlap(in, c, last_busiest, clock.stretch, tp, dp_seconds, waits,
                                        interference, &clock.dp_comm_s, &forward_overlap);
      backward_overlap = z;
      clock.phases.exposed_dp_s = z.exposed_s;
    } else {
      const StateBytes bytes{in.precision == Precision::bf16 ? 2 : 4, 4, 8};
      double backward_comm = 0, backward_piece = 0, after_update = 0;
      // Under EP (ZeRO 0) each bucket's dense part is reduced over DP and its experts' part over
      // the expert-data-parallel group (dp / ep ranks: nothing when dp = ep), one after the other
      // on the communication thread.
      const int64_t expert_params = in.ep > 1 ? in.stage_expert_params : 0;
      EngineClockInput expert_group = in;
      expert_group.dp = in.dp / std::max(1, in.ep);
      expert_group.cp = 1;
      expert_group.dp_ranks_per_node = std::min(in.dp_ranks_per_node, expert_group.dp);
      std::vector<std::pair<CollectiveCall, bool>> calls;  // (call, on the expert group)
      for (const CollectiveCall& call :
           dp_collectives(in.stage_params - expert_params, in.zero_stage, bytes, in.microbatches,
                          std::max<int64_t>(1, in.dp_pieces), 1)) {
        calls.emplace_back(call, false);
      }
      if (expert_params > 0 && expert_group.dp > 1) {
        for (const CollectiveCall& call :
             dp_collectives(expert_params, in.zero_stage, bytes, in.microbatches,
                            std::max<int64_t>(1, in.dp_pieces), 1)) {
          calls.emplace_back(call, true);
        }
      }
      for (const auto& [call, experts] : calls) {
        const comm::Algorithm algo =
            call.op == CollectiveOp::all_reduce ? in.dp_algorithm : comm::Algorithm::ring;
        // Under bf16 the gradients and the gathered weights travel and reduce as bf16.
        const double idle =
            experts ? engine_dp_collective_seconds(expert_group, c, call.op, algo, call.bytes)
                    : dp_seconds(call.op, algo, call.bytes);
        const auto count = static_cast<double>(call.count);
        if (call.overlaps_forward) {
          // ZeRO 1-2: the engine gathers the updated weights at once, compute waiting.
          after_update += (idle + waits.alone_s) * count;
          clock.dp_comm_s += (idle + waits.alone_s) * count;
        } else {
          // Beside backward; the last piece (what shows) runs with compute done.
          backward_comm += (idle + waits.beside_compute_s) * (count - 1) + idle + waits.alone_s;
          clock.dp_comm_s += (idle + waits.beside_compute_s) * (count - 1) + idle + waits.alone_s;
          backward_piece = std::max(backward_piece, idle + waits.alone_s);
        }
      }
      const double backward_one = stage.backward_input_s + stage.backward_weight_s;
      backward_overlap =
          dp_overlap(backward_comm, backward_piece,
                     in.zero_stage >= 2 ? M * backward_one : backward_one, interference);
      clock.phases.exposed_dp_s = backward_overlap.exposed_s + after_update;
    }
  }

  // The optimizer on this rank's part: its ZeRO shard at stages 1-3, everything at 0; the
  // norm's sum of squares over the gradients it owns (the same part).
  const double owned =
      static_cast<double>(in.stage_params) / (in.zero_stage >= 1 ? in.data_ranks() : 1);

  // CP's and EP's share of forward and backward, for the reports: per block, the stage's blocks
  // (the routed ones for EP), every micro-batch; full recompute runs the forward's again.
  const double reruns = in.recompute == Recompute::full ? 2 : 1;
  if (in.cp > 1) {
    const CpAttention a = engine_cp_attention_seconds(in, c);
    const double per_step = M * layers * clock.stretch;
    clock.cp_s = per_step * (reruns * a.comm_forward_s + a.comm_backward_s);
    clock.cp_total_s = per_step * (a.comm_total_s + (reruns - 1) * a.comm_forward_s);
  }
  if (in.ep > 1 && in.model.moe.enabled()) {
    const MoeMlp moe = engine_moe_mlp_seconds(in, c);
    clock.ep_s = M * static_cast<double>(busiest_stage_moe_layers(in)) * clock.stretch *
                 (reruns * moe.comm_forward_s + moe.comm_backward_s);
  }
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
