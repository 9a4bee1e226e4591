// A pipeline stage's memory on one GPU: its model states, its blocks' activations for the
// micro-batches it holds, the head's on the last stage, and the temporary buffers; the stage
// that needs the most (evaluate's and search's figure).
#include <algorithm>
#include <optional>
#include <vector>

#include "dtrain/clock/engine_clock.h"
#include "dtrain/cost/head_activation_memory.h"
#include "dtrain/plan/planner_internal.h"
#include "dtrain/plan/pricing_memo.h"

namespace dtrain::plan::detail {
namespace {

ActivationShape activation_shape(const ModelShape& m, const Training& t, const Layout& l) {
  ActivationShape a;
  a.seq = m.seq;
  a.micro_batch = l.micro_batch;
  a.hidden = m.hidden;
  a.heads = m.heads;
  a.ffn_hidden = m.ffn_or_default();
  a.tp = l.tp;
  a.sequence_parallel = l.sequence_parallel;
  a.recompute = l.recompute;
  a.bytes_per_element = t.activation_bytes;
  // Megatron's GPT trains with dropout, Llama without; the paper leaves out the LayerNorm
  // statistics. dtrain's engine has no dropout and keeps them.
  const bool engine = t.activation_count != ActivationCount::paper;
  a.dropout = !engine && m.family == ModelFamily::gpt;
  a.count_layernorm_stats = engine;
  if (t.activation_count == ActivationCount::engine_mixed) a.elementwise_bytes_per_element = 4;
  a.kv_heads = m.kv_heads;
  a.gated_mlp = m.family == ModelFamily::llama;
  a.rms_norm = m.family == ModelFamily::llama;
  return a;
}

}  // namespace

// The micro-batches whose activations stage `stage` holds at its peak: until their backward, or
// with a split backward until their weight gradients (pipeline_model.h).
double stage_inflight_microbatches(const Layout& l, int64_t microbatches, int stage) {
  const ScheduleKind kind = schedule_of(l);
  const int mbs = static_cast<int>(microbatches);
  return kind == ScheduleKind::zero_bubble_h1
             ? peak_weight_stash_microbatches(kind, l.pp, mbs, l.vp, stage)
             : peak_inflight_microbatches(kind, l.pp, mbs, l.vp, stage);
}

// The model states of stage `stage` (params, grads, optimizer; its blocks and parameters),
// nothing else filled in.
MemoryBreakdown stage_state_memory(const PlanInput& in, const Layout& l, int stage,
                                   PricingMemo* memo) {
  MemoryBreakdown mem;
  mem.stage = stage;
  // The memo's key is the balanced split's (tp, pp, v, ep, stage); the engine's split and an
  // explicit one are priced on their own.
  const bool shared = memo != nullptr && l.stage_layers.empty() && !engine_split(in);
  std::optional<StageBlocks> own;  // built only without the memo
  const StageBlocks& blocks =
      shared ? memo->blocks(in, l, stage) : own.emplace(stage_blocks(in, l, stage));
  mem.layers = blocks.layers;
  mem.stage_params = blocks.params;
  // Parameters are replicated over CP: ZeRO shards over dp x cp; routed experts over their own
  // expert-data-parallel group, dp x cp / ep.
  mem.moe_layers = blocks.routed;
  mem.expert_params = l.ep > 1 ? blocks.expert_params : 0;
  const ModelStateBytes states =
      ep_model_state_bytes(mem.stage_params - mem.expert_params, mem.expert_params, l.dp * l.cp,
                           mem.expert_params > 0 ? l.ep : 1, l.zero_stage, in.training.state_bytes);
  if (mem.expert_params == 0) mem.expert_params = blocks.expert_params;
  mem.params = static_cast<double>(states.params);
  mem.grads = static_cast<double>(states.grads);
  mem.optimizer = static_cast<double>(states.optimizer);
  return mem;
}

LayerActivations layer_activations(const PlanInput& in, const Layout& l) {
  const ModelShape& m = in.model;
  LayerActivations a;
  const ActivationShape shape = activation_shape(m, in.training, l);
  // With context parallelism every per-token tensor holds seq / cp tokens, and the attention's
  // scores are the CP algorithm's (context_parallel.h).
  a.per_layer = cp_activation_bytes_per_layer(shape, l.cp, l.cp_algo);
  ActivationShape local_shape = shape;  // the rank's seq / cp tokens
  local_shape.seq = m.seq / l.cp;
  // The engine's mixed precision keeps its scratch, stash and head tensors in fp32.
  const bool mixed = in.training.activation_count == ActivationCount::engine_mixed;
  ActivationShape fp32_shape = shape;
  fp32_shape.bytes_per_element = 4;
  fp32_shape.elementwise_bytes_per_element = 0;
  ActivationShape scratch_shape = mixed ? fp32_shape : shape;
  if (mixed) scratch_shape.recompute = Recompute::full;  // every tensor but the input
  // backward re-creates one layer's dropped activations at a time
  ActivationShape scratch_all = scratch_shape;
  scratch_all.recompute = Recompute::none;
  a.recompute_temp = cp_activation_bytes_per_layer(scratch_all, l.cp, l.cp_algo) -
                     cp_activation_bytes_per_layer(scratch_shape, l.cp, l.cp_algo);
  if (schedule_of(l) == ScheduleKind::zero_bubble_h1) {
    // A split backward holds each micro-batch from its F until its W (pipeline_model.h), with
    // each layer's linears' output gradients from B to W (activation_memory.h; dense layers).
    ActivationShape stash_shape = mixed ? fp32_shape : shape;
    stash_shape.seq = local_shape.seq;
    a.weight_grad_stash_per_layer = weight_grad_stash_bytes_per_layer(stash_shape);
  }
  // A routed layer keeps its router, expert and shared-expert tensors in place of the dense
  // MLP's (moe.h).
  if (m.moe.enabled()) {
    const double tokens = static_cast<double>(l.micro_batch * m.seq / l.cp);
    const double routed_part =
        moe_mlp_activation_bytes(m, tokens, shape.bytes_per_element, l.tp, moe_load_factor(in, l));
    const double dense_part = dense_mlp_activation_bytes(m, tokens, shape.bytes_per_element,
                                                         shape.bytes_per_element, l.tp);
    a.moe_delta = routed_part - dense_part;
  }
  // The head's activations (final norm, logits, losses: head_activation_memory.h) live on the
  // last stage, for each micro-batch in flight there; the vocabulary is split over TP ranks.
  HeadActivationShape& head = a.head;
  head.seq = m.seq / l.cp;
  head.micro_batch = l.micro_batch;
  head.hidden = m.hidden;
  head.vocab = shard_count(m.vocab, l.tp);
  head.ffn_hidden = shard_count(m.ffn_or_default(), l.tp);
  head.bytes_per_element = mixed ? 4 : in.training.activation_bytes;
  head.tp = l.tp;
  head.blockwise_attention = l.cp > 1;
  if (m.family == ModelFamily::llama) {  // RMSNorm, grouped-query qkv, SwiGLU (the engine's)
    head.rms_norm = true;
    head.heads = m.heads;
    head.kv_heads = m.kv_heads_or_heads();
    head.gated_mlp = true;
  }
  a.head_per_microbatch = head_activation_bytes(head);
  // The backward pass's gradient workspace, shared by all layers (head_activation_memory.h).
  a.workspace = workspace_activation_bytes(head);
  // The ring holds one block pair's scores at a time; the backward two (P and dP).
  if (l.cp > 1 && l.cp_algo == CpAlgorithm::ring) {
    a.ring_blocks = 2 * cp_ring_block_bytes(mixed ? fp32_shape : shape, l.cp);
  }
  return a;
}

MemoryBreakdown memory_of_stage(const PlanInput& in, const Layout& l, int64_t microbatches,
                                int stage, const LayerActivations& a, PricingMemo* memo) {
  const ModelShape& m = in.model;
  const double per_layer = a.per_layer;
  const StateBytes sb = in.training.state_bytes;
  MemoryBreakdown mem = stage_state_memory(in, l, stage, memo);
  mem.activation_per_layer = per_layer;
  mem.weight_grad_stash_per_layer = a.weight_grad_stash_per_layer;
  mem.inflight_microbatches = stage_inflight_microbatches(l, microbatches, stage);
  mem.activations = mem.inflight_microbatches * static_cast<double>(mem.layers) *
                    (per_layer + mem.weight_grad_stash_per_layer);
  // Full recompute keeps the layer input alone either way, and re-creates one routed layer's
  // tensors at a time into the scratch.
  double moe_scratch = 0;
  if (mem.moe_layers > 0) {
    const double delta = a.moe_delta;
    if (l.recompute == Recompute::full) {
      mem.moe_activation_per_layer = per_layer;
      moe_scratch = std::max(0.0, delta);
    } else {
      mem.moe_activation_per_layer = per_layer + delta;
      mem.activations += mem.inflight_microbatches * static_cast<double>(mem.moe_layers) * delta;
    }
  }
  const HeadActivationShape& head = a.head;
  if (stage == l.pp - 1) {
    mem.head_activations = mem.inflight_microbatches * a.head_per_microbatch;
    mem.activations += mem.head_activations;
  }
  if (in.training.activation_count != ActivationCount::paper) {
    mem.activations +=
        mem.inflight_microbatches * stage_boundary_activation_bytes(head, l.pp, l.vp, stage);
  }
  double buffers = 0;
  if (l.zero_stage == 3) {
    int64_t layer_params =
        scaled_to_override(m, engine_split(in) ? engine_layer_param_count(m, l.tp)
                                               : shard_count(layer_param_count(m), l.tp));
    if (mem.moe_layers > 0) {  // ZeRO-3 gathers a routed layer's dense part and its E / ep experts
      layer_params = std::max(
          layer_params, scaled_to_override(m, moe_layer_dense_params(m, l.tp) +
                                                  rank_routed_expert_params(m, 1, l.ep, l.tp)));
    }
    buffers = static_cast<double>(zero3_gathered_bytes(layer_params, sb));
    // The engine keeps the embeddings gathered from the embedding's forward through the tied
    // LM head's, and their gradient from the head's backward through the embedding's (the
    // paper's working set is the layers' alone).
    if (engine_split(in)) {
      const int64_t embeddings = scaled_to_override(m, engine_embedding_params(m, l, stage));
      buffers += static_cast<double>(zero3_gathered_bytes(embeddings, sb, 0));
    }
  } else if (l.dp * l.cp > 1) {
    buffers = std::min(in.training.bucket_bytes,
                       static_cast<double>(mem.stage_params * sb.grad));  // one bucket in flight
  }
  mem.workspace = a.workspace;
  mem.layer_scratch = a.recompute_temp + moe_scratch;
  mem.temporary = buffers + mem.layer_scratch + mem.workspace;
  if (l.cp > 1 && l.cp_algo == CpAlgorithm::ring) mem.temporary += a.ring_blocks;
  mem.capacity = in.cluster.gpu.memory_bytes;
  if (const std::optional<EngineRank> engine = engine_rank_of(in, l, microbatches, stage)) {
    mem.engine_peak_bytes = predict_rank(*engine).peak_bytes;
  }
  return mem;
}

// The plan's memory: the heaviest stage's (the first of equals). The first and the last stage
// differ (embeddings, head, in-flight micro-batches), and with unequal stages every stage holds
// its own layers. No link enters it.
MemoryBreakdown heaviest_stage_memory(const PlanInput& given, const Layout& l, int64_t microbatches,
                                      PricingMemo* memo) {
  std::optional<LayerActivations> own;  // built only without the memo
  const LayerActivations& a =
      memo != nullptr ? memo->activations(given, l) : own.emplace(layer_activations(given, l));
  MemoryBreakdown heaviest = memory_of_stage(given, l, microbatches, 0, a, memo);
  // An interior stage's memory depends on the stage only through its blocks, its routed blocks
  // and the micro-batches it holds: a stage alike in those to an earlier one needs the same
  // bytes, so it cannot be the first of the heaviest and is not priced again (a pipeline of 96
  // stages has three or four kinds). The engine's split sizes its buckets block by block in
  // place, so there every stage is priced.
  struct InteriorKind {
    int64_t layers, routed;
    double inflight;
    bool operator==(const InteriorKind&) const = default;
  };
  std::vector<InteriorKind> priced;
  const bool share_alike = !engine_split(given);
  // heaviest_stage_candidates' stages: the last alone with equal stages (no list built: search
  // asks this of every layout it prices), else every one.
  const bool every_stage = !even_split(given.model, l);
  for (int stage = every_stage ? 1 : l.pp - 1; stage < l.pp; ++stage) {
    if (stage == 0) continue;
    if (share_alike && stage != l.pp - 1) {
      const InteriorKind kind{stage_layer_count(given.model, l, stage),
                              stage_moe_layers(given.model, l, stage),
                              stage_inflight_microbatches(l, microbatches, stage)};
      if (std::find(priced.begin(), priced.end(), kind) != priced.end()) continue;
      priced.push_back(kind);
    }
    MemoryBreakdown other = memory_of_stage(given, l, microbatches, stage, a, memo);
    if (other.total() > heaviest.total()) heaviest = other;
  }
  return heaviest;
}

}  // namespace dtrain::plan::detail
