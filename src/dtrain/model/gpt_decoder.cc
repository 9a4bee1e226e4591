// GptDecoder::step: embedding, the blocks on one row with cached keys and values, the final
// LayerNorm and the tied LM head.
#include "dtrain/model/gpt_decoder.h"

#include <algorithm>
#include <cmath>

#include "dtrain/core/check.h"
#include "dtrain/model/ops/gelu.h"
#include "dtrain/model/ops/layernorm.h"
#include "dtrain/model/ops/matmul.h"

namespace dtrain::model {

GptDecoder::GptDecoder(const GptConfig& config, std::span<const float> params)
    : config_(config), table_(gpt_param_table(config)), params_(params) {
  validate(config);
  DTRAIN_CHECK(!config.moe.enabled(), "sampling an MoE model (--experts ", config.moe.experts,
               ") is not supported yet");
  DTRAIN_CHECK(!config.llama(),
               "sampling a Llama-family model is not supported yet (its KV cache of --kv-heads "
               "width with rotary positions comes with the family's next step)");
  DTRAIN_CHECK(static_cast<int64_t>(params.size()) == table_.total_count(),
               "GptDecoder: ", params.size(), " parameters for a model of ", table_.total_count());
  const int64_t C = config.channels;
  const auto cache = static_cast<size_t>(config.layers * config.context * C);
  k_cache_.resize(cache);
  v_cache_.resize(cache);
  x_.resize(static_cast<size_t>(C));
  ln_.resize(static_cast<size_t>(C));
  qkv_.resize(static_cast<size_t>(3 * C));
  att_.resize(static_cast<size_t>(C));
  proj_.resize(static_cast<size_t>(C));
  fc_.resize(static_cast<size_t>(4 * C));
  fc_gelu_.resize(static_cast<size_t>(4 * C));
  scores_.resize(static_cast<size_t>(config.context));
  logits_.resize(static_cast<size_t>(config.vocab));
}

const float* GptDecoder::param(int index) const {
  return params_.data() + table_[static_cast<size_t>(index)].offset;
}

void GptDecoder::block(int64_t l) {
  const int64_t C = config_.channels, NH = config_.heads, HS = C / NH;
  const auto p = [&](LayerParam k) { return param(gpt_layer_param(l, k)); };
  layernorm_forward(ln_.data(), &mean_, &rstd_, x_.data(), p(LayerParam::ln1_w),
                    p(LayerParam::ln1_b), 1, 1, C);
  matmul_forward(qkv_.data(), ln_.data(), p(LayerParam::qkv_w), p(LayerParam::qkv_b), 1, C, 3 * C);
  float* k_rows = k_cache_.data() + l * config_.context * C;  // (context, C)
  float* v_rows = v_cache_.data() + l * config_.context * C;
  std::copy_n(qkv_.data() + C, C, k_rows + pos_ * C);
  std::copy_n(qkv_.data() + 2 * C, C, v_rows + pos_ * C);
  // Each head: scores over positions 0..pos_ (causal: every cached position is earlier), a
  // softmax, and the weighted sum of the cached values.
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  for (int64_t h = 0; h < NH; ++h) {
    const float* q = qkv_.data() + h * HS;
    float max_score = -INFINITY;
    for (int64_t t = 0; t <= pos_; ++t) {
      const float* k = k_rows + t * C + h * HS;
      float dot = 0;
      for (int64_t i = 0; i < HS; ++i) dot += q[i] * k[i];
      scores_[t] = dot * scale;
      max_score = std::max(max_score, scores_[t]);
    }
    float sum = 0;
    for (int64_t t = 0; t <= pos_; ++t) {
      scores_[t] = std::exp(scores_[t] - max_score);
      sum += scores_[t];
    }
    float* out = att_.data() + h * HS;
    std::fill_n(out, HS, 0.0f);
    for (int64_t t = 0; t <= pos_; ++t) {
      const float w = scores_[t] / sum;
      const float* v = v_rows + t * C + h * HS;
      for (int64_t i = 0; i < HS; ++i) out[i] += w * v[i];
    }
  }
  matmul_forward(proj_.data(), att_.data(), p(LayerParam::attn_proj_w), p(LayerParam::attn_proj_b),
                 1, C, C);
  for (int64_t i = 0; i < C; ++i) x_[i] += proj_[i];
  layernorm_forward(ln_.data(), &mean_, &rstd_, x_.data(), p(LayerParam::ln2_w),
                    p(LayerParam::ln2_b), 1, 1, C);
  matmul_forward(fc_.data(), ln_.data(), p(LayerParam::fc_w), p(LayerParam::fc_b), 1, C, 4 * C);
  gelu_forward(fc_gelu_.data(), fc_.data(), 4 * C);
  matmul_forward(proj_.data(), fc_gelu_.data(), p(LayerParam::fc_proj_w), p(LayerParam::fc_proj_b),
                 1, 4 * C, C);
  for (int64_t i = 0; i < C; ++i) x_[i] += proj_[i];
}

std::span<const float> GptDecoder::step(int32_t token) {
  DTRAIN_CHECK(token >= 0 && token < config_.vocab, "token ", token,
               " is outside the model's vocabulary of ", config_.vocab);
  DTRAIN_CHECK(pos_ < config_.context, "the decoder's context of ", config_.context,
               " positions is full");
  const int64_t C = config_.channels;
  const float* wte = param(kWteIndex) + static_cast<int64_t>(token) * C;
  const float* wpe = param(kWpeIndex) + pos_ * C;
  for (int64_t i = 0; i < C; ++i) x_[i] = wte[i] + wpe[i];
  for (int64_t l = 0; l < config_.layers; ++l) block(l);
  layernorm_forward(ln_.data(), &mean_, &rstd_, x_.data(), param(gpt_lnf_w_index(config_.layers)),
                    param(gpt_lnf_b_index(config_.layers)), 1, 1, C);
  matmul_forward(logits_.data(), ln_.data(), param(kWteIndex), nullptr, 1, C, config_.vocab);
  ++pos_;
  return logits_;
}

}  // namespace dtrain::model
