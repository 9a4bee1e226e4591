// The GPT model's shape: vocabulary, context, layers, heads, channels; the named presets
// (`tiny`, `bench`) and the validation whose errors name the command-line flag at fault.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/model/moe_config.h"

namespace dtrain::model {

// The block's family: GPT-2's (LayerNorm with biases, a GELU MLP of 4C, learned positions, tied
// embeddings) or Llama's (RMSNorm, a SwiGLU MLP of F, rotary positions, grouped-query attention,
// no biases, an untied output head unless tied).
enum class ModelFamily { gpt, llama };
std::string_view name(ModelFamily family);  // "gpt", "llama"

struct GptConfig {
  int64_t vocab = 0;     // V
  int64_t context = 0;   // maximum sequence length (rows of wpe)
  int64_t layers = 0;    // L
  int64_t heads = 0;     // NH
  int64_t channels = 0;  // C
  MoeConfig moe;         // dense unless moe.experts > 0
  // Llama (family llama; the GPT family ignores these): K/V heads (0: heads), the SwiGLU width
  // F (0: 4C), RoPE's theta, RMSNorm's eps, and whether the output head is the word embedding.
  ModelFamily family = ModelFamily::gpt;
  int64_t kv_heads = 0;
  int64_t ffn_hidden = 0;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  bool tie_embeddings = false;
  int64_t head_size() const { return channels / heads; }  // HS
  bool llama() const { return family == ModelFamily::llama; }
  int64_t kv_heads_or_heads() const { return llama() && kv_heads > 0 ? kv_heads : heads; }
  // The MLP's hidden width: GPT's 4C, Llama's F.
  int64_t ffn() const { return llama() && ffn_hidden > 0 ? ffn_hidden : 4 * channels; }
  // The output head reads the word embedding (GPT always; Llama with tie_embeddings).
  bool tied_head() const { return !llama() || tie_embeddings; }
  // Tensor parallelism over the K/V heads: a TP rank holds kv / tp of them when tp divides kv;
  // with more TP ranks than K/V heads (tp a multiple of kv) each holds a copy of one, rank r
  // head r / (tp / kv), and the tp / kv ranks sharing a head sum its weight gradient.
  int64_t kv_heads_per_tp_rank(int tp) const {
    return kv_heads_or_heads() >= tp ? kv_heads_or_heads() / tp : 1;
  }
  int kv_head_copies(int tp) const {  // ranks holding each K/V head: 1, or tp / kv
    return kv_heads_or_heads() >= tp ? 1 : tp / static_cast<int>(kv_heads_or_heads());
  }
  bool operator==(const GptConfig&) const = default;
};

// A named model with the micro-batch it is usually run at.
struct GptPreset {
  std::string name;
  GptConfig config;
  int64_t batch = 0;  // B
  std::string description;
};

// All presets, in a stable order: tiny, bench.
const std::vector<GptPreset>& gpt_presets();
// The preset called `name`; throws Error naming --model and the known names otherwise.
const GptPreset& gpt_preset(std::string_view name);

// Throws Error naming the flag (--vocab, --context, --layers, --heads, --hidden) when a size
// is not positive or --heads does not divide --hidden (and the MoE flags, moe_config.h).
void validate(const GptConfig& config);

// Parameter count of the model (embeddings tied with the LM head, biases and LayerNorms
// included): V*C + T*C + L*(12*C*C + 13*C) + 2*C; an MoE block's MLP (8*C*C + 5*C) becomes
// E of them plus the router (E*C).
int64_t gpt_param_count(const GptConfig& config);

std::string describe(
    const GptConfig& config);  // "V=512 T=64 L=4 NH=4 C=128" (+ " E=8 k=2 every=2")

}  // namespace dtrain::model
