// Presets and validation of GptConfig.
#include "dtrain/model/gpt_config.h"

#include "dtrain/core/check.h"

namespace dtrain::model {

const std::vector<GptPreset>& gpt_presets() {
  static const std::vector<GptPreset> presets = {
      {"tiny",
       {.vocab = 256, .context = 32, .layers = 2, .heads = 4, .channels = 32},
       8,
       "byte vocabulary, 2 layers of 32 channels: trains in seconds, even as 8 ranks on 2 cores"},
      {"bench",
       {.vocab = 512, .context = 64, .layers = 4, .heads = 4, .channels = 128},
       8,
       "the shape of the PyTorch peer (bench/peers/torch_gpt_step.py): 867,072 parameters"},
      {"wide",
       {.vocab = 512, .context = 128, .layers = 4, .heads = 8, .channels = 512},
       4,
       "4 layers of 512 channels: a step spent mostly in GEMMs (12.9M parameters)"},
      {"llama-tiny",
       {.vocab = 256,
        .context = 64,
        .layers = 2,
        .heads = 4,
        .channels = 64,
        .family = ModelFamily::llama,
        .kv_heads = 2,
        .ffn_hidden = 176},
       8,
       "a Llama block (RMSNorm, SwiGLU, RoPE, 2 K/V heads for 4 query heads, untied head): "
       "trains in seconds"},
      {"llama-small",
       {.vocab = 256,
        .context = 128,
        .layers = 4,
        .heads = 8,
        .channels = 256,
        .family = ModelFamily::llama,
        .kv_heads = 2,
        .ffn_hidden = 704,
        .rope_theta = 500000.0f},
       8,
       "Llama 3's shape at 3.0M parameters: 8 query heads sharing 2 K/V heads, SwiGLU of "
       "about 8/3 C, theta 500000, untied head"},
      {"mixtral-small",
       {.vocab = 256,
        .context = 128,
        .layers = 4,
        .heads = 8,
        .channels = 128,
        .moe = {.experts = 8, .top_k = 2},
        .family = ModelFamily::llama,
        .kv_heads = 2,
        .ffn_hidden = 448,
        .rope_theta = 1000000.0f},
       8,
       "Mixtral 8x7B's shape at 5.7M parameters (1.6M active a token): every block routes to 2 of "
       "8 SwiGLU experts of 3.5 C, 8 query heads on 2 K/V heads, theta 1e6, untied head"},
  };
  return presets;
}

const GptPreset& gpt_preset(std::string_view name) {
  std::string known;
  for (const GptPreset& p : gpt_presets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw Error(str("--model: unknown preset '", name, "' (known: ", known, ")"));
}

std::string_view name(ModelFamily family) {
  return family == ModelFamily::llama ? "llama" : "gpt";
}

void validate(const GptConfig& c) {
  DTRAIN_CHECK(c.vocab > 0, "--vocab must be positive (got ", c.vocab, ")");
  DTRAIN_CHECK(c.context > 0, "--context must be positive (got ", c.context, ")");
  DTRAIN_CHECK(c.layers > 0, "--layers must be positive (got ", c.layers, ")");
  DTRAIN_CHECK(c.heads > 0, "--heads must be positive (got ", c.heads, ")");
  DTRAIN_CHECK(c.channels > 0, "--hidden must be positive (got ", c.channels, ")");
  DTRAIN_CHECK(c.channels % c.heads == 0, "--heads ", c.heads, " does not divide --hidden ",
               c.channels);
  validate(c.moe, c.layers);
  if (!c.llama()) return;
  const int64_t kv = c.kv_heads_or_heads();
  DTRAIN_CHECK(c.kv_heads >= 0 && kv <= c.heads && c.heads % kv == 0, "--kv-heads ", c.kv_heads,
               " must divide --heads ", c.heads, " (grouped-query attention; 1 is multi-query)");
  DTRAIN_CHECK(c.ffn_hidden >= 0, "--ffn-hidden must be positive (got ", c.ffn_hidden, ")");
  DTRAIN_CHECK(c.head_size() % 2 == 0,
               "--family llama: the head size --hidden / --heads = ", c.head_size(),
               " must be even (rotary positions pair its dims)");
  DTRAIN_CHECK(c.rope_theta > 0, "--rope-theta must be positive (got ", c.rope_theta, ")");
  DTRAIN_CHECK(c.norm_eps > 0, "--norm-eps must be positive (got ", c.norm_eps, ")");
}

int64_t gpt_param_count(const GptConfig& c) {
  const int64_t C = c.channels;
  const int64_t moe_layers = moe_layers_before(c.moe, c.layers);
  if (c.llama()) {
    // wte, per block two RMSNorms, Q, K and V (kv_heads wide), the projection, gate, up and
    // down; the final norm; the untied head. A routed block has E SwiGLU experts and a router.
    const int64_t kv = c.kv_heads_or_heads() * c.head_size(), F = c.ffn();
    return c.vocab * C + c.layers * (2 * C + C * C + 2 * kv * C + C * C + 3 * C * F) + C +
           (c.tied_head() ? 0 : c.vocab * C) +
           moe_layers * ((c.moe.experts - 1) * 3 * C * F + c.moe.experts * C);
  }
  const int64_t mlp = 8 * C * C + 5 * C;
  return c.vocab * C + c.context * C + c.layers * (12 * C * C + 13 * C) + 2 * C +
         moe_layers * ((c.moe.experts - 1) * mlp + c.moe.experts * C);
}

std::string describe(const GptConfig& c) {
  std::string s =
      str("V=", c.vocab, " T=", c.context, " L=", c.layers, " NH=", c.heads, " C=", c.channels);
  if (c.moe.enabled()) s += str(" E=", c.moe.experts, " k=", c.moe.top_k, " every=", c.moe.every);
  if (c.llama()) {
    s += str(" llama KV=", c.kv_heads_or_heads(), " F=", c.ffn(), c.tied_head() ? " tied" : "");
  }
  return s;
}

}  // namespace dtrain::model
