// The shape of the model the planner sizes: layers, hidden size, heads, FFN size, vocabulary,
// sequence; its parameter count from that shape; and the named presets (GPT-3, Llama 2, the
// Megatron-LM 2021 family), each with the paper or model card it comes from.
//
// Parameter counts (h = hidden, l = layers, V = vocabulary, s = sequence, f = FFN size):
//   GPT (Megatron): per layer 12h^2 + 13h (QKV and projection with biases, two-matrix GELU MLP
//     with f = 4h, two LayerNorms), embeddings (V + s)h, tied LM head. Summed, this is
//     Narayanan et al. 2021 Eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)). Like Eq. 2 it
//     leaves out the final LayerNorm (2h); the engine's model/ count includes it, and so does
//     ModelShape::count_final_norm (the head then holds those 2h).
//   Llama: per layer 2h^2 + 2h*kv*d (Q, O and grouped K, V; d = h/heads), 3hf (SwiGLU), 2h
//     (RMSNorm); embeddings Vh; untied output head Vh; final RMSNorm h. No biases.
//   Mixture of experts (moe.h): the routed layers' MLP is a router and E + S expert MLPs; with
//     multi-head latent attention (MlaShape) the attention's weights are MLA's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/cost/moe.h"

namespace dtrain::plan {

// Bounds on a model's shape, far past any published model: within them every parameter count
// stays inside int64 (a Llama layer of h = 1e6, f = 4e6 is 1.6e13 parameters; 1e5 of them
// 1.6e18), and kMaxParams keeps bytes = parameters x 18 (Megatron's precision) inside it too.
inline constexpr int64_t kMaxLayers = 100000;
inline constexpr int64_t kMaxHidden = 1000000;
inline constexpr int64_t kMaxFfnHidden = 4 * kMaxHidden;
inline constexpr int64_t kMaxVocab = 100000000;
inline constexpr int64_t kMaxSeq = 10000000;
inline constexpr double kMaxParams = 1e17;
inline constexpr int64_t kMaxExperts = 100000;

enum class ModelFamily { gpt, llama };
std::string_view name(ModelFamily family);  // "gpt", "llama"

struct ModelShape {
  std::string name;  // preset name, or "custom"
  ModelFamily family = ModelFamily::gpt;
  int64_t layers = 0;      // l (L)
  int64_t hidden = 0;      // h (C)
  int64_t heads = 0;       // a (NH)
  int64_t kv_heads = 0;    // key/value heads (grouped-query attention); 0 means `heads`
  int64_t ffn_hidden = 0;  // f; 0 means 4h
  int64_t vocab = 0;       // V
  int64_t seq = 0;         // s: the sequence length it trains at
  // When > 0, the parameter count to use instead of the one computed from the shape.
  int64_t params_override = 0;
  // GPT: also count the final LayerNorm's 2h parameters, which Eq. 2 leaves out (dtrain's engine
  // has them; Llama's final norm is always counted). Off for the presets, as the paper counts.
  bool count_final_norm = false;
  // What the preset was trained with, for defaults (0 when unknown).
  int64_t default_global_batch = 0;  // sequences per step
  double default_tokens = 0;         // tokens to train
  std::string source;                // where the shape comes from
  // Appended: mixture of experts (experts = 0: dense) and multi-head latent attention (moe.h).
  MoeShape moe;
  MlaShape mla;

  int64_t kv_heads_or_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t ffn_or_default() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
};

// Parameters of one dense transformer layer (weights, biases and norms); a routed layer's are
// moe_layer_param_count (moe.h).
int64_t layer_param_count(const ModelShape& m);
// The attention's matrix-multiply weights (QKV and projection, or MLA's: moe.h).
int64_t attention_matmul_param_count(const ModelShape& m);
// Weights of the dense layer's matrix multiplies only (what costs 2 FLOPs per token each).
int64_t layer_matmul_param_count(const ModelShape& m);
// Input embeddings: word (V h), plus learned positions (s h) for GPT.
int64_t embedding_param_count(const ModelShape& m);
// Output side: Llama's untied head (V h) and final norm (h); 0 for GPT (tied head, and Eq. 2
// leaves out the final LayerNorm), or the final LayerNorm's 2h with count_final_norm.
int64_t head_param_count(const ModelShape& m);
// Dense and routed layers of the shape (moe.h: moe_layer_count).
int64_t dense_layer_count(const ModelShape& m);
// The whole model from its shape (Eq. 2 for GPT), ignoring params_override: dense layers x
// layer_param_count + routed layers x moe_layer_param_count + embeddings + head.
int64_t shape_param_count(const ModelShape& m);
// A part of the shape's parameters (`count` of shape_param_count) as the same share of
// params_override when that is set (llround), else `count`.
int64_t scaled_to_override(const ModelShape& m, int64_t count);
// params_override when set, else shape_param_count.
int64_t param_count(const ModelShape& m);

// Throws Error naming the flag (--layers, --hidden, --heads, --kv-heads, --ffn-hidden, --vocab,
// --seq-length, --params) when a size is not positive or past its bound above, or heads do not
// divide evenly.
void validate(const ModelShape& m);

// All presets, in a stable order.
const std::vector<ModelShape>& model_presets();
// The preset called `name` (case-insensitive); throws Error naming --model and the known names.
const ModelShape& model_preset(std::string_view name);

}  // namespace dtrain::plan
