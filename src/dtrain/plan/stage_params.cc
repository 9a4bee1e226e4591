// The planner's stage split and per-stage parameter counts: how many blocks and routed layers
// each pipeline stage holds, its parameters on one TP rank (the paper's form or the engine's own
// cut), the engine's gradient buckets, and the stage holding the most.
#include "dtrain/plan/planner_internal.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/clock/engine_clock.h"
#include "dtrain/core/check.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/cost/pipeline_model.h"
#include "dtrain/cost/pipeline_stages.h"
#include "dtrain/plan/planner.h"

namespace dtrain::plan {
namespace detail {
namespace {

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

}  // namespace

// Blocks on pipeline stage `stage`, all its chunks.
int64_t stage_layer_count(const ModelShape& m, const Layout& l, int stage) {
  if (l.stage_layers.empty()) return balanced_stage_layers(m.layers, l.pp, l.vp, stage);
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
  if (l.stage_layers.empty()) return balanced_most_stage_layers(m.layers, l.pp, l.vp);
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

namespace {

// Parameters of pipeline stage `stage` on one TP rank: its layers, plus the input embeddings on
// the first stage and the output head on the last (GPT ties the head to the embedding, so with
// pp > 1 the last stage keeps its own copy of the word embedding, as Megatron-LM does).
// With --params (ModelShape::params_override) the count is the shape's scaled to that total:
// --params sets every parameter-count figure (state memory, DP and ZeRO traffic, 6ND), the shape
// how they split over the stages and TP ranks, and the activations and Eq. 3's FLOPs.
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

}  // namespace

// The engine's embeddings unit of stage `stage` on one TP rank (0 on the stages between): wte's
// rows of the padded vocabulary and wpe whole on the first, the tied wte's copy on the last of a
// pipeline.
int64_t engine_embedding_params(const ModelShape& m, const Layout& l, int stage) {
  const int64_t wte_rows = (m.vocab + l.tp - 1) / l.tp * m.hidden;
  // Llama: rotary positions (no wpe), and the untied head is the last stage's head unit.
  if (m.family == ModelFamily::llama) return stage == 0 ? wte_rows : 0;
  if (stage == 0) return wte_rows + m.seq * m.hidden;
  return stage == l.pp - 1 ? wte_rows : 0;
}

int64_t engine_head_param_count(const ModelShape& m, const Layout& l) {
  // Llama's final RMSNorm and its untied head, the vocabulary padded and split over TP as wte.
  if (m.family == ModelFamily::llama) return (m.vocab + l.tp - 1) / l.tp * m.hidden + m.hidden;
  return head_param_count(m);
}

namespace {

// One block as the engine cuts it: a routed block holds the router and its E / ep experts, each
// cut over TP (engine_clock.h's engine_moe_layer_param_count), a dense one its TP share.
int64_t engine_block_param_count(const ModelShape& m, const Layout& l, int64_t layer) {
  return is_moe_layer(m, layer) ? engine_moe_layer_param_count(m, l.ep, l.tp)
                                : engine_layer_param_count(m, l.tp);
}

// The engine's own split of a GPT stage over TP (ActivationCount::engine and engine_mixed):
// engine_clock.h's engine_layer_param_count per block; the word embedding (its vocabulary padded
// to a multiple of tp) split; wpe and the final LayerNorm whole on every rank. The paper's form
// (stage_param_count) gives every rank ceil(1/tp) of everything.
int64_t engine_stage_param_count(const ModelShape& m, const Layout& l, int stage) {
  int64_t params = 0;
  for (int c = 0; c < l.vp; ++c) {
    const int64_t first = chunk_first_layer(m, l, stage, c);
    for (int64_t i = first; i < first + chunk_layer_count(m, l, stage, c); ++i) {
      params += engine_block_param_count(m, l, i);
    }
  }
  params += engine_embedding_params(m, l, stage);
  if (stage == l.pp - 1) params += engine_head_param_count(m, l);  // the final norm (and head)
  return scaled_to_override(m, params);
}

}  // namespace

// The engine's gradient buckets of pipeline stage `stage` (parallel/data_parallel.h): its units
// in backward order (the final LayerNorm on the last stage, its blocks, the embeddings), a bucket
// closed as soon as it holds bucket_bytes; under a pipeline the end stages' embeddings (the tied
// wte) are a bucket of their own; ZeRO-3 syncs unit by unit. The engine sizes buckets at 4 bytes
// per element whatever the precision (parallel::make_buckets' default).
int64_t engine_dp_pieces(const PlanInput& in, const Layout& l, int stage) {
  const ModelShape& m = in.model;
  std::vector<int64_t> units;
  if (stage == l.pp - 1) units.push_back(engine_head_param_count(m, l));
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
  // The engine trains GPT and Llama blocks (Mixtral's experts too), not MLA, shared experts or
  // experts narrower than the dense MLP.
  const ModelShape& m = in.model;
  return in.training.activation_count != ActivationCount::paper && !m.mla.enabled() &&
         m.moe.shared_experts == 0 &&
         (m.moe.expert_ffn == 0 || m.moe.expert_ffn == m.ffn_or_default());
}

int64_t stage_params_of(const PlanInput& in, const Layout& l, int stage) {
  return engine_split(in) ? engine_stage_param_count(in.model, l, stage)
                          : stage_param_count(in.model, l, stage);
}

StageBlocks stage_blocks(const PlanInput& in, const Layout& l, int stage) {
  StageBlocks b;
  b.layers = stage_layer_count(in.model, l, stage);
  b.routed = stage_moe_layers(in.model, l, stage);
  b.params = stage_params_of(in, l, stage);
  b.expert_params = stage_expert_params(in.model, l, stage);
  return b;
}

// The stage holding the most parameters on one TP rank (the first of equals).
int largest_stage(const PlanInput& in, const Layout& l) {
  int largest = 0;
  int64_t most = stage_params_of(in, l, 0);
  // An interior stage's parameters depend on it only through its blocks and routed blocks (the
  // engine's split aside): one alike to an earlier interior stage cannot hold more.
  const bool share_alike = !engine_split(in) && l.stage_layers.empty();
  const std::vector<int64_t> layers =
      share_alike ? pipeline_stage_layers(in.model, l) : std::vector<int64_t>{};
  std::vector<std::pair<int64_t, int64_t>> seen;
  for (int k : heaviest_stage_candidates(in.model, l)) {
    if (share_alike && k != 0 && k != l.pp - 1) {
      const std::pair<int64_t, int64_t> kind{layers[static_cast<size_t>(k)],
                                             stage_moe_layers(in.model, l, k)};
      if (std::find(seen.begin(), seen.end(), kind) != seen.end()) continue;
      seen.push_back(kind);
    }
    const int64_t params = k == 0 ? most : stage_params_of(in, l, k);
    if (params > most) {
      most = params;
      largest = k;
    }
  }
  return largest;
}

}  // namespace detail

std::optional<EngineRank> engine_rank_of(const PlanInput& in, const Layout& l, int64_t microbatches,
                                         int stage) {
  const ModelShape& m = in.model;
  if (!detail::engine_split(in) || m.params_override > 0) return std::nullopt;
  EngineRank r;
  r.hidden = m.hidden;
  r.heads = m.heads;
  r.llama = m.family == ModelFamily::llama;
  r.kv_heads = m.kv_heads_or_heads();
  r.ffn = m.ffn_or_default();
  r.vocab_local = (m.vocab + l.tp - 1) / l.tp;
  r.seq = m.seq;
  r.dp = l.dp;
  r.tp = l.tp;
  r.pp = l.pp;
  r.cp = l.cp;
  r.ep = l.ep;
  r.zero_stage = l.zero_stage;
  r.sequence_parallel = l.sequence_parallel && l.tp > 1;
  r.recompute = l.recompute;
  r.mixed_precision = in.training.activation_count == ActivationCount::engine_mixed;
  r.cp_algorithm = l.cp_algo;
  r.threads = std::max(1, in.training.engine_threads);
  r.micro_batch = l.micro_batch;
  r.microbatches = static_cast<int>(microbatches);
  r.bucket_bytes = static_cast<int64_t>(std::ceil(in.training.bucket_bytes));
  std::vector<int> chunk_layers;
  for (int c = 0; c < l.vp; ++c) {
    for (int k = 0; k < l.pp; ++k) {
      chunk_layers.push_back(static_cast<int>(detail::chunk_layer_count(m, l, k, c)));
    }
  }
  r.partition = StagePartition(l.pp, l.vp, chunk_layers);
  r.stage = stage;
  r.routed_blocks = detail::stage_moe_layers(m, l, stage);
  // The stage's units as the engine lists them: the final LayerNorm with the head, the blocks
  // from the last to the first, then the embeddings.
  StageParamCounts& p = r.params;
  if (stage == l.pp - 1) p.final_norm = detail::engine_head_param_count(m, l);
  if (p.final_norm > 0) p.units.push_back(p.final_norm);
  for (int c = l.vp - 1; c >= 0; --c) {
    const int64_t first = detail::chunk_first_layer(m, l, stage, c);
    for (int64_t i = first + detail::chunk_layer_count(m, l, stage, c) - 1; i >= first; --i) {
      const int64_t block = detail::engine_block_param_count(m, l, i);
      p.units.push_back(block);
      p.block = std::max(p.block, block);
      if (l.ep > 1 && is_moe_layer(m, i)) {
        p.experts += engine_moe_expert_param_count(m, l.ep, l.tp);
      }
    }
  }
  p.embeddings = detail::engine_embedding_params(m, l, stage);
  p.params = p.embeddings;
  for (const int64_t n : p.units) p.params += n;
  const ScheduleKind kind = l.vp > 1 ? ScheduleKind::interleaved : l.schedule;
  r.split_backward = kind == ScheduleKind::zero_bubble_h1;
  r.inflight = r.split_backward
                   ? peak_weight_stash_microbatches(kind, l.pp, r.microbatches, l.vp, stage)
                   : peak_inflight_microbatches(kind, l.pp, r.microbatches, l.vp, stage);
  return r;
}

std::vector<int64_t> pipeline_stage_layers(const ModelShape& m, const Layout& l) {
  if (l.stage_layers.empty() && l.pp >= 1) return balanced_stage_layer_counts(m.layers, l.pp, l.vp);
  std::vector<int64_t> layers(static_cast<size_t>(std::max(1, l.pp)));
  for (int k = 0; k < l.pp; ++k)
    layers[static_cast<size_t>(k)] = detail::stage_layer_count(m, l, k);
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

}  // namespace dtrain::plan
