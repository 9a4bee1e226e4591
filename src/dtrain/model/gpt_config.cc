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

void validate(const GptConfig& c) {
  DTRAIN_CHECK(c.vocab > 0, "--vocab must be positive (got ", c.vocab, ")");
  DTRAIN_CHECK(c.context > 0, "--context must be positive (got ", c.context, ")");
  DTRAIN_CHECK(c.layers > 0, "--layers must be positive (got ", c.layers, ")");
  DTRAIN_CHECK(c.heads > 0, "--heads must be positive (got ", c.heads, ")");
  DTRAIN_CHECK(c.channels > 0, "--hidden must be positive (got ", c.channels, ")");
  DTRAIN_CHECK(c.channels % c.heads == 0, "--heads ", c.heads, " does not divide --hidden ",
               c.channels);
  validate(c.moe, c.layers);
}

int64_t gpt_param_count(const GptConfig& c) {
  const int64_t C = c.channels;
  const int64_t moe_layers = moe_layers_before(c.moe, c.layers);
  const int64_t mlp = 8 * C * C + 5 * C;
  return c.vocab * C + c.context * C + c.layers * (12 * C * C + 13 * C) + 2 * C +
         moe_layers * ((c.moe.experts - 1) * mlp + c.moe.experts * C);
}

std::string describe(const GptConfig& c) {
  std::string s =
      str("V=", c.vocab, " T=", c.context, " L=", c.layers, " NH=", c.heads, " C=", c.channels);
  if (c.moe.enabled()) s += str(" E=", c.moe.experts, " k=", c.moe.top_k, " every=", c.moe.every);
  return s;
}

}  // namespace dtrain::model
