// GptDecoder: the serial GPT forward for generation, one token at a time with a KV cache: each
// block keeps the keys and values of every position fed so far, so a new token costs one row of
// each linear and an attention over the cached positions instead of a forward over the whole
// prefix. Reads the serial parameter layout (gpt_param_table); the same ops as GptModel for the
// LayerNorms, linears and GELU; for the Llama family RMSNorm, RoPE at each position, a cache of
// the --kv-heads heads only (grouped-query attention) and SwiGLU; a routed block sends the
// token to its top-k experts (dropless).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dtrain/model/gpt_config.h"
#include "dtrain/model/ops/moe.h"
#include "dtrain/model/param_table.h"

namespace dtrain::model {

class GptDecoder {
 public:
  // `params` (gpt_param_table(config).total_count()) must outlive the decoder.
  GptDecoder(const GptConfig& config, std::span<const float> params);

  // Feeds `token` at position position() and returns the logits (V) of the next token. Throws
  // Error when the token is outside the vocabulary or the context is full.
  std::span<const float> step(int32_t token);
  int64_t position() const { return pos_; }  // tokens fed since the last reset
  void reset() { pos_ = 0; }
  const GptConfig& config() const { return config_; }

 private:
  const float* param(int index) const;
  void block(int64_t l);  // x_ through block l at position pos_, caching its k and v
  void norm(const float* w, const float* b);  // ln_ = the family's norm of x_
  int64_t kv_width() const;                   // the cached columns per position: NKV HS

  GptConfig config_;
  ParamTable table_;
  std::span<const float> params_;
  int64_t pos_ = 0;
  std::vector<float> k_cache_, v_cache_;  // (L, context, NKV HS) each
  MoeRouting moe_routing_;  // a routed block's choice for this position, and its experts' rows
  MoeExpertCache moe_cache_;
  std::vector<float> x_, ln_, qkv_, att_, proj_, fc_, fc_gelu_, scores_;  // one position's
  std::vector<float> logits_;                                             // (V)
  float mean_ = 0, rstd_ = 0;
};

}  // namespace dtrain::model
