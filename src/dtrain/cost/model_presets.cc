// Parameter counts by component, and the model presets with their sources.
#include "dtrain/cost/model_presets.h"

#include <cmath>

#include "dtrain/core/check.h"
#include "dtrain/machine/format.h"

namespace dtrain::plan {
namespace {

ModelShape gpt(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t batch,
               double tokens, std::string source) {
  ModelShape m;
  m.name = std::move(name);
  m.family = ModelFamily::gpt;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.vocab = 51200;  // Narayanan et al. 2021 §5.1: "vocabulary size of 51,200" (GPT-2 BPE, padded)
  m.seq = 2048;     // ibid.: "sequence length of 2048"
  m.default_global_batch = batch;
  m.default_tokens = tokens;
  m.source = std::move(source);
  return m;
}

ModelShape llama(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads,
                 int64_t ffn) {
  ModelShape m;
  m.name = std::move(name);
  m.family = ModelFamily::llama;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.ffn_hidden = ffn;
  m.vocab = 32000;  // Touvron et al. 2023 (Llama 2) §2.1: same 32k-token tokenizer as Llama 1
  m.seq = 4096;     // ibid. Table 1: context length 4k
  // ibid. §2.2: "a global batch-size of 4M tokens" = 1024 sequences of 4096; Table 1: 2.0T tokens.
  m.default_global_batch = 1024;
  m.default_tokens = 2.0e12;
  m.source =
      "Touvron et al. 2023, Llama 2, Table 1; shapes from the meta-llama/Llama-2-*-hf "
      "config.json model cards";
  return m;
}

// Llama 3 405B in its long-context pre-training stage (Dubey et al. 2024, "The Llama 3 Herd of
// Models"). Shape, Table 3: 126 layers, model dimension 16,384, FFN dimension 53,248, 128
// attention heads, 8 key/value heads, vocabulary 128,000. Sequence: §3.4.2 grows the context
// to 128K tokens = 131,072. Batch, Table 4's 128K row: DP 8 x 16 sequences per DP replica = 128
// sequences (its 16M tokens per batch: 128 x 131,072 = 16.8M). Tokens: §3.4.2, about 800B in
// the long-context stage. Its layout, the same row: TP 8, CP 16, PP 16, DP 8 on 16,384 H100s
// (`dtrain plan --model llama3-405b-128k --cluster 2048x8xH100 --tp 8 --cp 16 --pp 16`).
// 126 layers do not split evenly over 16 stages; Llama 3 (§3.3.2) gives the first and the last
// stage one layer fewer (8 per stage, 7 at the ends), which is the planner's balanced split
// (pipeline_stages.h: 7, 8 x 14, 7).
ModelShape llama3_405b_long_context() {
  ModelShape m = llama("llama3-405b-128k", 126, 16384, 128, 8, 53248);
  m.vocab = 128000;
  m.seq = 131072;
  m.default_global_batch = 128;
  m.default_tokens = 800e9;
  m.source =
      "Dubey et al. 2024, The Llama 3 Herd of Models: Table 3 (shape), Table 4 (the 128K "
      "stage's batch and layout), §3.4.2 (sequence, tokens)";
  return m;
}

// Mixtral 8x7B (Jiang et al. 2024, "Mixtral of Experts", Table 1; the same values in
// mistralai/Mixtral-8x7B-v0.1's config.json): 32 layers, dim 4096, 32 heads of 128, 8 KV heads,
// SwiGLU experts of hidden_dim 14336, vocabulary 32000, context 32768, 8 experts, top 2 in every
// layer; untied output head. The paper gives neither batch nor training tokens (0: unknown).
ModelShape mixtral_8x7b() {
  ModelShape m = llama("mixtral-8x7b", 32, 4096, 32, 8, 14336);
  m.seq = 32768;
  m.default_global_batch = 0;
  m.default_tokens = 0;
  m.moe.experts = 8;
  m.moe.top_k = 2;
  m.source = "Jiang et al. 2024, Mixtral of Experts, Table 1 (mistralai/Mixtral-8x7B-v0.1 config)";
  return m;
}

// DeepSeek-V3 (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", §4.2; deepseek-ai/DeepSeek-V3's
// config.json): 61 layers, hidden 7168, 128 heads with multi-head latent attention (q_lora_rank
// 1536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128), the first
// 3 layers dense (first_k_dense_replace; intermediate_size 18432), the other 58 with 256 routed
// experts (top 8) and 1 shared expert of moe_intermediate_size 2048, vocabulary 129280, untied
// head. §4.2: sequence 4K in pre-training, batch 15360 sequences after the ramp, 14.8T tokens.
// Left out: the multi-token-prediction module (num_nextn_predict_layers 1, 14B parameters on
// top of the 671B; its layer would be a 62nd block), the router's per-expert bias
// (e_score_correction_bias, 256 per routed layer), the node-limited routing (a token reaches
// at most 4 nodes: all-to-all bytes here are the unrestricted routing's). The report's PP 16
// (§3.2.1) splits the 61 layers unequally; the planner's balanced split gives 3, 4 x 13, 3, 3
// (--stage-layers sets another).
ModelShape deepseek_v3() {
  ModelShape m = llama("deepseek-v3", 61, 7168, 128, 128, 18432);
  m.vocab = 129280;
  m.seq = 4096;
  m.default_global_batch = 15360;
  m.default_tokens = 14.8e12;
  m.moe.experts = 256;
  m.moe.top_k = 8;
  m.moe.first_dense = 3;
  m.moe.shared_experts = 1;
  m.moe.expert_ffn = 2048;
  m.mla.q_lora_rank = 1536;
  m.mla.kv_lora_rank = 512;
  m.mla.qk_nope_head_dim = 128;
  m.mla.qk_rope_head_dim = 64;
  m.mla.v_head_dim = 128;
  m.source = "DeepSeek-AI 2024, DeepSeek-V3 Technical Report §4.2 (deepseek-ai/DeepSeek-V3 config)";
  return m;
}

std::vector<ModelShape> make_presets() {
  std::vector<ModelShape> p;
  // Brown et al. 2020 Table 2.1 (96 layers, d_model 12288, 96 heads, context 2048), with the
  // 51200 vocabulary and the 1536-sequence batch Narayanan et al. 2021 §5.1 use for it; 300B
  // training tokens (Brown et al. §2.2).
  p.push_back(gpt("gpt3-175b", 96, 12288, 96, 1536, 300e9,
                  "Brown et al. 2020 Table 2.1; vocabulary and batch as Narayanan et al. 2021"));
  p.push_back(llama("llama2-7b", 32, 4096, 32, 32, 11008));
  p.push_back(llama("llama2-13b", 40, 5120, 40, 40, 13824));
  p.push_back(llama("llama2-70b", 80, 8192, 64, 8, 28672));  // grouped-query attention, 8 KV heads
  // Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
  // Megatron-LM") Table 1: heads, hidden size, layers and batch size of each weak-scaling model;
  // the name is the parameter count the table gives (Eq. 2). Training tokens are given only for
  // the 1T model (§5.1: 450B).
  const char* kTable1 = "Narayanan et al. 2021 Table 1";
  p.push_back(gpt("megatron-1.7b", 24, 2304, 24, 512, 0, kTable1));
  p.push_back(gpt("megatron-3.6b", 30, 3072, 32, 512, 0, kTable1));
  p.push_back(gpt("megatron-7.5b", 36, 4096, 32, 512, 0, kTable1));
  p.push_back(gpt("megatron-18.4b", 40, 6144, 48, 1024, 0, kTable1));
  p.push_back(gpt("megatron-39.1b", 48, 8192, 64, 1536, 0, kTable1));
  p.push_back(gpt("megatron-76.1b", 60, 10240, 80, 1792, 0, kTable1));
  p.push_back(gpt("megatron-145.6b", 80, 12288, 96, 2304, 0, kTable1));
  p.push_back(gpt("megatron-310.1b", 96, 16384, 128, 2160, 0, kTable1));
  p.push_back(gpt("megatron-529.6b", 105, 20480, 128, 2520, 0, kTable1));
  p.push_back(gpt("megatron-1t", 128, 25600, 160, 3072, 450e9, kTable1));
  p.push_back(llama3_405b_long_context());
  p.push_back(mixtral_8x7b());
  p.push_back(deepseek_v3());
  return p;
}

}  // namespace

std::string_view name(ModelFamily family) {
  switch (family) {
    case ModelFamily::gpt:
      return "gpt";
    case ModelFamily::llama:
      return "llama";
  }
  return "?";
}

int64_t attention_matmul_param_count(const ModelShape& m) {
  if (m.mla.enabled()) return mla_matmul_param_count(m);
  const int64_t h = m.hidden;
  const int64_t kv_width = m.kv_heads_or_heads() * (h / m.heads);  // K and V output width
  return h * (h + 2 * kv_width) + h * h;                           // QKV, then the projection
}

int64_t layer_matmul_param_count(const ModelShape& m) {
  const int64_t mlp = (m.family == ModelFamily::llama ? 3 : 2) * m.hidden * m.ffn_or_default();
  return attention_matmul_param_count(m) + mlp;
}

int64_t layer_param_count(const ModelShape& m) {
  const int64_t h = m.hidden, f = m.ffn_or_default();
  const int64_t kv_width = m.kv_heads_or_heads() * (h / m.heads);
  if (m.family == ModelFamily::llama) {  // 2 RMSNorms (and MLA's two latent ones)
    return layer_matmul_param_count(m) + 2 * h + mla_norm_param_count(m);
  }
  const int64_t biases = (h + 2 * kv_width) + h + f + h;  // QKV, projection, MLP in and out
  return layer_matmul_param_count(m) + biases + 4 * h;    // + 2 LayerNorms (weight and bias)
}

int64_t embedding_param_count(const ModelShape& m) {
  if (m.family == ModelFamily::llama) return m.vocab * m.hidden;  // rotary positions: no table
  return (m.vocab + m.seq) * m.hidden;
}

int64_t head_param_count(const ModelShape& m) {
  if (m.family == ModelFamily::llama) return m.vocab * m.hidden + m.hidden;
  return m.count_final_norm ? 2 * m.hidden : 0;  // the final LayerNorm's weight and bias
}

int64_t dense_layer_count(const ModelShape& m) {
  return m.layers - moe_layer_count(m);
}

int64_t shape_param_count(const ModelShape& m) {
  const int64_t routed = moe_layer_count(m);
  const int64_t layers = (m.layers - routed) * layer_param_count(m) +
                         (routed > 0 ? routed * moe_layer_param_count(m) : 0);
  return layers + embedding_param_count(m) + head_param_count(m);
}

int64_t scaled_to_override(const ModelShape& m, int64_t count) {
  if (m.params_override <= 0) return count;
  const long double share =
      static_cast<long double>(count) / static_cast<long double>(shape_param_count(m));
  return std::llround(share * static_cast<long double>(m.params_override));
}

int64_t param_count(const ModelShape& m) {
  return m.params_override > 0 ? m.params_override : shape_param_count(m);
}

void validate(const ModelShape& m) {
  DTRAIN_CHECK(m.layers > 0, "--layers must be positive, got ", m.layers);
  DTRAIN_CHECK(m.hidden > 0, "--hidden must be positive, got ", m.hidden);
  DTRAIN_CHECK(m.heads > 0, "--heads must be positive, got ", m.heads);
  DTRAIN_CHECK(m.kv_heads >= 0, "--kv-heads must be positive, got ", m.kv_heads);
  DTRAIN_CHECK(m.ffn_hidden >= 0, "--ffn-hidden must be positive, got ", m.ffn_hidden);
  DTRAIN_CHECK(m.vocab > 0, "--vocab must be positive, got ", m.vocab);
  DTRAIN_CHECK(m.seq > 0, "--seq-length must be positive, got ", m.seq);
  DTRAIN_CHECK(m.params_override >= 0, "--params must be positive, got ", m.params_override);
  DTRAIN_CHECK(m.layers <= kMaxLayers, "--layers must be at most ", kMaxLayers, ", got ", m.layers);
  DTRAIN_CHECK(m.hidden <= kMaxHidden, "--hidden must be at most ", kMaxHidden, ", got ", m.hidden);
  DTRAIN_CHECK(m.heads <= m.hidden, "--heads ", m.heads, " is more than --hidden ", m.hidden);
  DTRAIN_CHECK(m.kv_heads <= m.heads, "--kv-heads ", m.kv_heads, " is more than --heads ", m.heads);
  DTRAIN_CHECK(m.ffn_hidden <= kMaxFfnHidden, "--ffn-hidden must be at most ", kMaxFfnHidden,
               ", got ", m.ffn_hidden);
  DTRAIN_CHECK(m.vocab <= kMaxVocab, "--vocab must be at most ", kMaxVocab, ", got ", m.vocab);
  DTRAIN_CHECK(m.seq <= kMaxSeq, "--seq-length must be at most ", kMaxSeq, ", got ", m.seq);
  validate_moe(m);  // its bounds too come before the count
  // Within the bounds above the count itself cannot overflow.
  const double params = static_cast<double>(param_count(m));
  DTRAIN_CHECK(params <= kMaxParams, "the model has ", params, " parameters (--layers ", m.layers,
               ", --hidden ", m.hidden, ", --vocab ", m.vocab, "); at most ", kMaxParams,
               " are supported");
  DTRAIN_CHECK(m.hidden % m.heads == 0, "--heads ", m.heads, " does not divide --hidden ",
               m.hidden);
  DTRAIN_CHECK(m.heads % m.kv_heads_or_heads() == 0, "--kv-heads ", m.kv_heads,
               " does not divide --heads ", m.heads);
}

const std::vector<ModelShape>& model_presets() {
  static const std::vector<ModelShape> presets = make_presets();
  return presets;
}

const ModelShape& model_preset(std::string_view name) {
  const std::string key = lowercase(name);
  std::string known;
  for (const ModelShape& m : model_presets()) {
    if (m.name == key) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw Error(str("--model: unknown preset '", name, "' (known: ", known,
                  "; or give --layers, --hidden, --heads, --vocab, --seq-length)"));
}

}  // namespace dtrain::plan
