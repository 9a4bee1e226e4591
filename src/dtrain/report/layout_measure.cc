// The layout report's measuring half: this rank's figures per step (memory, bytes on each axis,
// time) beside the plan/ formulas for the same layout, as one RankRow. Gathering the rows and
// presenting them live apart (layout_report.cc, layout_report_output.cc).
#include <algorithm>
#include <map>
#include <tuple>

#include "dtrain/comm/collectives.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"
#include "dtrain/cost/activation_memory.h"
#include "dtrain/cost/collective_cost.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/cost/context_parallel.h"
#include "dtrain/cost/head_activation_memory.h"
#include "dtrain/cost/link_traffic.h"
#include "dtrain/cost/memory_model.h"
#include "dtrain/cost/moe.h"
#include "dtrain/model/gpt_stage.h"
#include "dtrain/model/moe_dispatch.h"
#include "dtrain/model/param_table.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/parallel/pipeline_checker.h"
#include "dtrain/report/layout_report.h"

namespace dtrain::train {
namespace {

using parallel::Axis;

double bytes_moved(const std::vector<plan::CollectiveCall>& calls, int world) {
  return plan::traffic_of(calls, world).bytes_moved();
}

int64_t count_sends(const plan::PipelineSchedule& s, int rank) {
  int64_t sends = 0;
  for (const plan::Action& a : s.per_rank[static_cast<size_t>(rank)]) {
    sends += plan::is_send(a.kind) ? 1 : 0;
  }
  return sends;
}

bool split_backward(const plan::PipelineSchedule& s) {
  for (const std::vector<plan::Action>& list : s.per_rank) {
    for (const plan::Action& a : list) {
      if (a.kind == plan::ActionKind::backward_input) return true;
    }
  }
  return false;
}

plan::ActivationShape layer_shape(const EngineConfig& c) {
  plan::ActivationShape s;
  s.seq = c.step.seq / c.cp;  // a CP rank's tokens: every per-token tensor at T/cp
  s.micro_batch = c.micro_batch();
  s.hidden = c.step.model.channels;
  s.heads = c.step.model.heads;
  s.tp = c.tp;
  s.sequence_parallel = c.sequence_parallel && c.tp > 1;
  s.recompute = c.step.recompute;
  // The engine's variant: fp32, no dropout, the LayerNorm statistics kept; under mixed
  // precision the tensors only matrix products read bf16 (activations.h: PackedLayer).
  s.bytes_per_element = 4;
  s.dropout = false;
  s.count_layernorm_stats = true;
  if (c.step.precision == model::Precision::bf16) {
    s.bytes_per_element = 2;
    s.elementwise_bytes_per_element = 4;
  }
  return s;
}

// The engine's fp32 tensors of one block: the weight-gradient stash of a split backward, and
// the one-block scratch the workspace holds (the dropped tensors' of the recompute mode, or
// under mixed precision every tensor but the input: the packed ones' fp32 working copies).
plan::ActivationShape fp32_layer_shape(const EngineConfig& c) {
  plan::ActivationShape s = layer_shape(c);
  s.bytes_per_element = 4;
  s.elementwise_bytes_per_element = 0;
  return s;
}
// Under CP no score term is dropped (none is kept: blockwise attention), and full recompute's
// rerun holds the CP group's state of one layer on top (plan::cp_attention_state_bytes_per_layer).
double planned_block_scratch(const EngineConfig& c) {
  plan::ActivationShape s = fp32_layer_shape(c);
  if (c.step.precision == model::Precision::bf16) s.recompute = Recompute::full;
  double bytes = plan::recompute_scratch_bytes(s);
  if (c.cp == 1) return bytes;
  if (s.recompute != Recompute::none) {
    plan::ActivationShape none = s, selective = s;
    none.recompute = Recompute::none;
    selective.recompute = Recompute::selective;
    bytes -= plan::activation_bytes_per_layer(none) - plan::activation_bytes_per_layer(selective);
  }
  if (c.step.recompute == Recompute::full) {
    plan::ActivationShape whole = s;
    whole.seq = c.step.seq;
    bytes += plan::cp_attention_state_bytes_per_layer(whole, c.cp, c.cp_algorithm);
  }
  return bytes;
}

// One block of one micro-batch: plan::cp_activation_bytes_per_layer over the whole sequence (at
// cp = 1 activation_bytes_per_layer).
double planned_layer_bytes(const EngineConfig& c) {
  plan::ActivationShape whole = layer_shape(c);
  whole.seq = c.step.seq;
  return plan::cp_activation_bytes_per_layer(whole, c.cp, c.cp_algorithm);
}

// One micro-batch of every chunk of `rank`'s stage, by the plan/ formulas: its blocks, the
// head's tensors on the last virtual stage or the output it sends on, the token ids on the
// first, and a split backward's weight-gradient stash.
double planned_microbatch_bytes(const EngineConfig& c, int pp_rank, bool split) {
  const parallel::StagePartition& p = c.partition;
  const plan::ActivationShape shape = layer_shape(c);
  const int64_t b = c.micro_batch(), T = c.step.seq / c.cp, C = c.step.model.channels;
  const int64_t vocab =
      c.tp > 1 ? model::tp_vocab_local(c.step.model.vocab, c.tp) : c.step.model.vocab;
  double sum = 0;
  for (int chunk = 0; chunk < p.chunks(); ++chunk) {
    const int vs = p.virtual_stage(pp_rank, chunk);
    const double blocks = p.layer_count(pp_rank, chunk);
    sum += blocks * planned_layer_bytes(c);
    if (split) sum += blocks * plan::weight_grad_stash_bytes_per_layer(fp32_layer_shape(c));
    if (vs == p.virtual_stages() - 1) {
      sum += plan::head_activation_bytes({.seq = T, .micro_batch = b, .hidden = C, .vocab = vocab});
    } else {
      sum += plan::pp_bytes_per_microbatch(b, T, C, 4, c.tp, shape.sequence_parallel);
      if (vs == 0) sum += 4.0 * static_cast<double>(b * T);
    }
  }
  return sum;
}

// In-flight micro-batches x one micro-batch's activations, + the workspace the rank's
// backward shares and recompute's one-layer scratch.
double planned_activations_peak(const EngineConfig& c, double inflight, double microbatch) {
  const int64_t vocab =
      c.tp > 1 ? model::tp_vocab_local(c.step.model.vocab, c.tp) : c.step.model.vocab;
  const plan::HeadActivationShape ws{.seq = c.step.seq / c.cp,
                                     .micro_batch = c.micro_batch(),
                                     .hidden = c.step.model.channels,
                                     .vocab = vocab,
                                     // The MLP gradients are this rank's columns: 4C / tp.
                                     .ffn_hidden = 4 * c.step.model.channels / c.tp,
                                     .bytes_per_element = 4,
                                     .threads = c.step.threads,
                                     .tp = c.tp,
                                     .blockwise_attention = c.cp > 1};
  return inflight * microbatch + plan::workspace_activation_bytes(ws) + planned_block_scratch(c);
}

// What a rank keeps per parameter: mixed precision's 2 + 2 + 12 under --precision bf16 (the
// DataParallel hooks keep bf16 weights and gradients, the fp32 master beside the moments), fp32
// Adam's 4 + 4 + 8 otherwise.
plan::StateBytes engine_state_bytes(const EngineConfig& c) {
  return c.step.precision == model::Precision::bf16 ? plan::kMixedPrecisionAdam : plan::kFp32Adam;
}

// The element sizes on the DP wire: the gradient syncs' (--grad-reduce), the parameter gathers'
// (the weights at rest).
int64_t dp_grad_wire_bytes(const EngineConfig& c) {
  return c.bf16_grad_reduce ? int64_t{sizeof(bf16)} : int64_t{sizeof(float)};
}
int64_t dp_param_wire_bytes(const EngineConfig& c) {
  return engine_state_bytes(c).param;
}
// The element size of the activations and their gradients on the TP block collectives and the
// pipeline's sends: bf16 under mixed precision (the vocabulary reductions stay fp32).
int64_t activation_wire_bytes(const EngineConfig& c) {
  return c.step.precision == model::Precision::bf16 ? int64_t{sizeof(bf16)}
                                                    : int64_t{sizeof(float)};
}

// ZeRO-2's gradient buffers, in elements (parallel::DataParallel::begin_backward binds each
// bucket's fp32 gradient at full size from its first unit's backward until its reduce-scatter,
// every micro-batch, in both precisions): the buckets are plan::gradient_buckets of the stage's
// units in backward order, the embeddings last on one stage (under a pipeline a bucket of their
// own, synced at the step's end). The embeddings' bucket is bound at the head's backward (the
// tied wte) and held through the embedding's, so on a stage with the head it sits beside the
// largest other bucket; on a first stage without the head it is bound at the embedding's
// backward, right after the last block's bucket was handed to the reduce-scatter, which has
// not finished by then, and with more micro-batches it is held through their buckets: beside
// the largest other one too.
int64_t zero2_bucket_grads(const StageParamCounts& stage, const EngineConfig& c) {
  const bool deferred = c.pp > 1;
  const int64_t emb = stage.embeddings;
  std::vector<int64_t> order = stage.units;
  if (emb > 0 && !deferred) order.push_back(emb);
  const std::vector<plan::UnitRun> buckets = plan::gradient_buckets(order, c.bucket_bytes);
  const int emb_bucket = emb > 0 && !deferred ? static_cast<int>(buckets.size()) - 1 : -1;
  const int64_t held = emb_bucket >= 0 ? buckets.back().count : deferred ? emb : 0;
  int64_t other = 0;
  for (int b = 0; b < static_cast<int>(buckets.size()); ++b) {
    if (b != emb_bucket) other = std::max(other, buckets[static_cast<size_t>(b)].count);
  }
  return held + other;
}

// The working set above the shards, summed as the rank's memory tracker sums it (the peak of
// the params tag plus the peak of the grads tag): the unit weights the stage's chunks hold at
// once, by plan::unit_weights_peak_bytes (ZeRO-3 gathers fp32 weights, or bf16 under mixed
// precision; mixed precision computes on fp32 working copies at every stage), beside
// plan::zero3_gathered_bytes' gradients: the embeddings' (held through the whole backward) and
// the largest other unit's, fp32 in both precisions.
// At ZeRO-2 the gradients above the shard are whole buckets instead (zero2_bucket_grads).
// Not counted: a unit's gradient still being reduce-scattered by the communication thread when
// the next unit's backward begins (overlap; the report names it, in_flight_grad_bytes), and at
// ZeRO-2 a bucket still reducing when the next one binds.
int64_t planned_working_set(const StageParamCounts& stage, const EngineConfig& c, int pp_rank) {
  const std::vector<int64_t>& units = stage.units;  // in the order backward runs them
  const int64_t largest = units.empty() ? 0 : *std::max_element(units.begin(), units.end());
  const int64_t emb = stage.embeddings;
  const bool mixed = c.step.precision == model::Precision::bf16;
  const int64_t zero2 = c.zero_stage == 2 ? 4 * zero2_bucket_grads(stage, c) : 0;
  if (!mixed && c.zero_stage < 3) return zero2;
  const plan::UnitWeightBytes weights{.gathered = c.zero_stage < 3 ? 0 : (mixed ? 2 : 4),
                                      .working = mixed ? 4 : 0};
  const parallel::StagePartition& p = c.partition;
  int64_t params = 0;
  for (int chunk = 0; chunk < p.chunks(); ++chunk) {
    const int vs = p.virtual_stage(pp_rank, chunk);
    plan::ChunkUnitCounts counts{
        .embedding = vs == 0, .head = vs == p.virtual_stages() - 1, .embeddings = emb};
    // Every block of a GPT has the same tensors: the chunk holds layer_count copies of one.
    counts.blocks.assign(static_cast<size_t>(p.layer_count(pp_rank, chunk)), stage.block);
    if (counts.head) counts.final_norm = stage.final_norm;
    params = std::max(params, plan::unit_weights_peak_bytes(counts, weights));
  }
  if (c.zero_stage == 2) return params + zero2;
  const plan::StateBytes gradient{.param = 0, .grad = 4, .optimizer = 0};
  return params + plan::zero3_gathered_bytes(emb, gradient, 0) +
         plan::zero3_gathered_bytes(largest, gradient, 0);
}

// The part of a ZeRO-3 rank's measured working set above the plan that is one unit's gradient
// held by the communication thread, still reduce-scattering it when the next unit's backward
// bound a fresh buffer: 0 when none is, else that unit's bytes and name. Whether the overlap
// happens depends on timing, so the plan does not count it; the report names it instead.
// `grads_above_plan` is the grads tag's own excess, so a difference in the weights held is never
// mistaken for a gradient of the same size.
std::pair<int64_t, std::string> in_flight_gradient(const parallel::StageUnits& units,
                                                   int64_t above_plan, int64_t grads_above_plan) {
  if (above_plan <= 0 || grads_above_plan != above_plan) return {0, ""};
  for (int i = 0; i < units.size(); ++i) {
    if (i != units.embeddings() && 4 * units[i].count == above_plan) {
      return {above_plan, units[i].name};
    }
  }
  return {0, ""};
}

}  // namespace

// This rank's measured figures per step and the plan/ formulas beside them.
RankRow measure_rank(const Engine& e) {
  const EngineConfig& c = e.config();
  const parallel::MeshCoord me = e.coord();
  const model::GptModel& model = e.model();
  const parallel::PipelineExecutor& ex = e.executor();
  const MemoryTracker& mem = e.memory();
  RankRow r;
  r.rank = e.global_rank();
  r.coords = c.cp > 1 ? str("dp", me.dp, " cp", me.cp, " tp", me.tp, " pp", me.pp)
                      : str("dp", me.dp, " tp", me.tp, " pp", me.pp);
  r.node = c.topology.node_of(r.rank);
  r.layers = parallel::layer_ranges(c.partition, me.pp);
  r.param_count = model.param_count();
  r.phases = median_phases(e.phases());
  // Under EP the rank's experts are sharded over the expert-DP group, the rest over DP x CP.
  int64_t expert_params = 0;
  for (const model::ParamTensor& t : model.param_table().tensors()) {
    if (c.ep > 1 && model::is_expert_tensor(t.name)) expert_params += t.count;
  }
  const plan::ModelStateBytes formula =
      plan::ep_model_state_bytes(r.param_count - expert_params, expert_params, c.dp * c.cp, c.ep,
                                 c.zero_stage, engine_state_bytes(c));
  for (const auto& [tag, bytes] :
       {std::pair{MemoryTag::params, formula.params}, std::pair{MemoryTag::grads, formula.grads},
        std::pair{MemoryTag::optimizer, formula.optimizer}}) {
    r.state.push_back({tag, mem.current_bytes(tag), mem.peak_bytes(tag), bytes});
  }

  // Activations.
  const plan::PipelineSchedule& schedule = ex.schedule();
  const bool split = split_backward(schedule);
  r.activations_peak_bytes = mem.peak_bytes(MemoryTag::activations);
  r.microbatch_activation_bytes = ex.microbatch_activation_bytes();
  r.planned_microbatch_activation_bytes = planned_microbatch_bytes(c, me.pp, split);
  r.peak_inflight_bytes = e.last_step().peak_inflight_bytes;
  r.measured_inflight = static_cast<double>(r.peak_inflight_bytes) /
                        static_cast<double>(std::max<int64_t>(1, r.microbatch_activation_bytes));
  const parallel::ScheduleReport sim = parallel::simulate_schedule(schedule);
  const parallel::RankReport& rr = sim.ranks[static_cast<size_t>(me.pp)];
  r.checker_inflight = split ? rr.peak_weight_stash : rr.peak_inflight;
  r.planned_activations_peak_bytes =
      planned_activations_peak(c, r.checker_inflight, r.planned_microbatch_activation_bytes);

  // ZeRO-3's working set: the gathered units above the shards.
  const parallel::StageUnits& units = ex.units();
  if (c.zero_stage == 3) {
    r.gathered_peak_bytes = mem.peak_bytes(MemoryTag::params) - formula.params +
                            mem.peak_bytes(MemoryTag::grads) - formula.grads;
    r.gathered_formula_bytes =
        planned_working_set(stage_param_counts(units, r.param_count, expert_params), c, me.pp);
    // The plan's gradient part: the embeddings' and the largest unit's, fp32 in both precisions.
    int64_t emb = 0, largest = 0;
    for (int i = 0; i < units.size(); ++i) {
      (i == units.embeddings() ? emb : largest) =
          std::max(i == units.embeddings() ? emb : largest, units[i].count);
    }
    const int64_t grads_above = mem.peak_bytes(MemoryTag::grads) - formula.grads;
    std::tie(r.in_flight_grad_bytes, r.in_flight_grad_unit) = in_flight_gradient(
        units, r.gathered_peak_bytes - r.gathered_formula_bytes, grads_above - 4 * (emb + largest));
  }

  // Traffic per step, measured.
  const double n = e.steps() > 0 ? static_cast<double>(e.steps()) : 1.0;
  const EngineTraffic& t = e.traffic();
  r.tp_block = t.tp_block / n;
  r.tp_vocab = t.tp_vocab / n;
  r.tp_regather = t.tp_regather / n;
  r.tp_norms = t.tp_norms / n;
  r.tp_recompute = t.tp_recompute / n;
  r.pp = t.pp / n;
  r.dp = t.dp / n;
  r.embedding = t.embedding / n;
  r.ep = static_cast<double>(t.ep.total().bytes_moved()) / n;
  // The forward's exchanges (counts, dispatch, combine) run once, or twice under full
  // recompute; the backward's two (the combine's gradient, the dispatch's) once.
  const double forward = plan::ep_forward_exchanges(c.step.recompute);
  r.ep_formula = (forward * (t.ep_plan_counts + t.ep_plan_dispatch_forward + t.ep_plan_combine) +
                  t.ep_plan_dispatch + t.ep_plan_combine) /
                 n;
  r.other = t.other / n;
  r.intra_node_bytes = static_cast<double>(t.links.intra_node) / n;
  r.inter_node_bytes = static_cast<double>(t.links.inter_node) / n;
  r.model_intra_node_bytes = static_cast<double>(t.model_links.intra_node) / n;
  r.model_inter_node_bytes = static_cast<double>(t.model_links.inter_node) / n;
  r.dp_comm_ms = e.dp_comm_us() * 1e-3 / n;
  r.dp_hidden_ms = e.dp_hidden_us() * 1e-3 / n;
  r.dp_overlap_share = e.dp_comm_us() > 0 ? e.dp_hidden_us() / e.dp_comm_us() : 0.0;
  for (const parallel::MeasuredAction& m : e.last_step().actions) {
    if (plan::is_compute(m.action.kind)) r.busy_ms += (m.end_us - m.start_us) * 1e-3;
  }

  // The formulas for the same.
  const model::GptConfig& g = c.step.model;
  const int64_t b = c.micro_batch(), T = c.step.seq / c.cp;
  const auto M = static_cast<double>(c.microbatches);
  const bool sp = c.sequence_parallel && c.tp > 1;
  const auto blocks = static_cast<double>(model.stage().layer_count());
  const int64_t act = activation_wire_bytes(c);
  const double per_layer =
      plan::tp_traffic_per_layer(b, T, g.channels, act, c.tp, sp, Recompute::none).bytes_moved();
  // Routed blocks' collectives depend on the rows their experts computed (measured per call).
  double routed_blocks = 0;
  for (int64_t l = 0; l < g.layers; ++l) {
    if (model.stage().has_layer(l) && model::is_moe_layer(g.moe, l)) ++routed_blocks;
  }
  r.tp_block_formula = per_layer * (blocks - routed_blocks) * M;
  if (c.tp > 1) {
    double routed = 0;  // over the steps, as the counters; per step below
    for (const auto& [rows, calls] : t.moe_expert_rows) {
      routed +=
          static_cast<double>(calls) *
          bytes_moved(plan::moe_tp_collectives_per_layer(b, T, g.channels, act, sp, rows), c.tp);
    }
    r.tp_block_formula += routed / n;
  }
  if (c.step.recompute == Recompute::full) {
    // Each rerun of a block's forward repeats its forward f and g: once before a fused
    // backward, and again before W under a split one. A routed block's rerun routes the rows its
    // forward routed, so its experts' g is priced with the forward's measured rows.
    const double reruns = split ? 2 : 1;
    const double full =
        plan::tp_traffic_per_layer(b, T, g.channels, act, c.tp, sp, Recompute::full).bytes_moved();
    r.tp_recompute_formula = (full - per_layer) * (blocks - routed_blocks) * M * reruns;
    if (c.tp > 1) {
      double routed = 0;  // over the steps, as the counters; per step below
      for (const auto& [rows, calls] : t.moe_expert_rows) {
        routed += static_cast<double>(calls) * bytes_moved(plan::moe_tp_rerun_collectives_per_layer(
                                                               b, T, g.channels, act, sp, rows),
                                                           c.tp);
      }
      r.tp_recompute_formula += reruns * routed / n;
    }
  }
  if (sp) {
    r.tp_regather_formula =
        bytes_moved(plan::sp_regather_collectives(b, T, g.channels, act), c.tp) * blocks * M;
  }
  if (sp) {
    // The LayerNorm gradients' sum over TP after the DP sync: each LN tensor's elements this
    // rank holds (all of them at ZeRO 0, its shard's at 1-3), one exact ring all-reduce each.
    // Under EP with ZeRO each run of the rank's two shards is summed on its own.
    for (const comm::Chunk& held : e.data_parallel().owned_runs()) {
      for (const model::ParamTensor& x : model.param_table().tensors()) {
        const bool layernorm = x.name.find("ln1.") != std::string::npos ||
                               x.name.find("ln2.") != std::string::npos ||
                               x.name.starts_with("lnf.");
        const int64_t lo = std::max(held.offset, x.offset);
        const int64_t hi = std::min(held.offset + held.count, x.offset + x.count);
        if (!layernorm || lo >= hi) continue;
        r.tp_norms_formula += static_cast<double>(
            plan::flat_ring_all_reduce_link_traffic(hi - lo, sizeof(float), c.tp, 1, me.tp)
                .total_bytes());
      }
    }
  }
  r.tp_vocab_formula =
      bytes_moved(plan::tp_vocab_collectives(b, T, g.channels, 4, model.stage().embedding,
                                             model.stage().head),
                  c.tp) *
      M;
  r.pp_formula = static_cast<double>(plan::pp_sends_per_microbatch(c.pp, schedule.chunks, me.pp)) *
                 M * plan::pp_bytes_per_microbatch(b, T, g.channels, act, c.tp, sp);
  plan::StageDataParallel stage;
  stage.params = r.param_count;
  stage.zero_stage = c.zero_stage;
  stage.microbatches = c.microbatches;
  const int emb = units.embeddings();
  if (c.pp > 1 && emb >= 0) stage.deferred = units[emb].count;
  // ZeRO-3: the embedding's backward reads no weights; the head's does (the tied wte).
  if (emb >= 0 && model.stage().embedding && !model.stage().head) {
    stage.backward_gathered = r.param_count - units[emb].count;
  }
  if (split && c.step.recompute == Recompute::full) {
    for (const parallel::GradUnit& u : units.units()) {
      if (u.name.starts_with("h.")) stage.rerun_gathered += u.count;
    }
  }
  // Exactly, rank by rank: the engine's buckets (the deferred tied wte last) and ZeRO-3's
  // gathers over the shard pieces (the same units as `stage` above).
  plan::StageDataParallelRank exact;
  exact.params = r.param_count;
  // Gradients are averaged (and ZeRO shards) over the DP x CP group.
  const std::vector<int> data_group = e.mesh().group_of(Axis::dp, Axis::cp, e.global_rank());
  exact.ranks = c.dp * c.cp;
  exact.rank = static_cast<int>(std::find(data_group.begin(), data_group.end(), e.global_rank()) -
                                data_group.begin());
  exact.zero_stage = c.zero_stage;
  exact.microbatches = c.microbatches;
  for (const parallel::Bucket& bk : e.data_parallel().buckets()) {
    exact.buckets.push_back({bk.offset, bk.count});
  }
  if (stage.deferred > 0 && !exact.buckets.empty()) {
    exact.deferred_bucket = static_cast<int>(exact.buckets.size()) - 1;
  }
  if (c.zero_stage == 3) {
    for (int u = 0; u < units.size(); ++u) {
      const comm::Chunk range{units[u].offset, units[u].count};
      exact.forward_gathers.push_back(range);
      const bool embedding_only = u == emb && model.stage().embedding && !model.stage().head;
      if (!embedding_only) exact.backward_gathers.push_back(range);
      if (split && c.step.recompute == Recompute::full && units[u].name.starts_with("h.")) {
        exact.rerun_gathers.push_back(range);
      }
    }
  }
  const comm::Algorithm dp_algo = e.data_parallel().algorithm();
  r.dp_formula = static_cast<double>(
      plan::stage_dp_bytes_moved(exact, dp_grad_wire_bytes(c), dp_param_wire_bytes(c), dp_algo,
                                 e.data_parallel().direct_slot_bytes()));
  if (c.ep > 1) {
    // EP: each bucket's dense pieces all-reduced (ZeRO 0) or reduce-scattered (1-3) over DP,
    // its expert pieces over the expert-DP group (ring), each piece one collective; with ZeRO
    // each kind is sharded in its own packed index space, and the parameter gathers (after the
    // update at 1-2, per unit at 3) move each run of the flat buffer over its own group.
    std::vector<comm::Chunk> expert_ranges;
    for (const model::ParamTensor& tensor : model.param_table().tensors()) {
      if (model::is_expert_tensor(tensor.name)) {
        expert_ranges.push_back({tensor.offset, tensor.count});
      }
    }
    plan::StageDataParallelRank dense = exact, experts = exact;
    dense.buckets.clear();
    experts.buckets.clear();
    dense.deferred_bucket = experts.deferred_bucket = -1;
    experts.ranks = c.dp / c.ep;
    experts.rank = me.dp / c.ep;
    dense.forward_gathers.clear();
    dense.backward_gathers.clear();
    dense.rerun_gathers.clear();
    experts.forward_gathers.clear();
    experts.backward_gathers.clear();
    experts.rerun_gathers.clear();
    const bool packed = c.zero_stage > 0;
    if (packed) {
      experts.params = expert_params;
      dense.params = r.param_count - expert_params;
    }
    // A piece in its kind's index space: flat at ZeRO 0 (no shards), packed with ZeRO.
    auto add = [&](auto member, const comm::Chunk& range) {
      for (const parallel::BucketPiece& p : parallel::split_at_experts(range, expert_ranges)) {
        ((p.expert ? experts : dense).*member).push_back({packed ? p.packed : p.offset, p.count});
      }
    };
    using Rank = plan::StageDataParallelRank;
    for (const comm::Chunk& bucket : exact.buckets) add(&Rank::buckets, bucket);
    for (const comm::Chunk& u : exact.forward_gathers) add(&Rank::forward_gathers, u);
    for (const comm::Chunk& u : exact.backward_gathers) add(&Rank::backward_gathers, u);
    for (const comm::Chunk& u : exact.rerun_gathers) add(&Rank::rerun_gathers, u);
    if (c.zero_stage == 1 || c.zero_stage == 2) {
      add(&Rank::update_gathers, comm::Chunk{0, r.param_count});
    }
    // The deferred tied wte (dense, one piece) is the last bucket of both lists.
    if (exact.deferred_bucket >= 0) {
      dense.deferred_bucket = static_cast<int>(dense.buckets.size()) - 1;
    }
    r.dp_formula = static_cast<double>(
        plan::stage_dp_bytes_moved(dense, dp_grad_wire_bytes(c), dp_param_wire_bytes(c), dp_algo,
                                   e.data_parallel().direct_slot_bytes()) +
        plan::stage_dp_bytes_moved(experts, dp_grad_wire_bytes(c), dp_param_wire_bytes(c),
                                   comm::Algorithm::ring));
  }
  if (e.has_embedding_group()) {
    const model::ParamTable& table = model.param_table();
    const double wte_bytes =
        static_cast<double>(table[static_cast<size_t>(table.index_of("wte"))].count) *
        sizeof(float);
    r.embedding_formula = plan::collective_traffic(comm::CollectiveOp::all_reduce,
                                                   parallel::kTiedEmbeddingAlgorithm, wte_bytes, 2)
                              .bytes_moved();
  }

  // Where the formula bytes go: a ring sends everything to the rank's successor in its group,
  // a pipeline its activations to the next stage and its gradients to the previous one.
  const parallel::DeviceMesh& mesh = e.mesh();
  const int global = r.rank;
  auto to = [&](int peer, double bytes) {
    if (bytes <= 0 || peer == global) return;
    (c.topology.link(global, peer) == comm::LinkClass::intra_node ? r.predicted_intra_node_bytes
                                                                  : r.predicted_inter_node_bytes) +=
        bytes;
  };
  auto successor = [&](Axis axis) {
    if (axis == Axis::dp && c.cp > 1) {  // the DP x CP group's ring
      const std::vector<int> group = mesh.group_of(Axis::dp, Axis::cp, global);
      const auto at = std::find(group.begin(), group.end(), global) - group.begin();
      return group[static_cast<size_t>((at + 1) % static_cast<int64_t>(group.size()))];
    }
    const std::vector<int> group = mesh.group_of(axis, global);
    return group[static_cast<size_t>((me[axis] + 1) % static_cast<int>(group.size()))];
  };
  to(successor(Axis::tp), r.tp_block_formula + r.tp_vocab_formula + r.tp_regather_formula +
                              r.tp_recompute_formula + r.tp_norms_formula);
  const std::vector<int> dp_group = mesh.group_of(Axis::dp, global);
  const int dp_nodes = static_cast<int>(c.topology.nodes_of(dp_group).size());
  // The two-level all-reduce of each bucket exactly as cost/link_traffic.h counts it (the DP
  // group's members fill its nodes in dp order, the same number on each); a ring sends all of
  // its bytes to the rank's successor.
  if (c.hierarchical && static_cast<int>(dp_group.size()) % dp_nodes == 0) {
    const int per_node = static_cast<int>(dp_group.size()) / dp_nodes;
    for (const parallel::Bucket& bk : e.data_parallel().buckets()) {
      const plan::LinkTraffic lt = plan::hierarchical_all_reduce_link_traffic(
          bk.count, sizeof(float), per_node, dp_nodes, me.dp);
      r.predicted_intra_node_bytes += static_cast<double>(lt.intra_node_bytes);
      r.predicted_inter_node_bytes += static_cast<double>(lt.inter_node_bytes);
    }
  } else {
    to(successor(Axis::dp), r.dp_formula);
  }
  if (e.has_embedding_group()) {
    parallel::MeshCoord other = me;
    other.pp = me.pp == 0 ? c.pp - 1 : 0;
    to(mesh.rank_of(other), r.embedding_formula);
  }
  const double message = plan::pp_bytes_per_microbatch(b, T, g.channels, 4, c.tp, sp);
  for (const plan::Action& a : schedule.per_rank[static_cast<size_t>(me.pp)]) {
    if (!plan::is_send(a.kind)) continue;
    parallel::MeshCoord peer = me;
    peer.pp = a.kind == plan::ActionKind::send_activation ? (me.pp + 1) % c.pp
                                                          : (me.pp + c.pp - 1) % c.pp;
    to(mesh.rank_of(peer), message);
  }

  if (c.cluster) {
    // The link a group's collectives run on: the inter-node one when the group spans nodes, its
    // uplink shared by the flows that leave the node together (every group of the axis runs its
    // collective at once; a member whose ring successor sits on another node is one flow).
    const int my_node = c.topology.node_of(global);
    auto flows_out = [&](Axis axis) {
      int flows = 0;
      for (const std::vector<int>& group : mesh.groups(axis)) {
        for (size_t i = 0; i < group.size(); ++i) {
          const int next = group[(i + 1) % group.size()];
          flows += c.topology.node_of(group[i]) == my_node && c.topology.node_of(next) != my_node
                       ? 1
                       : 0;
        }
      }
      return flows;
    };
    plan::Link shared;
    auto link_of = [&](const std::vector<int>& group, Axis axis) -> const plan::Link& {
      if (c.topology.nodes_of(group).size() <= 1) return c.cluster->intra_node;
      shared = c.cluster->inter_node;
      shared.bandwidth_bytes_per_s = plan::shared_uplink_bandwidth(
          shared.bandwidth_bytes_per_s, c.topology.ranks_per_node(), flows_out(axis));
      return shared;
    };
    double seconds = 0;
    auto price = [&](const std::vector<plan::CollectiveCall>& calls, Axis axis, double times,
                     comm::Algorithm algo = comm::Algorithm::ring) {
      const std::vector<int> group = mesh.group_of(axis, global);
      for (const plan::CollectiveCall& call : calls) {
        seconds += times * plan::collective_cost(call, algo, static_cast<int>(group.size()),
                                                 link_of(group, axis))
                               .time_s;
      }
    };
    price(plan::tp_collectives_per_layer(b, T, g.channels, activation_wire_bytes(c), sp,
                                         c.step.recompute),
          Axis::tp, M * blocks);
    price(plan::tp_vocab_collectives(b, T, g.channels, 4, model.stage().embedding,
                                     model.stage().head),
          Axis::tp, M);
    const plan::StateBytes wire{
        .param = dp_param_wire_bytes(c), .grad = dp_grad_wire_bytes(c), .optimizer = 0};
    if (c.dp * c.cp > 1) price(plan::stage_dp_collectives(stage, wire), Axis::dp, 1, dp_algo);
    if (e.has_embedding_group()) {
      parallel::MeshCoord other = me;
      other.pp = me.pp == 0 ? c.pp - 1 : 0;
      std::vector<int> pair = {global, mesh.rank_of(other)};
      std::sort(pair.begin(), pair.end());
      seconds +=
          plan::collective_cost(comm::CollectiveOp::all_reduce, parallel::kTiedEmbeddingAlgorithm,
                                r.embedding_formula, 2, link_of(pair, Axis::pp))
              .time_s;
    }
    if (c.pp > 1) {
      const plan::Link& link = link_of(mesh.group_of(Axis::pp, global), Axis::pp);
      seconds += static_cast<double>(count_sends(schedule, me.pp)) *
                 (link.latency_us * 1e-6 + message / link.bandwidth_bytes_per_s);
    }
    r.predicted_comm_ms = seconds * 1e3;
  }
  return r;
}

StageParamCounts stage_param_counts(const parallel::StageUnits& units, int64_t total,
                                    int64_t experts) {
  StageParamCounts counts;
  counts.params = total;
  counts.experts = experts;
  for (int i = 0; i < units.size(); ++i) {
    if (i == units.embeddings()) {
      counts.embeddings = units[i].count;
    } else {
      counts.units.push_back(units[i].count);
      if (i == units.final_norm()) {
        counts.final_norm = units[i].count;
      } else {
        counts.block = std::max(counts.block, units[i].count);  // dense and routed differ
      }
    }
  }
  return counts;
}

StageParamCounts stage_param_counts(const EngineConfig& c, int stage) {
  // A block is dense or routed (model::is_moe_layer): a one-block model of each kind's TP- and
  // EP-local table (the rank holds E / ep experts of a routed block, router included) gives its
  // count. Dense blocks are the dense model's; routed ones every = 1's.
  const auto one_block = [&](bool routed) {
    model::GptConfig one = c.step.model;
    one.layers = 1;
    if (routed) {
      one.moe.every = 1;
    } else {
      one.moe = {};
    }
    return one;
  };
  const auto local_table = [&](const model::GptConfig& one) {
    return model::ep_local_table(model::tp_local_table(model::gpt_param_table(one), one, c.tp),
                                 one.moe, c.ep);
  };
  const auto block_count = [&](const model::GptConfig& one, const model::ParamTable& t) {
    int64_t n = 0;
    const int first = model::gpt_layer_param(one, 0, model::LayerParam{});
    for (int k = 0; k < model::gpt_layer_param_count(one, 0); ++k) {
      n += t[static_cast<size_t>(first + k)].count;
    }
    return n;
  };
  const model::GptConfig dense = one_block(false);
  const model::ParamTable t = local_table(dense);
  const auto count = [&](int index) { return t[static_cast<size_t>(index)].count; };
  const int64_t dense_block = block_count(dense, t);
  int64_t routed_block = dense_block, routed_experts = 0;
  if (c.step.model.moe.enabled()) {
    const model::GptConfig routed = one_block(true);
    const model::ParamTable rt = local_table(routed);
    routed_block = block_count(routed, rt);
    for (const model::ParamTensor& tensor : rt.tensors()) {
      if (c.ep > 1 && model::is_expert_tensor(tensor.name)) routed_experts += tensor.count;
    }
  }
  const int64_t final_norm =
      count(model::gpt_lnf_w_index(dense)) + count(model::gpt_lnf_b_index(dense));

  // The units as parallel::StageUnits lists them: the final LayerNorm with the head, the
  // blocks from the last to the first, then the embeddings (wte and wpe, or the tied wte alone
  // on a head-only stage). Work per distinct layer range, not per tensor of a table.
  const model::GptStage gs = parallel::stage_of(c.partition, stage);
  StageParamCounts counts;
  if (gs.head) counts.units.push_back(final_norm);
  if (gs.head) counts.final_norm = final_norm;
  int64_t layers = 0;
  for (const model::LayerRange& r : gs.chunks) layers = std::max(layers, r.end());
  for (int64_t l = layers - 1; l >= 0; --l) {
    if (!gs.has_layer(l)) continue;
    const bool routed = model::is_moe_layer(c.step.model.moe, l);
    const int64_t block = routed ? routed_block : dense_block;
    if (routed) counts.experts += routed_experts;
    counts.units.push_back(block);
    counts.block = std::max(counts.block, block);  // the largest: ZeRO-3's gather buffer
  }
  if (gs.embedding || gs.head) {
    counts.embeddings = count(model::kWteIndex) + (gs.embedding ? count(model::kWpeIndex) : 0);
  }
  counts.params = counts.embeddings;
  for (const int64_t n : counts.units) counts.params += n;
  return counts;
}

double planned_rank_peak_bytes(const EngineConfig& c, int stage) {
  return planned_rank_peak_bytes(c, stage, stage_param_counts(c, stage));
}

double planned_rank_peak_bytes(const EngineConfig& c, int stage, const StageParamCounts& counts) {
  // Under EP the experts are sharded over the expert-DP group, the rest over DP x CP.
  const plan::ModelStateBytes states =
      plan::ep_model_state_bytes(counts.params - counts.experts, counts.experts, c.dp * c.cp, c.ep,
                                 c.zero_stage, engine_state_bytes(c));
  const plan::PipelineSchedule schedule =
      plan::make_schedule(c.schedule, c.pp, c.microbatches, c.partition.chunks());
  const bool split = split_backward(schedule);
  const parallel::RankReport rr =
      parallel::simulate_schedule(schedule).ranks[static_cast<size_t>(stage)];
  double peak = static_cast<double>(states.total()) +
                planned_activations_peak(c, split ? rr.peak_weight_stash : rr.peak_inflight,
                                         planned_microbatch_bytes(c, stage, split));
  peak += static_cast<double>(planned_working_set(counts, c, stage));
  return peak;
}

}  // namespace dtrain::train
