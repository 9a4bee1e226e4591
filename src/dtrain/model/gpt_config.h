// The GPT model's shape: vocabulary, context, layers, heads, channels; the named presets
// (`tiny`, `bench`) and the validation whose errors name the command-line flag at fault.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/model/moe_config.h"

namespace dtrain::model {

struct GptConfig {
  int64_t vocab = 0;                                      // V
  int64_t context = 0;                                    // maximum sequence length (rows of wpe)
  int64_t layers = 0;                                     // L
  int64_t heads = 0;                                      // NH
  int64_t channels = 0;                                   // C
  MoeConfig moe;                                          // dense unless moe.experts > 0
  int64_t head_size() const { return channels / heads; }  // HS
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
