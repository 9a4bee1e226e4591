// evaluate: one layout's memory, traffic and time, composed from the formula headers.
// (search lives in search.cc; the stage split and per-stage parameters in stage_params.cc; the
// step's time in step_time.cc.)
#include "dtrain/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "dtrain/clock/engine_clock.h"
#include "dtrain/clock/time_model.h"
#include "dtrain/core/check.h"
#include "dtrain/cost/head_activation_memory.h"
#include "dtrain/cost/pipeline_stages.h"
#include "dtrain/machine/format.h"
#include "dtrain/plan/planner_internal.h"
#include "dtrain/schedule/pipeline_schedule.h"
#include "dtrain/schedule/pipeline_simulation.h"

namespace dtrain::plan {

using namespace detail;

namespace {

// The flags the planner's stage-split errors name.
const PartitionFlags kPartitionFlags{"--pp", "--layers", "--stage-layers", "--vp"};

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

ScheduleKind schedule_of(const Layout& l) {
  return l.vp > 1 ? ScheduleKind::interleaved : l.schedule;
}

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
                                   PricingMemo* memo = nullptr) {
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

}  // namespace

LayerActivations detail::layer_activations(const PlanInput& in, const Layout& l) {
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

namespace {

MemoryBreakdown memory_of_stage(const PlanInput& in, const Layout& l, int64_t microbatches,
                                int stage, const LayerActivations& a, PricingMemo* memo = nullptr) {
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

}  // namespace

void use_engine_profile(PlanInput& in, bool precision_given, bool activation_bytes_given) {
  if (!precision_given) in.training.state_bytes = kFp32Adam;
  if (!activation_bytes_given) in.training.activation_bytes = 4;
  in.training.activation_count =
      in.training.activation_bytes >= 4 ? ActivationCount::engine : ActivationCount::engine_mixed;
  in.model.count_final_norm = true;
}

std::string_view name(StepTimeSource s) {
  switch (s) {
    case StepTimeSource::predicted:
      return "predicted";
    case StepTimeSource::achieved_flops:
      return "--achieved-tflops";
    case StepTimeSource::measured_step:
      return "--step-time";
  }
  return "?";
}

namespace {

std::string joined(const std::vector<int>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += str(i == 0 ? "" : ",", values[i]);
  return s;
}

}  // namespace

std::string describe(const Layout& l) {
  std::string s = str("dp=", l.dp, " tp=", l.tp, " pp=", l.pp);
  if (!l.stage_layers.empty()) s += str(" stage-layers=", joined(l.stage_layers));
  if (l.cp > 1) s += str(" cp=", l.cp, "(", name(l.cp_algo), ")");
  if (l.ep > 1) s += str(" ep=", l.ep);
  if (l.vp > 1) s += str(" v=", l.vp);
  s += str(" zero=", l.zero_stage, " b=", l.micro_batch, " rc=", name(l.recompute));
  if (l.sequence_parallel) s += " sp";
  if (l.vp == 1 && l.schedule != ScheduleKind::one_f_one_b) s += str(" ", name(l.schedule));
  if (!(l.order == RankOrder{})) s += " order=" + to_string(l.order);
  return s;
}

std::string layout_flags(const Layout& l) {
  std::string s = str("--dp ", l.dp, " --tp ", l.tp, " --pp ", l.pp);
  if (!l.stage_layers.empty()) s += str(" --stage-layers ", joined(l.stage_layers));
  if (l.cp > 1) s += str(" --cp ", l.cp, " --cp-algo ", name(l.cp_algo));
  if (l.ep > 1) s += str(" --ep ", l.ep);
  if (l.vp > 1) s += str(" --vp ", l.vp);
  s += str(" --zero ", l.zero_stage, " --micro-batch ", l.micro_batch, " --recompute ",
           name(l.recompute));
  if (l.sequence_parallel) s += " --sequence-parallel";
  if (l.vp == 1 && l.schedule != ScheduleKind::one_f_one_b)
    s += str(" --schedule ", name(l.schedule));
  if (!(l.order == RankOrder{})) s += " --rank-order " + to_string(l.order);
  return s;
}

void validate(const PlanInput& in) {
  validate(in.model);
  validate(in.cluster);
  DTRAIN_CHECK(in.training.global_batch > 0, "--global-batch must be positive, got ",
               in.training.global_batch);
  DTRAIN_CHECK(in.training.global_batch <= kMaxGlobalBatch, "--global-batch must be at most ",
               kMaxGlobalBatch, ", got ", in.training.global_batch);
  DTRAIN_CHECK(in.training.tokens >= 0, "--tokens must not be negative, got ", in.training.tokens);
  const Training& tr = in.training;
  DTRAIN_CHECK(std::isfinite(tr.achieved_flops_per_gpu) && tr.achieved_flops_per_gpu >= 0,
               "--achieved-tflops must be a finite, non-negative number, got ",
               tr.achieved_flops_per_gpu * 1e-12);
  DTRAIN_CHECK(std::isfinite(tr.step_time_s) && tr.step_time_s >= 0,
               "--step-time must be a finite, non-negative number of seconds, got ",
               tr.step_time_s);
  DTRAIN_CHECK(tr.achieved_flops_per_gpu == 0 || tr.step_time_s == 0,
               "give --achieved-tflops or --step-time, not both");
  DTRAIN_CHECK(tr.achieved_flops_per_gpu <= in.cluster.gpu.peak_flops, "--achieved-tflops ",
               tr.achieved_flops_per_gpu * 1e-12, " exceeds the GPU's peak of ",
               in.cluster.gpu.peak_flops * 1e-12, " TFLOP/s");
  DTRAIN_CHECK(in.training.tokens <= kMaxTokens, "--tokens must be at most ", kMaxTokens, ", got ",
               in.training.tokens);
  DTRAIN_CHECK(in.training.activation_bytes > 0, "--activation-bytes must be positive, got ",
               in.training.activation_bytes);
  DTRAIN_CHECK(in.training.activation_bytes <= kMaxActivationBytes,
               "--activation-bytes must be at most ", kMaxActivationBytes, ", got ",
               in.training.activation_bytes);
  DTRAIN_CHECK(in.training.bucket_bytes > 0, "--bucket-size must be positive, got ",
               in.training.bucket_bytes);
  const StateBytes& sb = in.training.state_bytes;
  if (in.model.moe.enabled()) {
    // The engine's routed layer keeps what moe_mlp_activation_bytes counts (the router's
    // probabilities, each routed row's input, GELU input and output, and output: model/ops/moe.h's
    // MoeExpertCache), so the engine's activation count covers it. The engine clock prices the
    // engine's MoE layer: GPT experts of the dense MLP's shape, no shared experts, no TP.
    if (has_measured_rates(in.cluster)) {
      const MoeShape& moe = in.model.moe;
      DTRAIN_CHECK(in.model.family == ModelFamily::gpt && moe.shared_experts == 0 &&
                       (moe.expert_ffn == 0 || moe.expert_ffn == in.model.ffn_or_default()) &&
                       !in.model.mla.enabled(),
                   "--model ", in.model.name,
                   ": a cluster file with measured CPU rates (gpu.measured) prices dtrain's own "
                   "engine, whose MoE layer has GPT experts of the dense MLP's shape (no "
                   "--shared-experts, --expert-ffn, MLA); plan this model on a GPU cluster (e.g. "
                   "--cluster 8x8xH100)");
    }
    if (!in.training.tokens_per_expert.empty()) {
      MoeDispatch d;  // checks the routing's length and entries
      d.tokens = 1;
      d.hidden = in.model.hidden;
      d.top_k = in.model.moe.top_k;
      d.experts = in.model.moe.experts;
      d.tokens_per_expert = in.training.tokens_per_expert;
      dispatch_bytes(d, 0);
    }
  } else {
    DTRAIN_CHECK(in.training.tokens_per_expert.empty(),
                 "--tokens-per-expert is an MoE model's routing: add --experts E");
  }
  DTRAIN_CHECK(sb.param > 0 && sb.grad > 0 && sb.optimizer >= 0,
               "--precision: bytes per parameter must be positive");
}

std::string layout_error(const PlanInput& in, const Layout& l) {
  const ModelShape& m = in.model;
  const int gpus = in.cluster.world();
  if (l.dp < 1) return str("--dp must be >= 1, got ", l.dp);
  if (l.tp < 1) return str("--tp must be >= 1, got ", l.tp);
  if (l.pp < 1) return str("--pp must be >= 1, got ", l.pp);
  if (l.cp < 1) return str("--cp must be >= 1, got ", l.cp);
  if (l.ep < 1) return str("--ep must be >= 1, got ", l.ep);
  if (l.vp < 1) return str("--vp must be >= 1, got ", l.vp);
  if (l.micro_batch < 1) return str("--micro-batch must be >= 1, got ", l.micro_batch);
  // Bounded before they are multiplied together.
  for (const auto& [flag, value] : {std::pair{"--dp", l.dp}, std::pair{"--tp", l.tp},
                                    std::pair{"--pp", l.pp}, std::pair{"--cp", l.cp}}) {
    if (value > kMaxGpus) return str(flag, " ", value, " is more than ", kMaxGpus, " GPUs");
  }
  if (l.vp > m.layers) return str("--vp ", l.vp, " is more than --layers ", m.layers);
  if (l.micro_batch > in.training.global_batch) {
    return str("--micro-batch ", l.micro_batch, " is larger than --global-batch ",
               in.training.global_batch);
  }
  if (l.zero_stage < 0 || l.zero_stage > 3) {
    return str("--zero must be 0, 1, 2 or 3, got ", l.zero_stage);
  }
  if (l.cp > gpus) return str("--cp ", l.cp, " is more than the cluster's ", gpus, " GPUs");
  if (l.cp > 1 && static_cast<int64_t>(l.dp) * l.cp * l.tp * l.pp != gpus) {
    return str("--dp ", l.dp, " x --cp ", l.cp, " x --tp ", l.tp, " x --pp ", l.pp, " = ",
               static_cast<int64_t>(l.dp) * l.cp * l.tp * l.pp,
               " GPUs does not match the cluster's ", gpus, " (", in.cluster.nodes, " nodes x ",
               in.cluster.gpus_per_node, ")");
  }
  if (static_cast<int64_t>(l.dp) * l.cp * l.tp * l.pp != gpus) {
    return str("--dp ", l.dp, " x --tp ", l.tp, " x --pp ", l.pp, " = ",
               static_cast<int64_t>(l.dp) * l.tp * l.pp, " GPUs does not match the cluster's ",
               gpus, " (", in.cluster.nodes, " nodes x ", in.cluster.gpus_per_node, ")");
  }
  if (m.heads % l.tp != 0) return str("--tp ", l.tp, " does not divide --heads ", m.heads);
  if (m.moe.enabled() && has_measured_rates(in.cluster)) {
    // What the engine clock prices of dtrain's MoE layer so far (engine_clock_moe_gap).
    const std::string gap =
        engine_clock_moe_gap(true, l.tp, l.ep, l.zero_stage, l.recompute,
                             in.training.activation_bytes < 4 ? Precision::bf16 : Precision::fp32);
    if (!gap.empty()) return str(gap, "; plan it on a GPU cluster (e.g. --cluster 8x8xH100)");
  }
  if (l.ep > 1) {
    if (!m.moe.enabled()) return str("--ep ", l.ep, " needs an MoE model (--experts E)");
    if (l.dp % l.ep != 0) {
      return str("--ep ", l.ep, " does not divide --dp ", l.dp,
                 " (expert parallelism is carved from the data-parallel ranks)");
    }
    if (m.moe.experts % l.ep != 0) {
      return str("--ep ", l.ep, " does not divide --experts ", m.moe.experts);
    }
    if (l.cp > 1) return str("--ep ", l.ep, " with --cp ", l.cp, ": not modelled yet");
  }
  const int64_t kv = m.kv_heads_or_heads();
  if (kv % l.tp != 0 && l.tp % kv != 0) {
    return str("--tp ", l.tp, " neither divides nor is a multiple of --kv-heads ", kv);
  }
  // The stage split: --stage-layers as given, else the balanced split (pipeline_stages.h),
  // whose first and last stage get the fewer layers when --pp does not divide them. The
  // interleaved schedule is planned on equal model chunks.
  if (!l.stage_layers.empty()) {
    if (l.pp == 1) return "--stage-layers needs --pp 2 or more";
    if (l.vp > 1) {
      return str("--stage-layers with --vp ", l.vp,
                 ": the interleaved schedule is planned on equal model chunks (--pp x --vp "
                 "dividing --layers); drop --stage-layers");
    }
    try {
      explicit_partition(static_cast<int>(m.layers), l.pp, 1, l.stage_layers, kPartitionFlags);
    } catch (const Error& e) {
      return e.what();
    }
  } else if (l.vp > 1) {
    if (m.layers % (static_cast<int64_t>(l.pp) * l.vp) != 0) {
      return str("--pp ", l.pp, " x --vp ", l.vp, " = ", int64_t{l.pp} * l.vp,
                 " does not divide --layers ", m.layers,
                 " (the interleaved schedule is planned on equal model chunks)");
    }
  } else if (l.pp > m.layers) {
    return str("--pp ", l.pp, " is larger than --layers ", m.layers);
  }
  if (has_measured_rates(in.cluster) && !even_split(m, l)) {
    return str(l.stage_layers.empty() ? str("--pp ", l.pp, " does not divide --layers ", m.layers)
                                      : str("--stage-layers ", joined(l.stage_layers)),
               ": the engine clock (a cluster file with gpu.measured) prices equal stages only; "
               "give --pp dividing --layers, or plan it on a GPU cluster (e.g. --cluster "
               "8x8xH100)");
  }
  if (l.cp > 1) {
    const CpShape cs = cp_shape(in, l);
    if (l.cp_algo == CpAlgorithm::automatic) {
      // auto needs one algorithm that can run: the sequence divides, then ring's 2 x cp or
      // ulysses' heads (the words only when neither can).
      if (!cp_layout_ok(cs, CpAlgorithm::ring) && !cp_layout_ok(cs, CpAlgorithm::ulysses)) {
        const std::string ring = cp_layout_error(cs, CpAlgorithm::ring);
        if (m.seq % l.cp != 0) return ring;
        return str(ring, "; nor can ulysses run: ", cp_layout_error(cs, CpAlgorithm::ulysses));
      }
    } else if (!cp_layout_ok(cs, l.cp_algo)) {
      return cp_layout_error(cs, l.cp_algo);
    }
  }
  const int64_t per_step = static_cast<int64_t>(l.dp) * l.micro_batch;
  if (in.training.global_batch % per_step != 0) {
    return str("--micro-batch ", l.micro_batch, " x --dp ", l.dp, " = ", per_step,
               " does not divide --global-batch ", in.training.global_batch);
  }
  if (l.vp > 1) {
    if (l.pp == 1) return str("--vp ", l.vp, " needs --pp > 1");
    if (l.schedule != ScheduleKind::one_f_one_b && l.schedule != ScheduleKind::interleaved) {
      return str("--vp ", l.vp, " needs the interleaved schedule, not --schedule ",
                 name(l.schedule));
    }
    const int64_t microbatches = in.training.global_batch / per_step;
    if (microbatches % l.pp != 0) {
      return str("--vp ", l.vp, ": the interleaved schedule needs the micro-batch count (",
                 microbatches,
                 " = --global-batch / (--micro-batch x --dp)) to be a multiple of --pp ", l.pp);
    }
  }
  return {};
}

namespace {

// How evaluate_local times the pipeline: the schedule replayed (evaluate), or a lower bound on
// its makespan (evaluate_lower_bound and step_lower_bound, what search ranks by before it
// replays), or not at all (evaluate_memory: the memory alone, what search needs of a layout
// that does not fit).
enum class PipelineTiming { simulated, lower_bound, none };
// Whether evaluate_local prices the memory: step_lower_bound needs the step's bound alone.
enum class Memory { priced, skipped };

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

}  // namespace

PlanInput detail::linked_input(const PlanInput& given) {
  PlanInput in = given;
  in.cluster = effective_links(given.cluster);
  return in;
}

namespace {

// evaluate on the per-rank shape `in.model`; `real_model` gives the model FLOPs.
Plan evaluate_local(const PlanInput& given, const ModelShape& real_model, const Layout& l,
                    PipelineTiming timing, Memory memory, PricingMemo* memo) {
  Plan plan;
  plan.layout = l;
  const int64_t microbatches =
      given.training.global_batch / (static_cast<int64_t>(l.dp) * l.micro_batch);
  plan.microbatches = microbatches;
  const double mb = static_cast<double>(microbatches);

  // The stages' blocks are reported with a replayed plan only (search prices 1e5 layouts).
  if (timing == PipelineTiming::simulated) {
    plan.stage_layers = pipeline_stage_layers(given.model, l);
  }
  if (memory == Memory::priced) plan.memory = heaviest_stage_memory(given, l, microbatches, memo);
  if (timing == PipelineTiming::none) return plan;

  // Collectives are priced at the share of the links' bandwidth they reach (rates.h); search
  // keeps that input in its memo.
  std::optional<PlanInput> local;  // built only without the memo
  const PlanInput& in = memo != nullptr ? memo->linked(given) : local.emplace(linked_input(given));
  const Cluster& c = in.cluster;

  const AxisSizes sizes{l.dp, l.tp, l.pp, l.cp};
  const auto [tp_forward_s, tp_backward_s] = tp_times(
      in, l, microbatches, place_group(Axis::tp, sizes, l.order, c.gpus_per_node), &plan.traffic);
  const double pp_send_s =
      pp_send_time(in, l, microbatches, place_group(Axis::pp, sizes, l.order, c.gpus_per_node),
                   &plan.traffic, &plan.pp_bytes_per_stage);

  const auto [cp_forward_s, cp_backward_s] =
      cp_times(in, l, microbatches, place_group(Axis::cp, sizes, l.order, c.gpus_per_node), &plan);
  const auto [ep_forward_s, ep_backward_s] =
      ep_times(in, l, microbatches, place_data_group(sizes, l.order, c.gpus_per_node), &plan);
  StageComm comm;
  comm.tp_forward_s = tp_forward_s;
  comm.tp_backward_s = tp_backward_s;
  comm.cp_forward_s = cp_forward_s;
  comm.cp_backward_s = cp_backward_s;
  comm.layers = most_stage_layers(in.model, l);
  comm.ep_forward_s = ep_forward_s;
  comm.ep_backward_s = ep_backward_s;
  comm.routed = plan.moe.moe_layers;
  const StageCompute sc = stage_compute(
      in, real_model, l, comm, memo != nullptr ? &memo->times(in, real_model, l) : nullptr);

  // The slowest stage's times, TP and CP collectives and sends included (reported), and the
  // schedule simulated on every virtual stage (pipeline_simulation.h): each stage's own blocks
  // with their TP and CP collectives (L / (P v) per chunk with v > 1), the embedding on the
  // first, the head on the last; a rank is held by its sends, as Megatron's batched
  // send/receive is waited for.
  StageTimes times = sc.stage_times;
  times.forward += pp_send_s;
  times.backward_input += pp_send_s;
  PipelineSimulationInput simulation;
  simulation.virtual_stage_times = sc.virtual_stage_times;
  simulation.send_s = pp_send_s / l.vp;
  TimeBreakdown& t = plan.time;
  if (timing == PipelineTiming::simulated) {
    const PipelineSimulation pipeline =
        cached_pipeline_replay(schedule_of(l), l.pp, static_cast<int>(microbatches), l.vp)
            ->run(simulation);
    t.bubble = pipeline.bubble();
    t.pp_s = pipeline.ranks[static_cast<size_t>(pipeline.critical_rank)].sending_s;
  } else {
    // Only the makespan: the step below grows with it (a sum of it and terms that do not
    // depend on the pipeline), so the step is bounded as the makespan is.
    t.bubble.total_time = pipeline_makespan_lower_bound(
        schedule_of(l), l.pp, static_cast<int>(microbatches), l.vp, simulation);
  }
  t.stage_times = times;
  t.virtual_stage_times = simulation.virtual_stage_times;
  t.pp_message_s = simulation.send_s;
  t.compute_s = mb * (sc.forward_s + sc.backward_s);
  t.recompute_s = mb * sc.recompute_s;
  t.tp_s = mb * (tp_forward_s + tp_backward_s);
  t.bubble_s = t.bubble.bubble_time;
  dp_times(in, l, microbatches, sc, place_data_group(sizes, l.order, c.gpus_per_node),
           &plan.traffic, &t);

  t.optimizer_s = sc.optimizer_s;
  t.step_no_overlap_s = t.bubble.total_time + t.dp_s + t.optimizer_s;
  t.step_s = t.bubble.total_time + t.dp_exposed_s + t.optimizer_s;
  if (has_measured_rates(c)) {
    // The engine clock's step has its own replay; its bound is only that a step is not
    // negative (search then replays every fitting layout of such a cluster: they are few).
    if (timing == PipelineTiming::simulated) {
      engine_clock_times(in, l, microbatches, &t);
    } else {
      t.step_s = 0;
    }
  }
  t.predicted_step_s = t.step_s;
  const double gpus = static_cast<double>(c.world());
  t.model_flops = sc.total.model;
  t.hardware_flops = sc.total.hardware();
  if (in.training.step_time_s > 0) {
    t.step_s = in.training.step_time_s;
    t.step_source = StepTimeSource::measured_step;
    // A measured step shorter than the layout's FLOPs at the GPUs' peak cannot have happened,
    // as --achieved-tflops above the peak cannot (validate refuses that one).
    const double per_gpu = t.hardware_flops / (t.step_s * gpus);
    DTRAIN_CHECK(per_gpu <= c.gpu.peak_flops, "--step-time ", format_seconds(t.step_s),
                 " is shorter than this layout's step can be: its ", format_sci(t.hardware_flops),
                 " FLOPs per step (recomputation included) on ", c.world(), " GPUs would run at ",
                 format_fixed(per_gpu * 1e-12, 1), " TFLOP/s per GPU, above the GPU's peak of ",
                 format_fixed(c.gpu.peak_flops * 1e-12, 1),
                 " TFLOP/s; give the measured seconds per optimizer step");
  } else if (in.training.achieved_flops_per_gpu > 0) {
    t.step_s = t.hardware_flops / (gpus * in.training.achieved_flops_per_gpu);
    t.step_source = StepTimeSource::achieved_flops;
  }
  const double step_tokens = static_cast<double>(in.training.global_batch * in.model.seq);
  t.tokens_per_s = step_tokens / t.step_s;
  t.mfu = t.model_flops / (t.step_s * gpus * c.gpu.peak_flops);
  t.hfu = t.hardware_flops / (t.step_s * gpus * c.gpu.peak_flops);
  t.hardware_flops_per_gpu = t.hardware_flops / (t.step_s * gpus);
  t.cluster_flops_per_s = t.hardware_flops / t.step_s;
  t.days = in.training.tokens > 0 ? days_to_train(in.training.tokens, t.tokens_per_s) : 0;
  if (in.training.tokens > 0) {
    const double iterations = in.training.tokens / step_tokens;
    t.total_flops_6nd =
        6.0 * static_cast<double>(model_flops_param_count(real_model)) * in.training.tokens;
    t.total_model_flops = t.model_flops * iterations;
    t.total_hardware_flops = t.hardware_flops * iterations;
  }
  return plan;
}

// With more TP ranks than key/value heads, each rank keeps a copy of one K/V head (as vLLM and
// TensorRT-LLM do): the per-rank shape has tp K/V heads, so the copies' weights, activations and
// FLOPs are counted; the model FLOPs (MFU) stay those of the real model.
PlanInput per_rank_input(const PlanInput& in, const Layout& l) {
  PlanInput local = in;
  local.model.kv_heads = l.tp;
  return local;
}

}  // namespace

namespace {

// The layout with its CP algorithm chosen (choose_cp_algorithm's rule, the ring's overlap from
// the clock) when it is automatic; `why` (unless null) says why.
Layout resolve_cp(const PlanInput& in, const Layout& given, std::string* why,
                  PricingMemo* memo = nullptr) {
  Layout l = given;
  if (l.cp == 1) return l;
  if (l.cp_algo != CpAlgorithm::automatic) {
    if (why != nullptr) *why = str(name(l.cp_algo), ": given by --cp-algo");
    return l;
  }
  // The CP group's placement (with b, tp, cp, recompute and sp) decides the choice: search
  // asks the memo by it.
  const GroupPlacement cp_group =
      place_group(Axis::cp, AxisSizes{l.dp, l.tp, l.pp, l.cp}, l.order, in.cluster.gpus_per_node);
  if (memo != nullptr && why == nullptr) {
    if (const std::optional<CpAlgorithm> known = memo->cp_algorithm(l, cp_group)) {
      l.cp_algo = *known;
      return l;
    }
  }
  bool hidden = false;
  const CpShape shape = cp_shape(in, l);
  if (cp_layout_ok(shape, CpAlgorithm::ring)) {
    const AxisSizes sizes{l.dp, l.tp, l.pp, l.cp};
    const Cluster links = effective_links(in.cluster);
    PlanInput priced = in;
    priced.cluster = links;
    hidden =
        ring_timing(priced, l, place_group(Axis::cp, sizes, l.order, links.gpus_per_node)).hidden();
  }
  const CpChoice choice = choose_cp_algorithm(shape, l.recompute, hidden, why != nullptr);
  if (memo != nullptr) memo->set_cp_algorithm(l, cp_group, choice.algorithm);
  l.cp_algo = choice.algorithm;
  if (why != nullptr) *why = choice.why;
  return l;
}

}  // namespace

MemoryBreakdown stage_memory(const PlanInput& in, const Layout& given, int stage) {
  const std::string error = layout_error(in, given);
  if (!error.empty()) throw Error(error);
  const Layout l = resolve_cp(in, given, nullptr);
  DTRAIN_CHECK(stage >= 0 && stage < l.pp, "stage ", stage, " outside 0..", l.pp - 1);
  const int64_t microbatches =
      in.training.global_batch / (static_cast<int64_t>(l.dp) * l.micro_batch);
  if (in.model.kv_heads_or_heads() >= l.tp) {
    return memory_of_stage(in, l, microbatches, stage, layer_activations(in, l));
  }
  const PlanInput local = per_rank_input(in, l);
  return memory_of_stage(local, l, microbatches, stage, layer_activations(local, l));
}

namespace {

Plan evaluate_timed(const PlanInput& in, const Layout& given, PipelineTiming timing,
                    Memory memory = Memory::priced, PricingMemo* memo = nullptr) {
  const std::string error = layout_error(in, given);
  if (!error.empty()) throw Error(error);
  // Only a replayed plan is reported, with its CP algorithm's reason.
  std::string why;
  const Layout l =
      resolve_cp(in, given, timing == PipelineTiming::simulated ? &why : nullptr, memo);
  Plan p = in.model.kv_heads_or_heads() >= l.tp
               ? evaluate_local(in, in.model, l, timing, memory, memo)
               : evaluate_local(per_rank_input(in, l), in.model, l, timing, memory, memo);
  p.cp.why = why;
  return p;
}

}  // namespace

Plan evaluate(const PlanInput& in, const Layout& given) {
  return evaluate_timed(in, given, PipelineTiming::simulated);
}

Plan detail::evaluate_memory(const PlanInput& in, const Layout& given, PricingMemo& memo) {
  return evaluate_timed(in, given, PipelineTiming::none, Memory::priced, &memo);
}

MemoryBreakdown detail::layout_memory(const PlanInput& in, const Layout& given, PricingMemo& memo) {
  const std::string error = layout_error(in, given);
  if (!error.empty()) throw Error(error);
  const Layout l = resolve_cp(in, given, nullptr, &memo);
  const int64_t microbatches =
      in.training.global_batch / (static_cast<int64_t>(l.dp) * l.micro_batch);
  if (in.model.kv_heads_or_heads() >= l.tp) {
    return heaviest_stage_memory(in, l, microbatches, &memo);
  }
  return heaviest_stage_memory(per_rank_input(in, l), l, microbatches, &memo);
}

double detail::step_lower_bound(const PlanInput& in, const Layout& given, PricingMemo& memo) {
  return evaluate_timed(in, given, PipelineTiming::lower_bound, Memory::skipped, &memo).time.step_s;
}

size_t PricingMemo::KeyHash::operator()(const Key& k) const {
  // Multiply and fold each field in, then mix the high bits down: linear probing reads the
  // low bits.
  // Each field by its own odd constant, summed (the products run side by side), then mixed.
  constexpr std::array<uint64_t, 8> kOdd{
      0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull, 0xD6E8FEB86659FD93ull,
      0xFF51AFD7ED558CCDull, 0xC4CEB9FE1A85EC53ull, 0x94D049BB133111EBull, 0xBF58476D1CE4E5B9ull};
  uint64_t h = 0;
  for (size_t i = 0; i < k.size(); ++i) h += static_cast<uint64_t>(k[i]) * kOdd[i];
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return static_cast<size_t>(h ^ (h >> 29));
}

namespace {

// A layout's CP choice and TP seconds depend on it through these, and its group's placement.
PricingMemo::Key group_key(const Layout& l, const GroupPlacement& group) {
  return {l.tp,
          l.cp,
          l.micro_batch,
          static_cast<int64_t>(l.recompute),
          l.sequence_parallel,
          group.stride,
          group.nodes,
          group.ranks_per_node};
}

}  // namespace

std::optional<CpAlgorithm> PricingMemo::cp_algorithm(const Layout& l, const GroupPlacement& group) {
  const CpAlgorithm* known = cp_algorithms_.find(group_key(l, group));
  if (known == nullptr) return std::nullopt;
  return *known;
}

void PricingMemo::set_cp_algorithm(const Layout& l, const GroupPlacement& group,
                                   CpAlgorithm algorithm) {
  const Key key = group_key(l, group);
  if (cp_algorithms_.find(key) == nullptr) cp_algorithms_.insert(key, algorithm);
}

const StageBlocks& PricingMemo::blocks(const PlanInput& in, const Layout& l, int stage) {
  const Key key{l.tp, l.pp, l.vp, l.ep, stage, 0, 0, 0};
  const StageBlocks* known = blocks_.find(key);
  return known != nullptr ? *known : blocks_.insert(key, stage_blocks(in, l, stage));
}

const LayerTimes& PricingMemo::times(const PlanInput& in, const ModelShape& real_model,
                                     const Layout& l) {
  const Key key{
      l.tp, l.cp, l.micro_batch, static_cast<int64_t>(l.recompute), l.sequence_parallel, l.ep,
      0,    0};
  const LayerTimes* known = times_.find(key);
  return known != nullptr ? *known : times_.insert(key, layer_times(in, real_model, l));
}

std::pair<double, double> PricingMemo::tp_layer(const PlanInput& in, const Layout& l) {
  const GroupPlacement group =
      place_group(Axis::tp, AxisSizes{l.dp, l.tp, l.pp, l.cp}, l.order, in.cluster.gpus_per_node);
  const Key key = group_key(l, group);
  if (const std::pair<double, double>* known = tp_layers_.find(key)) return *known;
  PlanInput priced = in;
  priced.cluster = effective_links(in.cluster);
  return tp_layers_.insert(key, tp_layer_seconds(priced, l, group));
}

const PlanInput& PricingMemo::linked(const PlanInput& given) {
  for (const auto& [kv_heads, in] : linked_) {
    if (kv_heads == given.model.kv_heads) return *in;
  }
  linked_.emplace_back(given.model.kv_heads, std::make_unique<PlanInput>(linked_input(given)));
  return *linked_.back().second;
}

const LayerActivations& PricingMemo::activations(const PlanInput& in, const Layout& l) {
  const Key key{l.tp,
                l.cp,
                static_cast<int64_t>(l.cp_algo),
                l.micro_batch,
                static_cast<int64_t>(l.recompute),
                l.sequence_parallel,
                l.ep,
                static_cast<int64_t>(schedule_of(l))};
  const LayerActivations* known = activations_.find(key);
  return known != nullptr ? *known : activations_.insert(key, layer_activations(in, l));
}

Plan evaluate_lower_bound(const PlanInput& in, const Layout& given) {
  return evaluate_timed(in, given, PipelineTiming::lower_bound);
}

Plan evaluate_memory(const PlanInput& in, const Layout& given) {
  return evaluate_timed(in, given, PipelineTiming::none);
}

double step_lower_bound(const PlanInput& in, const Layout& given) {
  return evaluate_timed(in, given, PipelineTiming::lower_bound, Memory::skipped).time.step_s;
}

namespace {

double first_stage_state_bytes(const PlanInput& in, const Layout& l, PricingMemo* memo) {
  // The first stage's states, summed as MemoryBreakdown::total() begins its sum: the rest of
  // that sum and the other stages only add bytes (and rounding a sum of non-negative terms
  // never goes below a partial sum), so evaluate's total is never below this.
  if (memo != nullptr && l.stage_layers.empty() && !engine_split(in)) {
    // stage_state_memory's figures from the memo's blocks, with no breakdown filled in.
    const StageBlocks& blocks = in.model.kv_heads_or_heads() >= l.tp
                                    ? memo->blocks(in, l, 0)
                                    : memo->blocks(per_rank_input(in, l), l, 0);
    const int64_t experts = l.ep > 1 ? blocks.expert_params : 0;
    const ModelStateBytes states =
        ep_model_state_bytes(blocks.params - experts, experts, l.dp * l.cp, experts > 0 ? l.ep : 1,
                             l.zero_stage, in.training.state_bytes);
    return static_cast<double>(states.params) + static_cast<double>(states.grads) +
           static_cast<double>(states.optimizer);
  }
  const MemoryBreakdown first = in.model.kv_heads_or_heads() >= l.tp
                                    ? stage_state_memory(in, l, 0, memo)
                                    : stage_state_memory(per_rank_input(in, l), l, 0, memo);
  return first.params + first.grads + first.optimizer;
}

}  // namespace

double memory_lower_bound(const PlanInput& in, const Layout& l) {
  return first_stage_state_bytes(in, l, nullptr);
}

double detail::step_compute_bound(const PlanInput& in, const Layout& l, PricingMemo& memo) {
  // The step is the makespan plus terms that are not negative, except where the engine clock
  // or a measured step sets it (then nothing is bounded here).
  if (has_measured_rates(in.cluster) || in.training.step_time_s > 0 ||
      in.training.achieved_flops_per_gpu > 0 || !l.stage_layers.empty()) {
    return 0;
  }
  auto bound = [&](const PlanInput& local) {
    const LayerTimes& lt = memo.times(local, in.model, l);
    // One block's forward, backward (B + W) and all three, rescaled as stage_compute rescales
    // them (the FLOPs convention); with routed layers the lighter of a dense and a routed one.
    auto forward = [&](const PassTimes& p) { return p.forward_s * lt.model_scale; };
    auto backward = [&](const PassTimes& p) {
      return ((p.backward_input_s - p.recompute_s) * lt.model_scale +
              p.recompute_s * lt.recompute_scale) +
             p.backward_weight_s * lt.model_scale;
    };
    double f = forward(lt.dense_layer), b = backward(lt.dense_layer);
    double c = f + b;
    if (in.model.moe.enabled()) {
      f = std::min(f, forward(lt.moe_layer));
      b = std::min(b, backward(lt.moe_layer));
      c = std::min(c, forward(lt.moe_layer) + backward(lt.moe_layer));
    }
    // And each block's TP collectives (tp_times charges every block of a stage its calls).
    const auto [tp_forward_s, tp_backward_s] = memo.tp_layer(local, l);
    f += tp_forward_s;
    b += tp_backward_s;
    c += tp_forward_s + tp_backward_s;
    // Every virtual stage holds at least floor(L / (P v)) blocks (pipeline_stages.h), and every
    // chunk of the interleaved schedule 1/v of a stage's. The last rank's bound in
    // pipeline_makespan_lower_bound: the forwards of the P - 1 virtual stages before it, its own
    // M v chunks, and with a fused backward the backwards of those P - 1 on the way back.
    const int vstages = l.pp * l.vp;
    const double blocks = static_cast<double>(in.model.layers / vstages);
    const double microbatches = static_cast<double>(in.training.global_batch /
                                                    (static_cast<int64_t>(l.dp) * l.micro_batch));
    const bool fused = schedule_of(l) != ScheduleKind::zero_bubble_h1;
    const double before = static_cast<double>(l.pp - 1);
    const double work = blocks * (before * f + microbatches * static_cast<double>(l.vp) * c +
                                  (fused ? before * b : 0));
    // That bound sums the same products in another order, with collectives and sends besides:
    // lowered by far more than the rounding of either sum.
    constexpr double kOrderSlack = 1e-4;
    return work * (1 - kOrderSlack);
  };
  if (in.model.kv_heads_or_heads() < l.tp) return bound(per_rank_input(in, l));
  return bound(in);
}

double detail::first_stage_states(const PlanInput& in, const Layout& l, PricingMemo& memo) {
  return first_stage_state_bytes(in, l, &memo);
}

double detail::memory_lower_bound(const PlanInput& in, const Layout& given, PricingMemo& memo,
                                  double states) {
  // And the first stage's blocks' activations, the first term of its activations as
  // memory_of_stage sums them (the terms it adds are bytes, none negative, except a routed
  // layer's difference from the dense MLP, which can be): with the memo's pieces this costs a
  // few products, and sets aside most layouts that cannot fit.
  const Layout l = resolve_cp(in, given, nullptr, &memo);
  const bool copies = in.model.kv_heads_or_heads() < l.tp;
  const LayerActivations& a =
      copies ? memo.activations(per_rank_input(in, l), l) : memo.activations(in, l);
  if (in.model.moe.enabled() && l.recompute != Recompute::full && a.moe_delta < 0) return states;
  const int64_t microbatches =
      in.training.global_batch / (static_cast<int64_t>(l.dp) * l.micro_batch);
  const int64_t layers = l.stage_layers.empty() && !engine_split(in)
                             ? memo.blocks(copies ? per_rank_input(in, l) : in, l, 0).layers
                             : stage_layer_count(in.model, l, 0);
  return states + stage_inflight_microbatches(l, microbatches, 0) * static_cast<double>(layers) *
                      (a.per_layer + a.weight_grad_stash_per_layer);
}

}  // namespace dtrain::plan
