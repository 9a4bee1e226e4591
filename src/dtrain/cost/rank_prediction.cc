// predict_rank: an engine rank's memory and traffic per step by this room's closed forms (the
// layout report's "plan" column, the memory check before a run). Each term names the engine's
// code it mirrors in a comment, so a change there shows here.
#include "dtrain/cost/rank_prediction.h"

#include <algorithm>

#include "dtrain/cost/activation_memory.h"
#include "dtrain/cost/collective_cost.h"
#include "dtrain/cost/head_activation_memory.h"
#include "dtrain/cost/link_traffic.h"
#include "dtrain/cost/moe.h"

namespace dtrain::plan {
namespace {

double bytes_moved(const std::vector<CollectiveCall>& calls, int world) {
  return traffic_of(calls, world).bytes_moved();
}

ActivationShape layer_shape(const EngineRank& r) {
  ActivationShape s;
  s.seq = r.seq / r.cp;  // a CP rank's tokens: every per-token tensor at T/cp
  s.micro_batch = r.micro_batch;
  s.hidden = r.hidden;
  s.heads = r.heads;
  s.ffn_hidden = r.ffn;
  s.kv_heads = r.llama ? r.kv_heads : 0;
  s.gated_mlp = r.llama;
  s.rms_norm = r.llama;
  s.tp = r.tp;
  s.sequence_parallel = r.sequence_parallel;
  s.recompute = r.recompute;
  // The engine's variant: fp32, no dropout, the LayerNorm statistics kept; under mixed
  // precision the tensors only matrix products read bf16 (model/activations.h: PackedLayer).
  s.bytes_per_element = 4;
  s.dropout = false;
  s.count_layernorm_stats = true;
  if (r.mixed_precision) {
    s.bytes_per_element = 2;
    s.elementwise_bytes_per_element = 4;
  }
  return s;
}

// The engine's fp32 tensors of one block: the weight-gradient stash of a split backward, and
// the one-block scratch the workspace holds (the dropped tensors' of the recompute mode, or
// under mixed precision every tensor but the input: the packed ones' fp32 working copies).
ActivationShape fp32_layer_shape(const EngineRank& r) {
  ActivationShape s = layer_shape(r);
  s.bytes_per_element = 4;
  s.elementwise_bytes_per_element = 0;
  return s;
}

// Under CP no score term is dropped (none is kept: blockwise attention), and full recompute's
// rerun holds the CP group's state of one layer on top (cp_attention_state_bytes_per_layer).
double block_scratch_bytes(const EngineRank& r) {
  ActivationShape s = fp32_layer_shape(r);
  if (r.mixed_precision) s.recompute = Recompute::full;
  double bytes = recompute_scratch_bytes(s);
  if (r.cp == 1) return bytes;
  if (s.recompute != Recompute::none) {
    ActivationShape none = s, selective = s;
    none.recompute = Recompute::none;
    selective.recompute = Recompute::selective;
    bytes -= activation_bytes_per_layer(none) - activation_bytes_per_layer(selective);
  }
  if (r.recompute == Recompute::full) {
    ActivationShape whole = s;
    whole.seq = r.seq;
    bytes += cp_attention_state_bytes_per_layer(whole, r.cp, r.cp_algorithm);
  }
  return bytes;
}

// One block of one micro-batch: cp_activation_bytes_per_layer over the whole sequence (at
// cp = 1 activation_bytes_per_layer).
double layer_bytes(const EngineRank& r) {
  ActivationShape whole = layer_shape(r);
  whole.seq = r.seq;
  return cp_activation_bytes_per_layer(whole, r.cp, r.cp_algorithm);
}

// One micro-batch of every chunk of the rank's stage: its blocks, the head's tensors on the last
// virtual stage or the output it sends on, the token ids on the first, and a split backward's
// weight-gradient stash.
double microbatch_bytes(const EngineRank& r) {
  const StagePartition& p = r.partition;
  const int64_t b = r.micro_batch, T = r.seq / r.cp, C = r.hidden;
  double sum = 0;
  for (int chunk = 0; chunk < p.chunks(); ++chunk) {
    const int vs = p.virtual_stage(r.stage, chunk);
    const double blocks = p.layer_count(r.stage, chunk);
    sum += blocks * layer_bytes(r);
    if (r.split_backward) sum += blocks * weight_grad_stash_bytes_per_layer(fp32_layer_shape(r));
    if (vs == p.virtual_stages() - 1) {
      sum += head_activation_bytes(
          {.seq = T, .micro_batch = b, .hidden = C, .vocab = r.vocab_local, .rms_norm = r.llama});
    } else {
      sum += pp_bytes_per_microbatch(b, T, C, 4, r.tp, r.sequence_parallel);
      if (vs == 0) sum += 4.0 * static_cast<double>(b * T);
    }
  }
  return sum;
}

// In-flight micro-batches x one micro-batch's activations, + the workspace the rank's
// backward shares and recompute's one-layer scratch.
double activations_peak(const EngineRank& r, double microbatch) {
  const HeadActivationShape ws{.seq = r.seq / r.cp,
                               .micro_batch = r.micro_batch,
                               .hidden = r.hidden,
                               .vocab = r.vocab_local,
                               // The MLP gradients are this rank's columns: F / tp.
                               .ffn_hidden = r.ffn / r.tp,
                               .bytes_per_element = 4,
                               .threads = r.threads,
                               .tp = r.tp,
                               .blockwise_attention = r.cp > 1,
                               .rms_norm = r.llama,
                               .heads = r.heads,
                               .kv_heads = r.llama ? r.kv_heads : 0,
                               .gated_mlp = r.llama};
  return r.inflight * microbatch + workspace_activation_bytes(ws) + block_scratch_bytes(r);
}

// ZeRO-2's gradient buffers, in elements (parallel::DataParallel::begin_backward binds each
// bucket's fp32 gradient at full size from its first unit's backward until its reduce-scatter,
// every micro-batch, in both precisions): the buckets are gradient_buckets of the stage's units
// in backward order, the embeddings last on one stage (under a pipeline a bucket of their own,
// synced at the step's end). The embeddings' bucket is bound at the head's backward (the tied
// wte) and held through the embedding's, so on a stage with the head it sits beside the largest
// other bucket; on a first stage without the head it is bound at the embedding's backward, right
// after the last block's bucket was handed to the reduce-scatter, which has not finished by
// then, and with more micro-batches it is held through their buckets: beside the largest other
// one too.
int64_t zero2_bucket_grads(const EngineRank& r) {
  const bool deferred = r.pp > 1;
  const int64_t emb = r.params.embeddings;
  std::vector<int64_t> order = r.params.units;
  if (emb > 0 && !deferred) order.push_back(emb);
  const std::vector<UnitRun> buckets = gradient_buckets(order, r.bucket_bytes);
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
// once, by unit_weights_peak_bytes (ZeRO-3 gathers fp32 weights, or bf16 under mixed precision;
// mixed precision computes on fp32 working copies at every stage), beside zero3_gathered_bytes'
// gradients: the embeddings' (held through the whole backward) and the largest other unit's,
// fp32 in both precisions. At ZeRO-2 the gradients above the shard are whole buckets instead.
// Not counted: a unit's gradient still being reduce-scattered by the communication thread when
// the next unit's backward begins (overlap; the layout report names it), and at ZeRO-2 a bucket
// still reducing when the next one binds.
int64_t working_set(const EngineRank& r) {
  const StageParamCounts& stage = r.params;
  const std::vector<int64_t>& units = stage.units;  // in the order backward runs them
  const int64_t largest = units.empty() ? 0 : *std::max_element(units.begin(), units.end());
  const int64_t emb = stage.embeddings;
  const bool mixed = r.mixed_precision;
  const int64_t zero2 = r.zero_stage == 2 ? 4 * zero2_bucket_grads(r) : 0;
  if (!mixed && r.zero_stage < 3) return zero2;
  const UnitWeightBytes weights{.gathered = r.zero_stage < 3 ? 0 : (mixed ? 2 : 4),
                                .working = mixed ? 4 : 0};
  const StagePartition& p = r.partition;
  int64_t params = 0;
  for (int chunk = 0; chunk < p.chunks(); ++chunk) {
    const int vs = p.virtual_stage(r.stage, chunk);
    ChunkUnitCounts counts{
        .embedding = vs == 0, .head = vs == p.virtual_stages() - 1, .embeddings = emb};
    // Every block of a GPT has the same tensors: the chunk holds layer_count copies of one.
    counts.blocks.assign(static_cast<size_t>(p.layer_count(r.stage, chunk)), stage.block);
    if (counts.head) counts.final_norm = stage.final_norm;
    params = std::max(params, unit_weights_peak_bytes(counts, weights));
  }
  if (r.zero_stage == 2) return params + zero2;
  const StateBytes gradient{.param = 0, .grad = 4, .optimizer = 0};
  return params + zero3_gathered_bytes(emb, gradient, 0) +
         zero3_gathered_bytes(largest, gradient, 0);
}

// The TP, PP, DP, embedding and EP bytes of one step.
RankTraffic traffic(const EngineRank& r, const EngineRankPieces& x) {
  RankTraffic t;
  const int64_t b = r.micro_batch, T = r.seq / r.cp, C = r.hidden;
  const auto M = static_cast<double>(r.microbatches);
  const bool sp = r.sequence_parallel;
  const StagePartition& p = r.partition;
  double blocks = 0;
  for (int chunk = 0; chunk < p.chunks(); ++chunk) blocks += p.layer_count(r.stage, chunk);
  const auto routed_blocks = static_cast<double>(r.routed_blocks);
  const int64_t act = engine_activation_wire_bytes(r.mixed_precision);
  const double n = x.steps;
  const double per_layer =
      tp_traffic_per_layer(b, T, C, act, r.tp, sp, Recompute::none).bytes_moved();
  // Routed blocks' collectives depend on the rows their experts computed (measured per call).
  t.tp_block = per_layer * (blocks - routed_blocks) * M;
  if (r.tp > 1) {
    double routed = 0;  // over the steps, as the counters; per step below
    for (const auto& [rows, calls] : x.expert_rows) {
      routed += static_cast<double>(calls) *
                bytes_moved(moe_tp_collectives_per_layer(b, T, C, act, sp, rows), r.tp);
    }
    t.tp_block += routed / n;
  }
  if (r.recompute == Recompute::full) {
    // Each rerun of a block's forward repeats its forward f and g: once before a fused
    // backward, and again before W under a split one. A routed block's rerun routes the rows its
    // forward routed, so its experts' g is priced with the forward's measured rows.
    const double reruns = r.split_backward ? 2 : 1;
    const double full = tp_traffic_per_layer(b, T, C, act, r.tp, sp, Recompute::full).bytes_moved();
    t.tp_recompute = (full - per_layer) * (blocks - routed_blocks) * M * reruns;
    if (r.tp > 1) {
      double routed = 0;  // over the steps, as the counters; per step below
      for (const auto& [rows, calls] : x.expert_rows) {
        routed += static_cast<double>(calls) *
                  bytes_moved(moe_tp_rerun_collectives_per_layer(b, T, C, act, sp, rows), r.tp);
      }
      t.tp_recompute += reruns * routed / n;
    }
  }
  if (sp) {
    t.tp_regather = bytes_moved(sp_regather_collectives(b, T, C, act), r.tp) * blocks * M;
    // The LayerNorm gradients' sum over TP after the DP sync: each piece of an LN tensor this
    // rank holds, one exact ring all-reduce each.
    for (const int64_t piece : x.layernorm_pieces) {
      t.tp_norms += static_cast<double>(
          flat_ring_all_reduce_link_traffic(piece, sizeof(float), r.tp, 1, x.tp_rank)
              .total_bytes());
    }
  }
  // The K/V heads' copies (more TP ranks than K/V heads): each piece of their rows this rank
  // holds, one exact ring all-reduce over the copies.
  for (const int64_t piece : x.kv_copy_pieces) {
    t.tp_kv_copies += static_cast<double>(
        flat_ring_all_reduce_link_traffic(piece, sizeof(float), x.kv_copies, 1, x.kv_copy_rank)
            .total_bytes());
  }
  t.tp_vocab =
      bytes_moved(tp_vocab_collectives(b, T, C, 4, p.has_embedding(r.stage), p.has_head(r.stage)),
                  r.tp) *
      M;
  t.pp = static_cast<double>(pp_sends_per_microbatch(r.pp, p.chunks(), r.stage)) * M *
         pp_bytes_per_microbatch(b, T, C, act, r.tp, sp);
  // The DP wire: gradient syncs in --grad-reduce's element, parameter gathers in the weights'.
  const int64_t grad_wire = r.bf16_grad_reduce ? 2 : 4;
  const int64_t param_wire = engine_state_bytes(r.mixed_precision).param;
  t.dp = static_cast<double>(
      stage_dp_bytes_moved(x.dp_dense, grad_wire, param_wire, x.dp_algorithm, x.direct_slot_bytes));
  if (x.has_expert_dp) {
    t.dp += static_cast<double>(
        stage_dp_bytes_moved(x.dp_experts, grad_wire, param_wire, comm::Algorithm::ring));
  }
  if (x.tied_embedding > 0) {
    t.embedding = collective_traffic(comm::CollectiveOp::all_reduce, x.tied_embedding_algorithm,
                                     static_cast<double>(x.tied_embedding) * sizeof(float), 2)
                      .bytes_moved();
  }
  // The forward's exchanges (counts, dispatch and combine) run once, or twice under full
  // recompute; the backward's two (the combine's gradient, the dispatch's) once.
  const double forward = ep_forward_exchanges(r.recompute);
  t.ep = (forward * (x.ep_counts + x.ep_dispatch_forward + x.ep_combine) + x.ep_dispatch +
          x.ep_combine) /
         n;
  return t;
}

}  // namespace

StateBytes engine_state_bytes(bool mixed_precision) {
  // Mixed precision: the DataParallel hooks keep bf16 weights and gradients, the fp32 master
  // beside the moments.
  return mixed_precision ? kMixedPrecisionAdam : kFp32Adam;
}

int64_t engine_activation_wire_bytes(bool mixed_precision) {
  return mixed_precision ? 2 : 4;  // bf16 under mixed precision; the vocabulary stays fp32
}

RankPrediction predict_rank(const EngineRank& r) {
  RankPrediction out;
  // Under EP the experts are sharded over the expert-DP group, the rest over DP x CP.
  out.states =
      ep_model_state_bytes(r.params.params - r.params.experts, r.params.experts, r.dp * r.cp, r.ep,
                           r.zero_stage, engine_state_bytes(r.mixed_precision));
  out.microbatch_activation_bytes = microbatch_bytes(r);
  out.activations_peak_bytes = activations_peak(r, out.microbatch_activation_bytes);
  out.working_set_bytes = working_set(r);
  out.peak_bytes = static_cast<double>(out.states.total()) + out.activations_peak_bytes +
                   static_cast<double>(out.working_set_bytes);
  return out;
}

RankPrediction predict_rank(const EngineRank& r, const EngineRankPieces& pieces) {
  RankPrediction out = predict_rank(r);
  out.traffic = traffic(r, pieces);
  return out;
}

}  // namespace dtrain::plan
