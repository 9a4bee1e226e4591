// GptDecoder::step: embedding, the blocks on one row with cached keys and values, the final
// norm and the LM head; for the Llama family RMSNorm, q and k rotated at the row's position, a
// cache of the K/V heads only (each query head reading its group's), SwiGLU and the untied head.
#include "dtrain/model/gpt_decoder.h"

#include <algorithm>
#include <cmath>

#include "dtrain/core/check.h"
#include "dtrain/model/ops/gelu.h"
#include "dtrain/model/ops/layernorm.h"
#include "dtrain/model/ops/matmul.h"
#include "dtrain/model/ops/moe.h"
#include "dtrain/model/ops/rmsnorm.h"
#include "dtrain/model/ops/rope.h"
#include "dtrain/model/ops/swiglu.h"

namespace dtrain::model {

GptDecoder::GptDecoder(const GptConfig& config, std::span<const float> params)
    : config_(config), table_(gpt_param_table(config)), params_(params) {
  validate(config);
  DTRAIN_CHECK(static_cast<int64_t>(params.size()) == table_.total_count(),
               "GptDecoder: ", params.size(), " parameters for a model of ", table_.total_count());
  const int64_t C = config.channels, KV = kv_width();
  // The cache holds the K/V heads' columns only: (NKV HS) per position, C for GPT.
  const auto cache = static_cast<size_t>(config.layers * config.context * KV);
  k_cache_.resize(cache);
  v_cache_.resize(cache);
  x_.resize(static_cast<size_t>(C));
  ln_.resize(static_cast<size_t>(C));
  qkv_.resize(static_cast<size_t>(C + 2 * KV));
  att_.resize(static_cast<size_t>(C));
  proj_.resize(static_cast<size_t>(C));
  fc_.resize(static_cast<size_t>(config.llama() ? 2 * config.ffn() : config.ffn()));
  fc_gelu_.resize(static_cast<size_t>(config.ffn()));
  scores_.resize(static_cast<size_t>(config.context));
  logits_.resize(static_cast<size_t>(config.vocab));
}

const float* GptDecoder::param(int index) const {
  return params_.data() + table_[static_cast<size_t>(index)].offset;
}

int64_t GptDecoder::kv_width() const {
  return config_.kv_heads_or_heads() * config_.head_size();
}

void GptDecoder::norm(const float* w, const float* b) {
  if (config_.llama()) {
    rmsnorm_forward(ln_.data(), &rstd_, x_.data(), w, 1, config_.channels, config_.norm_eps);
  } else {
    layernorm_forward(ln_.data(), &mean_, &rstd_, x_.data(), w, b, 1, 1, config_.channels);
  }
}

void GptDecoder::block(int64_t l) {
  const int64_t C = config_.channels, NH = config_.heads, HS = C / NH, KV = kv_width();
  const int64_t group = NH / config_.kv_heads_or_heads();  // query heads per K/V head
  const auto p = [&](LayerParam k) -> const float* {
    const int index = gpt_layer_param(config_, l, k);
    return index < 0 ? nullptr : param(index);  // the family's absent tensors (Llama's biases)
  };
  norm(p(LayerParam::ln1_w), p(LayerParam::ln1_b));
  matmul_forward(qkv_.data(), ln_.data(), p(LayerParam::qkv_w), p(LayerParam::qkv_b), 1, C,
                 C + 2 * KV);
  if (config_.llama()) {
    // q and k at this position: the same table the training model uses for position pos_.
    const int64_t position[] = {pos_};
    rope_forward(qkv_.data(), make_rope_table(position, HS, config_.rope_theta), 1, 1,
                 NH + config_.kv_heads_or_heads(), C + 2 * KV);
  }
  float* k_rows = k_cache_.data() + l * config_.context * KV;  // (context, NKV HS)
  float* v_rows = v_cache_.data() + l * config_.context * KV;
  std::copy_n(qkv_.data() + C, KV, k_rows + pos_ * KV);
  std::copy_n(qkv_.data() + C + KV, KV, v_rows + pos_ * KV);
  // Each head: scores over positions 0..pos_ (causal: every cached position is earlier), a
  // softmax, and the weighted sum of the cached values.
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  for (int64_t h = 0; h < NH; ++h) {
    const float* q = qkv_.data() + h * HS;
    float max_score = -INFINITY;
    for (int64_t t = 0; t <= pos_; ++t) {
      const float* k = k_rows + t * KV + (h / group) * HS;
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
      const float* v = v_rows + t * KV + (h / group) * HS;
      for (int64_t i = 0; i < HS; ++i) out[i] += w * v[i];
    }
  }
  matmul_forward(proj_.data(), att_.data(), p(LayerParam::attn_proj_w), p(LayerParam::attn_proj_b),
                 1, C, C);
  for (int64_t i = 0; i < C; ++i) x_[i] += proj_[i];
  norm(p(LayerParam::ln2_w), p(LayerParam::ln2_b));
  if (is_moe_layer(config_.moe, l)) {
    // The token alone through the router and its top-k experts, dropless (a capacity is a
    // batch's rule; Mixtral drops nothing): what the training forward computes for it when
    // nothing is dropped.
    MoeConfig m = config_.moe;
    m.capacity_factor = 0;
    const MoeWeights w{
        p(LayerParam::moe_router_w), p(LayerParam::fc_w),
        p(LayerParam::fc_b),         p(LayerParam::fc_proj_w),
        p(LayerParam::fc_proj_b),    moe_expert_widths(C, config_.ffn(), config_.llama())};
    moe_route(moe_routing_, ln_.data(), w.router_w, 1, C, m);
    moe_forward(proj_.data(), moe_cache_, moe_routing_, ln_.data(), w, 1, C, m);
    for (int64_t i = 0; i < C; ++i) x_[i] += proj_[i];
    return;
  }
  const int64_t F = config_.ffn();
  matmul_forward(fc_.data(), ln_.data(), p(LayerParam::fc_w), p(LayerParam::fc_b), 1, C,
                 static_cast<int64_t>(fc_.size()));
  if (config_.llama()) {
    swiglu_forward(fc_gelu_.data(), fc_.data(), 1, F);
  } else {
    gelu_forward(fc_gelu_.data(), fc_.data(), F);
  }
  matmul_forward(proj_.data(), fc_gelu_.data(), p(LayerParam::fc_proj_w), p(LayerParam::fc_proj_b),
                 1, F, C);
  for (int64_t i = 0; i < C; ++i) x_[i] += proj_[i];
}

std::span<const float> GptDecoder::step(int32_t token) {
  DTRAIN_CHECK(token >= 0 && token < config_.vocab, "token ", token,
               " is outside the model's vocabulary of ", config_.vocab);
  DTRAIN_CHECK(pos_ < config_.context, "the decoder's context of ", config_.context,
               " positions is full");
  const int64_t C = config_.channels;
  const float* wte = param(kWteIndex) + static_cast<int64_t>(token) * C;
  const int wpe = gpt_wpe_index(config_);  // none with rotary positions
  for (int64_t i = 0; i < C; ++i) x_[i] = wte[i] + (wpe < 0 ? 0.0f : param(wpe)[pos_ * C + i]);
  for (int64_t l = 0; l < config_.layers; ++l) block(l);
  const int lnf_b = gpt_lnf_b_index(config_);
  norm(param(gpt_lnf_w_index(config_)), lnf_b < 0 ? nullptr : param(lnf_b));
  const int head = config_.tied_head() ? kWteIndex : gpt_lm_head_index(config_);
  matmul_forward(logits_.data(), ln_.data(), param(head), nullptr, 1, C, config_.vocab);
  ++pos_;
  return logits_;
}

}  // namespace dtrain::model
