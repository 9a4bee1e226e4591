// evaluate: one layout's memory, traffic and time, composed from the formula headers.
// (search lives in search.cc.)
#include "dtrain/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "dtrain/clock/engine_clock.h"
#include "dtrain/clock/time_model.h"
#include "dtrain/core/check.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/cost/head_activation_memory.h"
#include "dtrain/cost/pipeline_stages.h"
#include "dtrain/machine/format.h"
#include "dtrain/schedule/pipeline_schedule.h"
#include "dtrain/schedule/pipeline_simulation.h"

namespace dtrain::plan {
namespace {

// The flags the planner's stage-split errors name.
const PartitionFlags kPartitionFlags{"--pp", "--layers", "--stage-layers", "--vp"};

// Blocks of model chunk `chunk` on pipeline stage `stage`, and the first of them: --stage-layers
// when given (v = 1), else the balanced split (pipeline_stages.h balanced_chunk_layers).
int64_t chunk_layer_count(const ModelShape& m, const Layout& l, int stage, int chunk) {
  if (!l.stage_layers.empty()) return l.stage_layers[static_cast<size_t>(stage)];
  return balanced_chunk_layers(m.layers, int64_t{l.pp} * l.vp, int64_t{chunk} * l.pp + stage);
}

int64_t chunk_first_layer(const ModelShape& m, const Layout& l, int stage, int chunk) {
  if (!l.stage_layers.empty()) {
    int64_t first = 0;
    for (int k = 0; k < stage; ++k) first += l.stage_layers[static_cast<size_t>(k)];
    return first;
  }
  return balanced_chunk_first(m.layers, int64_t{l.pp} * l.vp, int64_t{chunk} * l.pp + stage);
}

// Blocks on pipeline stage `stage`, all its chunks.
int64_t stage_layer_count(const ModelShape& m, const Layout& l, int stage) {
  int64_t layers = 0;
  for (int c = 0; c < l.vp; ++c) layers += chunk_layer_count(m, l, stage, c);
  return layers;
}

// Every stage holds the same blocks (L / P each); otherwise each is priced on its own.
bool even_split(const ModelShape& m, const Layout& l) {
  if (l.stage_layers.empty()) return m.layers % l.pp == 0;
  return std::all_of(l.stage_layers.begin(), l.stage_layers.end(),
                     [&](int n) { return n == l.stage_layers.front(); });
}

// The most blocks any stage holds (the TP and CP rows and ZeRO-3's pieces are that stage's).
int64_t most_stage_layers(const ModelShape& m, const Layout& l) {
  if (even_split(m, l)) return m.layers / l.pp;
  int64_t most = 0;
  for (int k = 0; k < l.pp; ++k) most = std::max(most, stage_layer_count(m, l, k));
  return most;
}

// The stages that can need the most memory or hold the most parameters: with equal stages the
// first (the most micro-batches in flight, the embedding) and the last (the head); with unequal
// ones every stage, since an interior stage with one block more can outweigh both.
std::vector<int> heaviest_stage_candidates(const ModelShape& m, const Layout& l) {
  if (l.pp == 1) return {0};
  if (even_split(m, l)) return {0, l.pp - 1};
  std::vector<int> all(static_cast<size_t>(l.pp));
  for (int k = 0; k < l.pp; ++k) all[static_cast<size_t>(k)] = k;
  return all;
}

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
  return a;
}

// Parameters of pipeline stage `stage` on one TP rank: its layers, plus the input embeddings on
// the first stage and the output head on the last (GPT ties the head to the embedding, so with
// pp > 1 the last stage keeps its own copy of the word embedding, as Megatron-LM does).
// With --params (ModelShape::params_override) the count is the shape's scaled to that total:
// --params sets every parameter-count figure (state memory, DP and ZeRO traffic, 6ND), the shape
// how they split over the stages and TP ranks, and the activations and Eq. 3's FLOPs.
// A routed layer's parameters besides its routed experts (attention, norms, router, shared
// experts), on one TP rank.
int64_t moe_layer_dense_params(const ModelShape& m, int tp) {
  return shard_count(moe_layer_param_count(m) - m.moe.experts * expert_param_count(m), tp);
}

// Routed layers of pipeline stage `stage` (its chunks' blocks).
int64_t stage_moe_layers(const ModelShape& m, const Layout& l, int stage) {
  if (!m.moe.enabled()) return 0;
  int64_t routed = 0;
  for (int c = 0; c < l.vp; ++c) {
    routed +=
        moe_layers_in(m, chunk_first_layer(m, l, stage, c), chunk_layer_count(m, l, stage, c));
  }
  return routed;
}

// The routed experts one rank of stage `stage` holds (E / ep per routed layer, 1/tp of each).
int64_t stage_expert_params(const ModelShape& m, const Layout& l, int stage) {
  return scaled_to_override(
      m, rank_routed_expert_params(m, stage_moe_layers(m, l, stage), l.ep, l.tp));
}

int64_t stage_param_count(const ModelShape& m, const Layout& l, int stage) {
  const int64_t layers = stage_layer_count(m, l, stage);
  const int64_t routed = stage_moe_layers(m, l, stage);
  int64_t params = (layers - routed) * shard_count(layer_param_count(m), l.tp);
  if (routed > 0) {
    params +=
        routed * moe_layer_dense_params(m, l.tp) + rank_routed_expert_params(m, routed, l.ep, l.tp);
  }
  if (stage == 0) params += shard_count(embedding_param_count(m), l.tp);
  if (stage == l.pp - 1) {
    params += shard_count(head_param_count(m), l.tp);
    if (m.family == ModelFamily::gpt && l.pp > 1) params += shard_count(m.vocab * m.hidden, l.tp);
  }
  return scaled_to_override(m, params);
}

// The engine's own split of a GPT stage over TP (ActivationCount::engine and engine_mixed):
// engine_clock.h's engine_layer_param_count per block; the word embedding (its vocabulary padded
// to a multiple of tp) split; wpe and the final LayerNorm whole on every rank. The paper's form
// (stage_param_count) gives every rank ceil(1/tp) of everything.
// The engine's embeddings unit of stage `stage` on one TP rank (0 on the stages between): wte's
// rows of the padded vocabulary and wpe whole on the first, the tied wte's copy on the last of a
// pipeline.
int64_t engine_embedding_params(const ModelShape& m, const Layout& l, int stage) {
  const int64_t wte_rows = (m.vocab + l.tp - 1) / l.tp * m.hidden;
  if (stage == 0) return wte_rows + m.seq * m.hidden;
  return stage == l.pp - 1 ? wte_rows : 0;
}

// One block as the engine cuts it: a routed block holds the router and its E / ep experts
// (engine_clock.h's engine_moe_layer_param_count), a dense one its TP share.
int64_t engine_block_param_count(const ModelShape& m, const Layout& l, int64_t layer) {
  return is_moe_layer(m, layer) ? engine_moe_layer_param_count(m, l.ep)
                                : engine_layer_param_count(m, l.tp);
}

int64_t engine_stage_param_count(const ModelShape& m, const Layout& l, int stage) {
  int64_t params = 0;
  for (int c = 0; c < l.vp; ++c) {
    const int64_t first = chunk_first_layer(m, l, stage, c);
    for (int64_t i = first; i < first + chunk_layer_count(m, l, stage, c); ++i) {
      params += engine_block_param_count(m, l, i);
    }
  }
  params += engine_embedding_params(m, l, stage);
  if (stage == l.pp - 1) params += head_param_count(m);  // the final LayerNorm, whole
  return scaled_to_override(m, params);
}

// The engine's gradient buckets of pipeline stage `stage` (parallel/data_parallel.h): its units
// in backward order (the final LayerNorm on the last stage, its blocks, the embeddings), a bucket
// closed as soon as it holds bucket_bytes; under a pipeline the end stages' embeddings (the tied
// wte) are a bucket of their own; ZeRO-3 syncs unit by unit. The engine sizes buckets at 4 bytes
// per element whatever the precision (parallel::make_buckets' default).
int64_t engine_dp_pieces(const PlanInput& in, const Layout& l, int stage) {
  const ModelShape& m = in.model;
  std::vector<int64_t> units;
  if (stage == l.pp - 1) units.push_back(head_param_count(m));
  for (int c = l.vp - 1; c >= 0; --c) {
    const int64_t first = chunk_first_layer(m, l, stage, c);
    for (int64_t i = first + chunk_layer_count(m, l, stage, c) - 1; i >= first; --i) {
      units.push_back(engine_block_param_count(m, l, i));
    }
  }
  int64_t deferred = engine_embedding_params(m, l, stage);
  if (l.zero_stage == 3) return static_cast<int64_t>(units.size()) + (deferred > 0 ? 1 : 0);
  if (deferred > 0 && l.pp == 1) {
    units.push_back(deferred);  // one stage: the embeddings are the last unit, not deferred
    deferred = 0;
  }
  const auto pieces = static_cast<int64_t>(
      gradient_buckets(units, static_cast<int64_t>(std::ceil(in.training.bucket_bytes))).size());
  return pieces + (deferred > 0 ? 1 : 0);
}

bool engine_split(const PlanInput& in) {
  return in.training.activation_count != ActivationCount::paper &&
         in.model.family == ModelFamily::gpt;
}

int64_t stage_params_of(const PlanInput& in, const Layout& l, int stage) {
  return engine_split(in) ? engine_stage_param_count(in.model, l, stage)
                          : stage_param_count(in.model, l, stage);
}

// The stage holding the most parameters on one TP rank (the first of equals).
int largest_stage(const PlanInput& in, const Layout& l) {
  int largest = 0;
  int64_t most = stage_params_of(in, l, 0);
  for (int k : heaviest_stage_candidates(in.model, l)) {
    const int64_t params = k == 0 ? most : stage_params_of(in, l, k);
    if (params > most) {
      most = params;
      largest = k;
    }
  }
  return largest;
}

// One layer's attention as a CP rank of this layout sees it (context_parallel.h).
CpShape cp_shape(const PlanInput& in, const Layout& l) {
  CpShape s;
  s.seq = in.model.seq;
  s.micro_batch = l.micro_batch;
  s.hidden = in.model.hidden;
  s.heads = in.model.heads;
  s.kv_heads = in.model.kv_heads;
  s.tp = l.tp;
  s.cp = l.cp;
  s.bytes_per_element = in.training.activation_bytes;
  return s;
}

// The dispatch of one routed layer, one micro-batch, on one rank of this layout.
MoeDispatch moe_dispatch(const PlanInput& in, const Layout& l) {
  MoeDispatch d;
  d.tokens = static_cast<double>(l.micro_batch * in.model.seq / l.cp);
  d.hidden = in.model.hidden;
  d.top_k = in.model.moe.top_k;
  d.experts = in.model.moe.experts;
  d.ep = l.ep;
  d.bytes_per_element = in.training.activation_bytes;
  d.tokens_per_expert = in.training.tokens_per_expert;
  return d;
}

// Routed copies the busiest rank's experts compute, over tokens x k (1: uniform routing, or no
// EP: every rank holds every expert and computes its own tokens' k copies).
double moe_load_factor(const PlanInput& in, const Layout& l) {
  if (!in.model.moe.enabled() || l.ep == 1) return 1;
  return expert_load_factor(moe_dispatch(in, l));
}

ScheduleKind schedule_of(const Layout& l) {
  return l.vp > 1 ? ScheduleKind::interleaved : l.schedule;
}

MemoryBreakdown memory_of_stage(const PlanInput& in, const Layout& l, int64_t microbatches,
                                int stage) {
  const ModelShape& m = in.model;
  const ActivationShape shape = activation_shape(m, in.training, l);
  // With context parallelism every per-token tensor holds seq / cp tokens, and the attention's
  // scores are the CP algorithm's (context_parallel.h).
  const double per_layer = cp_activation_bytes_per_layer(shape, l.cp, l.cp_algo);
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
  const double recompute_temp = cp_activation_bytes_per_layer(scratch_all, l.cp, l.cp_algo) -
                                cp_activation_bytes_per_layer(scratch_shape, l.cp, l.cp_algo);
  const StateBytes sb = in.training.state_bytes;
  MemoryBreakdown mem;
  mem.stage = stage;
  mem.layers = stage_layer_count(m, l, stage);
  mem.stage_params = stage_params_of(in, l, stage);
  // Parameters are replicated over CP: ZeRO shards over dp x cp; routed experts over their own
  // expert-data-parallel group, dp x cp / ep.
  mem.moe_layers = stage_moe_layers(m, l, stage);
  mem.expert_params = l.ep > 1 ? stage_expert_params(m, l, stage) : 0;
  const ModelStateBytes states =
      ep_model_state_bytes(mem.stage_params - mem.expert_params, mem.expert_params, l.dp * l.cp,
                           mem.expert_params > 0 ? l.ep : 1, l.zero_stage, sb);
  if (mem.expert_params == 0) mem.expert_params = stage_expert_params(m, l, stage);
  mem.params = static_cast<double>(states.params);
  mem.grads = static_cast<double>(states.grads);
  mem.optimizer = static_cast<double>(states.optimizer);
  mem.activation_per_layer = per_layer;
  const ScheduleKind kind = schedule_of(l);
  const int mbs = static_cast<int>(microbatches);
  if (kind == ScheduleKind::zero_bubble_h1) {
    // A split backward holds each micro-batch from its F until its W (pipeline_model.h), with
    // each layer's linears' output gradients from B to W (activation_memory.h; dense layers).
    ActivationShape stash_shape = mixed ? fp32_shape : shape;
    stash_shape.seq = local_shape.seq;
    mem.weight_grad_stash_per_layer = weight_grad_stash_bytes_per_layer(stash_shape);
    mem.inflight_microbatches = peak_weight_stash_microbatches(kind, l.pp, mbs, l.vp, stage);
  } else {
    mem.inflight_microbatches = peak_inflight_microbatches(kind, l.pp, mbs, l.vp, stage);
  }
  mem.activations = mem.inflight_microbatches * static_cast<double>(mem.layers) *
                    (per_layer + mem.weight_grad_stash_per_layer);
  // A routed layer keeps its router, expert and shared-expert tensors in place of the dense
  // MLP's (moe.h); full recompute keeps the layer input alone either way, and re-creates one
  // routed layer's tensors at a time into the scratch.
  double moe_scratch = 0;
  if (mem.moe_layers > 0) {
    const double tokens = static_cast<double>(l.micro_batch * m.seq / l.cp);
    const double routed_part =
        moe_mlp_activation_bytes(m, tokens, shape.bytes_per_element, l.tp, moe_load_factor(in, l));
    const double dense_part = dense_mlp_activation_bytes(m, tokens, shape.bytes_per_element,
                                                         shape.bytes_per_element, l.tp);
    const double delta = routed_part - dense_part;
    if (l.recompute == Recompute::full) {
      mem.moe_activation_per_layer = per_layer;
      moe_scratch = std::max(0.0, delta);
    } else {
      mem.moe_activation_per_layer = per_layer + delta;
      mem.activations += mem.inflight_microbatches * static_cast<double>(mem.moe_layers) * delta;
    }
  }
  // The head's activations (final norm, logits, losses: head_activation_memory.h) live on the
  // last stage, for each micro-batch in flight there; the vocabulary is split over TP ranks.
  HeadActivationShape head;
  head.seq = m.seq / l.cp;
  head.micro_batch = l.micro_batch;
  head.hidden = m.hidden;
  head.vocab = shard_count(m.vocab, l.tp);
  head.ffn_hidden = shard_count(m.ffn_or_default(), l.tp);
  head.bytes_per_element = mixed ? 4 : in.training.activation_bytes;
  head.tp = l.tp;
  head.blockwise_attention = l.cp > 1;
  if (stage == l.pp - 1) {
    mem.head_activations = mem.inflight_microbatches * head_activation_bytes(head);
    mem.activations += mem.head_activations;
  }
  if (in.training.activation_count != ActivationCount::paper) {
    mem.activations +=
        mem.inflight_microbatches * stage_boundary_activation_bytes(head, l.pp, l.vp, stage);
  }
  int64_t layer_params =
      scaled_to_override(m, engine_split(in) ? engine_layer_param_count(m, l.tp)
                                             : shard_count(layer_param_count(m), l.tp));
  if (mem.moe_layers > 0) {  // ZeRO-3 gathers a routed layer's dense part and its E / ep experts
    layer_params = std::max(layer_params,
                            scaled_to_override(m, moe_layer_dense_params(m, l.tp) +
                                                      rank_routed_expert_params(m, 1, l.ep, l.tp)));
  }
  double buffers = 0;
  if (l.zero_stage == 3) {
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
  // The backward pass's gradient workspace, shared by all layers (head_activation_memory.h).
  mem.workspace = workspace_activation_bytes(head);
  mem.layer_scratch = recompute_temp + moe_scratch;
  mem.temporary = buffers + mem.layer_scratch + mem.workspace;
  // The ring holds one block pair's scores at a time; the backward two (P and dP).
  if (l.cp > 1 && l.cp_algo == CpAlgorithm::ring) {
    mem.temporary += 2 * cp_ring_block_bytes(mixed ? fp32_shape : shape, l.cp);
  }
  mem.capacity = in.cluster.gpu.memory_bytes;
  return mem;
}

// What overlap can hide a phase behind: sums the phase's calls and keeps at least one piece
// (the last bucket, the first layer) exposed.
struct Phase {
  double time_s = 0;
  double min_exposed_s = 0;
  double window_s = 0;
  double exposed() const { return exposed_time(time_s, min_exposed_s, window_s); }
};

}  // namespace

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

std::vector<int64_t> pipeline_stage_layers(const ModelShape& m, const Layout& l) {
  std::vector<int64_t> layers(static_cast<size_t>(std::max(1, l.pp)));
  for (int k = 0; k < l.pp; ++k) layers[static_cast<size_t>(k)] = stage_layer_count(m, l, k);
  return layers;
}

std::string format_stage_layers(const std::vector<int64_t>& stage_layers) {
  std::string s;
  for (size_t i = 0; i < stage_layers.size();) {
    size_t j = i;
    while (j < stage_layers.size() && stage_layers[j] == stage_layers[i]) ++j;
    s += str(i == 0 ? "" : ", ", stage_layers[i], j - i > 1 ? str(" (x", j - i, ")") : "");
    i = j;
  }
  return s;
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
      // ulysses' heads.
      const std::string ring = cp_layout_error(cs, CpAlgorithm::ring);
      const std::string ulysses = cp_layout_error(cs, CpAlgorithm::ulysses);
      if (!ring.empty() && !ulysses.empty()) {
        if (m.seq % l.cp != 0) return ring;
        return str(ring, "; nor can ulysses run: ", ulysses);
      }
    } else {
      const std::string e = cp_layout_error(cs, l.cp_algo);
      if (!e.empty()) return e;
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

// One traffic row from a placed cost.
GroupTraffic traffic_row(std::string_view group, std::string_view op, std::string_view what,
                         const GroupPlacement& placement, const PlacedCost& cost) {
  GroupTraffic g;
  g.group = group;
  g.op = op;
  g.what = what;
  g.size = placement.size;
  g.nodes = placement.nodes;
  g.inter_node = cost.inter_node;
  g.hierarchical = cost.hierarchical;
  g.steps = cost.steps;
  g.bytes_per_rank = cost.bytes_sent;
  g.time_s = cost.time_s;
  g.exposed_s = cost.time_s;
  return g;
}

// Seconds of compute per micro-batch on the slowest stage (time_model.h, operation by
// operation: the last stage adds the head, the first the embedding), the optimizer step of the
// rank holding the most parameters, and the step's FLOPs in the chosen convention. The 6ND
// convention rescales the times by its totals, as it rescales the FLOPs.
struct StageCompute {
  double forward_s = 0;
  double backward_s = 0;  // B + W, recompute included
  double recompute_s = 0;
  PassTimes stage;  // F, B (recompute in), W per micro-batch
  // The slowest stage's F, B, W with its own TP, CP and EP collectives (no sends).
  StageTimes stage_times;
  // The parts the pipeline simulation places on its virtual stages: the busiest stage's blocks
  // (with v > 1 every chunk is given 1/v of them), the embedding (first stage) and the head
  // (last), per micro-batch.
  PassTimes blocks, embedding, head;
  // What the simulation runs on, one entry per virtual stage: with v = 1 each stage's own blocks
  // and collectives (unequal stages each priced on their layers), the embedding and the head.
  std::vector<StageTimes> virtual_stage_times;
  double optimizer_s = 0;
  TrainingFlops total;  // whole step, whole cluster, the real model
};

// The collectives of one micro-batch through the stage with the most layers (TP, CP: forward
// and backward seconds) and the one with the most routed layers (EP); a stage with fewer pays
// its share, in proportion to its layers.
struct StageComm {
  double tp_forward_s = 0, tp_backward_s = 0;
  double cp_forward_s = 0, cp_backward_s = 0;
  int64_t layers = 0;
  double ep_forward_s = 0, ep_backward_s = 0;
  int64_t routed = 0;
};

// `seconds` of `most` layers, for `layers` of them (exactly `seconds` when they are as many).
double layer_share(double seconds, int64_t layers, int64_t most) {
  if (layers == most) return seconds;
  return most > 0 ? seconds * static_cast<double>(layers) / static_cast<double>(most) : 0;
}

ClockShape clock_shape(const PlanInput& in, const Layout& l) {
  const ModelShape& m = in.model;
  ClockShape shape;
  shape.model = m;
  shape.micro_batch = l.micro_batch;
  shape.tp = l.tp;
  shape.sequence_parallel = l.sequence_parallel;
  shape.recompute = l.recompute;
  shape.activation_bytes = in.training.activation_bytes;
  shape.dropout =
      in.training.activation_count == ActivationCount::paper && m.family == ModelFamily::gpt;
  shape.cp = l.cp;
  return shape;
}

StageCompute stage_compute(const PlanInput& in, const ModelShape& real_model, const Layout& l,
                           const StageComm& comm) {
  const ModelShape& m = in.model;
  const Training& tr = in.training;
  const double batch = static_cast<double>(tr.global_batch);
  StageCompute sc;
  sc.total = training_flops(real_model, batch, l.recompute, tr.flops, tr.selective_flops);
  // Time charges the work redone, whatever convention HFU reports.
  const TrainingFlops timed =
      training_flops(real_model, batch, l.recompute, tr.flops, SelectiveFlops::rerun);
  const TrainingFlops reference = training_flops(real_model, batch, l.recompute,
                                                 FlopsConvention::narayanan, SelectiveFlops::rerun);
  const double model_scale = reference.model > 0 ? timed.model / reference.model : 1;
  const double recompute_scale =
      reference.recompute > 0 ? timed.recompute / reference.recompute : 1;
  const ClockShape shape = clock_shape(in, l);
  const GpuSpec& gpu = in.cluster.gpu;
  const PassTimes dense_layer = total(layer_ops(shape, gpu));
  PassTimes moe_layer;
  if (m.moe.enabled()) {
    ClockShape routed = shape;
    routed.moe_layer = true;
    routed.expert_load = moe_load_factor(in, l);
    moe_layer = total(layer_ops(routed, gpu));
  }
  auto sum = [](const PassTimes& p) {
    return p.forward_s + p.backward_input_s + p.backward_weight_s;
  };
  auto rescaled = [&](PassTimes p) {
    p.backward_input_s =
        (p.backward_input_s - p.recompute_s) * model_scale + p.recompute_s * recompute_scale;
    p.forward_s *= model_scale;
    p.backward_weight_s *= model_scale;
    p.recompute_s *= recompute_scale;
    return p;
  };
  // Each stage on its own layers: the first adds the embedding, the last the head, a stage
  // holds floor(L / P) or one more (pipeline_stages.h), and with routed layers the stages
  // differ in how many they hold; each pays its share of the TP, CP and EP collectives. The
  // slowest (compute and collectives) is reported; with v = 1 the simulation runs every stage
  // on its own times, with v > 1 (equal chunks) every chunk gets 1/v of the busiest stage's
  // blocks (an upper bound for MoE models, whose stages hold unequal routed layers).
  PassTimes stage, blocks;
  StageTimes stage_times;
  double slowest = 0;
  const PassTimes embedding = total(embedding_ops(shape, gpu));
  const PassTimes head = total(head_ops(shape, gpu));
  const bool own_stages = l.vp == 1;
  if (own_stages) sc.virtual_stage_times.resize(static_cast<size_t>(l.pp));
  for (int k = 0; k < l.pp; ++k) {
    const int64_t layers = stage_layer_count(m, l, k);
    const int64_t routed_layers = stage_moe_layers(m, l, k);
    const double routed = static_cast<double>(routed_layers);
    PassTimes b = dense_layer.scaled(static_cast<double>(layers) - routed);
    if (routed > 0) b += moe_layer.scaled(routed);
    PassTimes p = b;
    if (k == 0) p += embedding;
    if (k == l.pp - 1) p += head;
    const double tp_f = layer_share(comm.tp_forward_s, layers, comm.layers);
    const double tp_b = layer_share(comm.tp_backward_s, layers, comm.layers);
    const double cp_f = layer_share(comm.cp_forward_s, layers, comm.layers);
    const double cp_b = layer_share(comm.cp_backward_s, layers, comm.layers);
    const double ep_f = layer_share(comm.ep_forward_s, routed_layers, comm.routed);
    const double ep_b = layer_share(comm.ep_backward_s, routed_layers, comm.routed);
    const double busy = sum(p) + tp_f + tp_b + cp_f + cp_b + ep_f + ep_b;
    if (k == 0 || busy > slowest) {
      slowest = busy;
      stage = rescaled(p);
      stage_times = {stage.forward_s + tp_f + cp_f + ep_f,
                     stage.backward_input_s + tp_b + cp_b + ep_b, stage.backward_weight_s};
    }
    if (k == 0 || sum(b) > sum(blocks)) blocks = b;
    if (own_stages) {
      const PassTimes own = rescaled(b);
      sc.virtual_stage_times[static_cast<size_t>(k)] = {own.forward_s + tp_f + cp_f + ep_f,
                                                        own.backward_input_s + tp_b + cp_b + ep_b,
                                                        own.backward_weight_s};
    }
  }
  sc.stage = stage;
  sc.stage_times = stage_times;
  sc.blocks = rescaled(blocks);
  sc.embedding = rescaled(embedding);
  sc.head = rescaled(head);
  const StageTimes first{sc.embedding.forward_s, sc.embedding.backward_input_s,
                         sc.embedding.backward_weight_s};
  const StageTimes last{sc.head.forward_s, sc.head.backward_input_s, sc.head.backward_weight_s};
  if (own_stages) {
    auto add = [](StageTimes& to, const StageTimes& extra) {
      to.forward += extra.forward;
      to.backward_input += extra.backward_input;
      to.backward_weight += extra.backward_weight;
    };
    add(sc.virtual_stage_times.front(), first);
    add(sc.virtual_stage_times.back(), last);
  } else {
    sc.virtual_stage_times = virtual_stage_times(
        l.pp, l.vp,
        {sc.blocks.forward_s + comm.tp_forward_s + comm.cp_forward_s + comm.ep_forward_s,
         sc.blocks.backward_input_s + comm.tp_backward_s + comm.cp_backward_s + comm.ep_backward_s,
         sc.blocks.backward_weight_s},
        first, last);
  }
  sc.forward_s = stage.forward_s;
  sc.recompute_s = stage.recompute_s;
  sc.backward_s = stage.backward_input_s + stage.backward_weight_s;
  // The optimizer of the rank with the most parameters: its ZeRO shard (stage >= 1), routed
  // experts sharded over the expert-data-parallel group.
  double params = 0;
  for (int k : heaviest_stage_candidates(m, l)) {
    double dense = static_cast<double>(stage_params_of(in, l, k));
    double experts = l.ep > 1 ? static_cast<double>(stage_expert_params(m, l, k)) : 0;
    dense -= experts;
    if (l.zero_stage >= 1) {
      dense /= l.dp * l.cp;
      experts /= l.dp * l.cp / l.ep;
    }
    params = std::max(params, dense + experts);
  }
  const double layers = static_cast<double>(most_stage_layers(m, l));
  sc.optimizer_s = optimizer_seconds(params, tr.state_bytes, gpu, std::max(1.0, layers));
  return sc;
}

// TP collectives of one micro-batch through the stage, split into forward and backward seconds
// (the forward's share is 2 of the 4, or 6, calls of each kind); appends the step's rows.
std::pair<double, double> tp_times(const PlanInput& in, const Layout& l, int64_t microbatches,
                                   const GroupPlacement& group, std::vector<GroupTraffic>* rows) {
  if (l.tp == 1) return {0, 0};
  const ModelShape& m = in.model;
  const int64_t layers = most_stage_layers(m, l);
  const int64_t repeats = layers * microbatches;
  double forward_s = 0, backward_s = 0;
  for (const CollectiveCall& call :
       tp_collectives_per_layer(l.micro_batch, m.seq / l.cp, m.hidden, in.training.activation_bytes,
                                l.sequence_parallel, l.recompute)) {
    const PlacedCost per_layer = placed_collective_cost(call, group, in.cluster);
    const double per_mb = per_layer.time_s * static_cast<double>(layers);
    const double forward_share = 2.0 / static_cast<double>(call.count);
    forward_s += per_mb * forward_share;
    backward_s += per_mb * (1 - forward_share);
    const PlacedCost step{per_layer.steps * repeats,
                          per_layer.bytes_sent * static_cast<double>(repeats),
                          per_layer.time_s * static_cast<double>(repeats), per_layer.inter_node,
                          per_layer.hierarchical};
    GroupTraffic row = traffic_row("TP", comm::name(call.op), call.what, group, step);
    row.calls = call.count * repeats;
    rows->push_back(row);
  }
  return {forward_s, backward_s};
}

// Seconds of one micro-batch's pipeline sends in each direction (one per chunk); appends the
// step's row, the busiest stage's sends (an interior one's, or an edge's when pp = 2), and sets
// each stage's bytes sent per step.
double pp_send_time(const PlanInput& in, const Layout& l, int64_t microbatches,
                    const GroupPlacement& group, std::vector<GroupTraffic>* rows,
                    std::vector<double>* stage_bytes) {
  if (l.pp == 1) return 0;
  const ModelShape& m = in.model;
  const double bytes =
      pp_bytes_per_microbatch(l.micro_batch, m.seq / l.cp, m.hidden, in.training.activation_bytes,
                              l.tp, l.sequence_parallel);
  const PlacedCost send = placed_send_cost(bytes, group, in.cluster);
  int64_t busiest = 0;
  for (int stage = 0; stage < l.pp; ++stage) {
    const int64_t sends = pp_sends_per_microbatch(l.pp, l.vp, stage) * microbatches;
    stage_bytes->push_back(send.bytes_sent * static_cast<double>(sends));
    busiest = std::max(busiest, sends);
  }
  const double n = static_cast<double>(busiest);
  GroupTraffic row =
      traffic_row("PP", "send/recv", "activations and their gradients", group,
                  {busiest, send.bytes_sent * n, send.time_s * n, send.inter_node, false});
  row.calls = busiest;
  rows->push_back(row);
  return send.time_s * l.vp;
}

// The ring's overlap, per layer and micro-batch: a hop (one K/V block forward, K/V with dK/dV
// backward) runs while the rank computes attention against the block it already holds, so a
// hop shows only where it is longer than one block's compute (the attention products, softmax
// and dropout of the layer, over cp blocks); the last backward hop, the dK/dV going home, has
// no block left to hide behind.
struct RingTiming {
  double hop_forward_s = 0, block_forward_s = 0;
  double hop_backward_s = 0, block_backward_s = 0;
  double last_hop_s = 0;
  bool hidden() const {
    return hop_forward_s <= block_forward_s && hop_backward_s <= block_backward_s;
  }
  // Exposed seconds per layer and micro-batch (full recompute reruns the forward's hops).
  double forward_exposed(int cp) const {
    return (cp - 1) * std::max(0.0, hop_forward_s - block_forward_s);
  }
  double backward_exposed(int cp, Recompute r) const {
    return (cp - 1) * std::max(0.0, hop_backward_s - block_backward_s) + last_hop_s +
           (r == Recompute::full ? forward_exposed(cp) : 0);
  }
};

RingTiming ring_timing(const PlanInput& in, const Layout& l, const GroupPlacement& group) {
  RingTiming r;
  double attention_forward_s = 0, attention_backward_s = 0;
  for (const OpTime& op : layer_ops(clock_shape(in, l), in.cluster.gpu)) {
    if (op.op == "scores q k^t" || op.op == "softmax" || op.op == "attention dropout" ||
        op.op == "scores x v") {
      attention_forward_s += op.forward_s;
      attention_backward_s += op.backward_input_s;
    }
  }
  const double block = cp_kv_block_bytes(cp_shape(in, l));
  r.hop_forward_s = placed_send_cost(block, group, in.cluster).time_s;
  r.hop_backward_s = placed_send_cost(2 * block, group, in.cluster).time_s;
  r.last_hop_s = placed_send_cost(block, group, in.cluster).time_s;
  r.block_forward_s = attention_forward_s / l.cp;
  r.block_backward_s = attention_backward_s / l.cp;
  return r;
}

// A CP collective on the CP group: the all-to-all runs pairwise (the comm layer's algorithm over
// send/recv), the others as placed_collective_cost prices them.
PlacedCost placed_cp_cost(const CollectiveCall& call, const GroupPlacement& group,
                          const Cluster& c) {
  if (call.op != comm::CollectiveOp::all_to_all) return placed_collective_cost(call, group, c);
  const Link& link = group.crosses_nodes() ? c.inter_node : c.intra_node;
  const CommCost cost = collective_cost(call, comm::Algorithm::pairwise, group.size, link);
  return {cost.steps, cost.bytes_sent, cost.time_s, group.crosses_nodes(), false};
}

// Context parallelism's K/V traffic of one micro-batch through the stage, as exposed forward
// and backward seconds; appends the step's rows and fills plan->cp. Ring hops overlap block
// compute (RingTiming); the all-gather's and ulysses' collectives are waited for.
std::pair<double, double> cp_times(const PlanInput& in, const Layout& l, int64_t microbatches,
                                   const GroupPlacement& group, Plan* plan) {
  if (l.cp == 1) return {0, 0};
  const CpShape shape = cp_shape(in, l);
  const int64_t layers = most_stage_layers(in.model, l);
  const int64_t repeats = layers * microbatches;
  const double n = static_cast<double>(repeats);
  CpReport& report = plan->cp;
  report.layers = layers;
  report.algorithm = l.cp_algo;
  report.per_layer = cp_traffic_per_layer(shape, l.cp_algo, l.recompute);
  report.bytes_per_step = report.per_layer.bytes_sent() * n;
  report.imbalance_contiguous = causal_work_imbalance(in.model.seq, l.cp, CpSplit::contiguous);
  report.imbalance_balanced = in.model.seq % (2 * l.cp) == 0
                                  ? causal_work_imbalance(in.model.seq, l.cp, CpSplit::balanced)
                                  : report.imbalance_contiguous;
  double forward_s = 0, backward_s = 0, total_s = 0;
  if (l.cp_algo == CpAlgorithm::ring) {
    const RingTiming r = ring_timing(in, l, group);
    report.ring_hop_s = r.hop_forward_s;
    report.ring_block_s = r.block_forward_s;
    forward_s = r.forward_exposed(l.cp) * static_cast<double>(layers);
    backward_s = r.backward_exposed(l.cp, l.recompute) * static_cast<double>(layers);
    const CpPassTraffic& f = report.per_layer.forward;
    const CpPassTraffic& b = report.per_layer.backward;
    const double f_time = static_cast<double>(l.cp - 1) * r.hop_forward_s;
    const double b_time = static_cast<double>(l.cp - 1) * r.hop_backward_s + r.last_hop_s +
                          (l.recompute == Recompute::full ? f_time : 0);
    GroupTraffic fw = traffic_row(
        "CP", "send/recv", "K, V blocks (ring, forward)", group,
        {f.steps * repeats, f.bytes_sent * n, f_time * n, group.crosses_nodes(), false});
    fw.calls = f.messages * repeats;
    fw.exposed_s = forward_s * static_cast<double>(microbatches);
    GroupTraffic bw = traffic_row(
        "CP", "send/recv", "K, V + dK, dV (ring, backward)", group,
        {b.steps * repeats, b.bytes_sent * n, b_time * n, group.crosses_nodes(), false});
    bw.calls = b.messages * repeats;
    bw.exposed_s = backward_s * static_cast<double>(microbatches);
    total_s = fw.time_s + bw.time_s;
    plan->traffic.push_back(fw);
    plan->traffic.push_back(bw);
  } else {
    for (const CollectiveCall& call : cp_collectives_per_layer(shape, l.cp_algo, l.recompute)) {
      const PlacedCost per_layer = placed_cp_cost(call, group, in.cluster);
      (call.overlaps_forward ? forward_s : backward_s) +=
          per_layer.time_s * static_cast<double>(layers);
      GroupTraffic row =
          traffic_row("CP", comm::name(call.op), call.what, group,
                      {per_layer.steps * repeats, per_layer.bytes_sent * n, per_layer.time_s * n,
                       per_layer.inter_node, per_layer.hierarchical});
      row.calls = call.count * repeats;
      total_s += row.time_s;
      plan->traffic.push_back(row);
    }
  }
  plan->time.cp_s = (forward_s + backward_s) * static_cast<double>(microbatches);
  plan->time.cp_total_s = total_s;
  return {forward_s, backward_s};
}

GroupPlacement subgroup(const GroupPlacement& parent, int size, int step, int gpus_per_node);

// Expert parallelism's all-to-alls of one micro-batch through the busiest stage (the one with the
// most routed layers), as forward and backward seconds: per routed layer a dispatch and a combine
// forward, their gradients' combine- and dispatch-shaped all-to-alls backward (and the forward's
// again under full recompute), each priced pairwise (comm_model.h all_to_all_v_cost) on the
// busiest EP rank's bytes, on the intra-node link when the EP group fits a node. Nothing hides
// them: the experts wait for their tokens. Appends the step's rows and fills plan->moe.
std::pair<double, double> ep_times(const PlanInput& in, const Layout& l, int64_t microbatches,
                                   const GroupPlacement& dp_group, Plan* plan) {
  const ModelShape& m = in.model;
  MoeReport& r = plan->moe;
  r.enabled = m.moe.enabled();
  if (!r.enabled) return {0, 0};
  r.total_params = param_count(m);
  r.active_params = model_flops_param_count(m);
  r.ep = l.ep;
  r.expert_dp = l.dp * l.cp / l.ep;
  r.experts_per_rank = m.moe.experts / l.ep;
  for (int k = 0; k < l.pp; ++k) r.moe_layers = std::max(r.moe_layers, stage_moe_layers(m, l, k));
  if (l.ep == 1) return {0, 0};
  const MoeDispatch d = moe_dispatch(in, l);
  r.load_factor = expert_load_factor(d);
  r.busiest_rank = busiest_ep_rank(d);
  r.dispatch = dispatch_bytes(d, r.busiest_rank);
  r.combine = combine_bytes(d, r.busiest_rank);
  const GroupPlacement group = subgroup(dp_group, l.ep, 1, in.cluster.gpus_per_node);
  r.inter_node = group.crosses_nodes();
  const Link& link = r.inter_node ? in.cluster.inter_node : in.cluster.intra_node;
  const CommCost dispatch = all_to_all_v_cost(comm::Algorithm::pairwise, r.dispatch.sent,
                                              r.dispatch.received, r.busiest_rank, link);
  const CommCost combine = all_to_all_v_cost(comm::Algorithm::pairwise, r.combine.sent,
                                             r.combine.received, r.busiest_rank, link);
  // The forward's exchanges, run again in the backward under full recompute.
  const double forward_calls = ep_forward_exchanges(l.recompute);
  const double layers = static_cast<double>(r.moe_layers), mb = static_cast<double>(microbatches);
  r.bytes_per_layer = (1 + forward_calls) * (r.dispatch.sent_total() + r.combine.sent_total());
  r.bytes_per_step = r.bytes_per_layer * layers * mb;
  const double pair_s = dispatch.time_s + combine.time_s;
  const double forward_s = layers * pair_s, backward_s = layers * forward_calls * pair_s;
  const double calls = (1 + forward_calls) * layers * mb;  // of each shape
  const std::pair<const char*, const CommCost*> shapes[] = {
      {"dispatch fwd + combine's grad", &dispatch}, {"combine fwd + dispatch's grad", &combine}};
  for (const auto& [what, cost] : shapes) {
    const MoeA2aRank& bytes = cost == &dispatch ? r.dispatch : r.combine;
    GroupTraffic row =
        traffic_row("EP", "all_to_all_v", what, group,
                    {static_cast<int64_t>(cost->steps * calls), bytes.sent_total() * calls,
                     cost->time_s * calls, r.inter_node, false});
    row.calls = static_cast<int64_t>(calls);
    plan->traffic.push_back(row);
  }
  plan->time.ep_s = (forward_s + backward_s) * mb;
  return {forward_s, backward_s};
}

// DP and ZeRO collectives of the step over the largest stage's parameters, and what overlap
// leaves of them: gradient reductions hide behind backward compute (the last micro-batch's for
// ZeRO 0-1, every one for ZeRO 2-3), weight gathers behind forward compute (the next step's
// first micro-batch for ZeRO 1-2, every one for ZeRO 3). Sets t.dp_s and t.dp_exposed_s.
// The ranks `size` members of `parent` apart by `step` members each (parent member k x step for
// k < size), as rank 0's group sees them: the EP group (step 1, size ep) and the expert-data-
// parallel group (step ep, size dp / ep) inside a DP group.
GroupPlacement subgroup(const GroupPlacement& parent, int size, int step, int gpus_per_node) {
  GroupPlacement g;
  g.size = size;
  g.stride = parent.stride * step;
  int nodes = 0, on_node = 0, most = 0;
  int64_t last_node = -1;
  for (int k = 0; k < size; ++k) {
    const int64_t node = static_cast<int64_t>(k) * g.stride / gpus_per_node;
    if (node != last_node) {
      ++nodes;
      on_node = 0;
      last_node = node;
    }
    most = std::max(most, ++on_node);
  }
  g.nodes = std::max(1, nodes);
  g.ranks_per_node = std::max(1, most);
  return g;
}

void dp_times(const PlanInput& in, const Layout& l, int64_t microbatches, const StageCompute& sc,
              const GroupPlacement& group, std::vector<GroupTraffic>* rows, TimeBreakdown* t) {
  if (l.dp * l.cp == 1) return;  // gradients are reduced over DP x CP
  const ModelShape& m = in.model;
  const StateBytes sb = in.training.state_bytes;
  const int largest = largest_stage(in, l);
  // With EP the routed experts reduce over the expert-data-parallel group (none when ep = dp).
  const int64_t expert_params = l.ep > 1 ? stage_expert_params(m, l, largest) : 0;
  const int64_t params = stage_params_of(in, l, largest) - expert_params;
  const double grad_bytes = static_cast<double>(params * sb.grad);
  const int64_t pieces =
      engine_split(in) ? engine_dp_pieces(in, l, largest)
      : l.zero_stage == 3
          ? stage_layer_count(m, l, largest)
          : std::max<int64_t>(
                1, static_cast<int64_t>(std::ceil(grad_bytes / in.training.bucket_bytes)));
  const double mb = static_cast<double>(microbatches);
  const double backward_one = sc.backward_s;
  Phase forward, backward;
  forward.window_s = l.zero_stage == 3 ? mb * sc.forward_s : sc.forward_s;
  backward.window_s = l.zero_stage >= 2 ? mb * backward_one : backward_one;
  const size_t first = rows->size();
  std::vector<bool> in_forward;
  struct Reduced {
    std::vector<CollectiveCall> calls;
    GroupPlacement group;
    std::string_view dp_name, zero_name;
  };
  std::vector<Reduced> sets;
  sets.push_back({dp_collectives(params, l.zero_stage, sb, static_cast<int>(microbatches), pieces,
                                 engine_split(in) ? 1 : 0),
                  group, "DP", "ZeRO"});
  if (expert_params > 0 && l.dp / l.ep > 1) {
    const int64_t expert_pieces =
        l.zero_stage == 3
            ? stage_moe_layers(m, l, largest)
            : std::max<int64_t>(
                  1, static_cast<int64_t>(std::ceil(static_cast<double>(expert_params * sb.grad) /
                                                    in.training.bucket_bytes)));
    sets.push_back({dp_collectives(expert_params, l.zero_stage, sb, static_cast<int>(microbatches),
                                   std::max<int64_t>(1, expert_pieces)),
                    subgroup(group, l.dp / l.ep, l.ep, in.cluster.gpus_per_node), "EDP", "EDP"});
  }
  for (const Reduced& set : sets)
    for (CollectiveCall call : set.calls) {
      if (set.dp_name == "EDP")
        call.what =
            call.op == comm::CollectiveOp::all_gather ? "expert weights" : "expert gradients";
      const PlacedCost cost = placed_collective_cost(call, set.group, in.cluster);
      Phase& phase = call.overlaps_forward ? forward : backward;
      phase.time_s += cost.time_s;
      phase.min_exposed_s =
          std::max(phase.min_exposed_s, cost.time_s / static_cast<double>(call.count));
      in_forward.push_back(call.overlaps_forward);
      GroupTraffic row =
          traffic_row(call.op == comm::CollectiveOp::all_gather ? set.zero_name : set.dp_name,
                      comm::name(call.op), call.what, set.group, cost);
      row.calls = call.count;
      rows->push_back(row);
      t->dp_s += cost.time_s;
    }
  // Each phase's exposed time is shared among its calls in proportion to their time.
  for (size_t i = first; i < rows->size(); ++i) {
    GroupTraffic& row = (*rows)[i];
    const Phase& phase = in_forward[i - first] ? forward : backward;
    row.exposed_s = phase.time_s > 0 ? phase.exposed() * row.time_s / phase.time_s : 0;
  }
  t->dp_exposed_s = forward.exposed() + backward.exposed();
}

// On a cluster file with measured CPU rates: dtrain's own engine priced by engine_clock.h, on
// the layout's busiest stage and its DP pieces as the engine cuts them (engine_dp_pieces). Each
// rank runs --threads compute threads (the engine's own default, 1). Replaces the GPU clock's
// step figures.
void engine_clock_times(const PlanInput& in, const Layout& l, int64_t microbatches,
                        TimeBreakdown* t) {
  const Cluster& c = in.cluster;
  EngineClockInput e;
  e.model = in.model;
  e.dp = l.dp;
  e.tp = l.tp;
  e.pp = l.pp;
  e.chunks = l.vp;
  e.zero_stage = l.zero_stage;
  e.sequence_parallel = l.sequence_parallel;
  e.recompute = l.recompute;
  e.schedule = l.schedule;
  e.micro_batch = l.micro_batch;
  e.microbatches = static_cast<int>(microbatches);
  e.precision = in.training.activation_bytes >= 4 ? Precision::fp32 : Precision::bf16;
  e.threads = std::max(1, in.training.engine_threads);
  e.cp = l.cp;
  e.cp_algorithm = l.cp_algo;  // resolved (resolve_cp) before the layout is evaluated
  e.ep = l.ep;
  e.tokens_per_expert = in.training.tokens_per_expert;
  const int largest = largest_stage(in, l);
  e.stage_params = stage_params_of(in, l, largest);
  if (l.ep > 1) {
    const int64_t layers = in.model.layers / l.pp;
    e.stage_expert_params =
        scaled_to_override(in.model, moe_layers_in(in.model, largest * layers, layers) *
                                         engine_moe_expert_param_count(in.model, l.ep));
  }
  e.dp_pieces = engine_dp_pieces(in, l, largest);
  const AxisSizes sizes{l.dp, l.tp, l.pp, l.cp};
  // The gradients are reduced over the DP x CP group (the parameters' replicas).
  const auto dp_group = l.cp > 1 ? place_data_group(sizes, l.order, c.gpus_per_node)
                                 : place_group(Axis::dp, sizes, l.order, c.gpus_per_node);
  e.inter_node_dp = dp_group.nodes > 1;
  e.dp_ranks_per_node = dp_group.ranks_per_node;
  e.inter_node_tp = place_group(Axis::tp, sizes, l.order, c.gpus_per_node).nodes > 1;
  e.inter_node_pp = place_group(Axis::pp, sizes, l.order, c.gpus_per_node).nodes > 1;
  e.inter_node_cp = place_group(Axis::cp, sizes, l.order, c.gpus_per_node).nodes > 1;
  // The engine's automatic choice: direct where the DP group shares memory (one node).
  e.dp_algorithm = e.inter_node_dp ? comm::Algorithm::ring : comm::Algorithm::direct;
  const EngineClock clock = engine_clock(e, c);
  const double mb = static_cast<double>(microbatches);
  StageTimes times;
  times.forward = clock.stage.forward_s + clock.tp_forward_s + clock.send_s;
  times.backward_input = clock.stage.backward_input_s + clock.tp_backward_s + clock.send_s;
  times.backward_weight = clock.stage.backward_weight_s;
  t->stage_times = times;
  t->bubble = clock.bubble;  // the simulated schedule (engine_clock.h)
  // CP's and EP's exchanges run inside the engine's forward and backward: their own rows.
  t->cp_s = clock.cp_s;
  t->cp_total_s = clock.cp_total_s;
  t->ep_s = clock.ep_s;
  t->compute_s = clock.phases.forward_s + clock.phases.backward_s - clock.cp_s - clock.ep_s;
  t->recompute_s = mb * clock.stage.recompute_s;
  t->tp_s = clock.phases.tp_comm_s;
  t->pp_s = clock.pipeline_sends_s;
  t->bubble_s = clock.bubble.bubble_time;
  t->dp_s = clock.dp_comm_s;
  t->dp_exposed_s = clock.phases.exposed_dp_s;
  t->optimizer_s = clock.phases.optimizer_s;
  t->step_s = clock.phases.step_s;
  t->step_no_overlap_s = t->step_s - t->dp_exposed_s + t->dp_s;
  t->clock = "engine (measured rates)";
  t->stretch = clock.stretch;
  t->threads = e.threads;
}

// How evaluate_local times the pipeline: the schedule replayed (evaluate), or a lower bound on
// its makespan (evaluate_lower_bound, what search ranks by before it replays).
enum class PipelineTiming { simulated, lower_bound };

// evaluate on the per-rank shape `in.model`; `real_model` gives the model FLOPs.
Plan evaluate_local(const PlanInput& given, const ModelShape& real_model, const Layout& l,
                    PipelineTiming timing) {
  // Collectives are priced at the share of the links' bandwidth they reach (rates.h).
  PlanInput in = given;
  in.cluster = effective_links(given.cluster);
  const Cluster& c = in.cluster;
  Plan plan;
  plan.layout = l;
  const int64_t microbatches =
      in.training.global_batch / (static_cast<int64_t>(l.dp) * l.micro_batch);
  plan.microbatches = microbatches;
  const double mb = static_cast<double>(microbatches);

  // Memory: the first and the last stage differ (embeddings, head, in-flight micro-batches), and
  // with unequal stages every stage holds its own layers.
  plan.stage_layers = pipeline_stage_layers(in.model, l);
  plan.memory = memory_of_stage(in, l, microbatches, 0);
  for (int stage : heaviest_stage_candidates(in.model, l)) {
    if (stage == 0) continue;
    MemoryBreakdown other = memory_of_stage(in, l, microbatches, stage);
    if (other.total() > plan.memory.total()) plan.memory = other;
  }

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
  const StageCompute sc = stage_compute(in, real_model, l, comm);

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
// the clock) when it is automatic; `why` says why.
Layout resolve_cp(const PlanInput& in, const Layout& given, std::string* why) {
  Layout l = given;
  if (l.cp == 1) return l;
  if (l.cp_algo != CpAlgorithm::automatic) {
    *why = str(name(l.cp_algo), ": given by --cp-algo");
    return l;
  }
  bool hidden = false;
  const CpShape shape = cp_shape(in, l);
  if (cp_layout_error(shape, CpAlgorithm::ring).empty()) {
    const AxisSizes sizes{l.dp, l.tp, l.pp, l.cp};
    const Cluster links = effective_links(in.cluster);
    PlanInput priced = in;
    priced.cluster = links;
    hidden =
        ring_timing(priced, l, place_group(Axis::cp, sizes, l.order, links.gpus_per_node)).hidden();
  }
  const CpChoice choice = choose_cp_algorithm(shape, l.recompute, hidden);
  l.cp_algo = choice.algorithm;
  *why = choice.why;
  return l;
}

}  // namespace

MemoryBreakdown stage_memory(const PlanInput& in, const Layout& given, int stage) {
  const std::string error = layout_error(in, given);
  if (!error.empty()) throw Error(error);
  std::string why;
  const Layout l = resolve_cp(in, given, &why);
  DTRAIN_CHECK(stage >= 0 && stage < l.pp, "stage ", stage, " outside 0..", l.pp - 1);
  const int64_t microbatches =
      in.training.global_batch / (static_cast<int64_t>(l.dp) * l.micro_batch);
  if (in.model.kv_heads_or_heads() >= l.tp) return memory_of_stage(in, l, microbatches, stage);
  return memory_of_stage(per_rank_input(in, l), l, microbatches, stage);
}

namespace {

Plan evaluate_timed(const PlanInput& in, const Layout& given, PipelineTiming timing) {
  const std::string error = layout_error(in, given);
  if (!error.empty()) throw Error(error);
  std::string why;
  const Layout l = resolve_cp(in, given, &why);
  Plan p = in.model.kv_heads_or_heads() >= l.tp
               ? evaluate_local(in, in.model, l, timing)
               : evaluate_local(per_rank_input(in, l), in.model, l, timing);
  p.cp.why = why;
  return p;
}

}  // namespace

Plan evaluate(const PlanInput& in, const Layout& given) {
  return evaluate_timed(in, given, PipelineTiming::simulated);
}

Plan evaluate_lower_bound(const PlanInput& in, const Layout& given) {
  return evaluate_timed(in, given, PipelineTiming::lower_bound);
}

}  // namespace dtrain::plan
