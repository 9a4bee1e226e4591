// Name and layout mapping between dtrain's Llama tensors and Hugging Face's LlamaForCausalLM:
// each Hugging Face tensor is a block of rows of one of ours.
#include "dtrain/formats/hf_llama.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "dtrain/core/check.h"
#include "dtrain/core/mapped_file.h"
#include "dtrain/model/param_table.h"

namespace dtrain::formats {
namespace {

namespace fs = std::filesystem;

// One Hugging Face tensor: rows [first, first + rows) of our tensor `ours` (a row is its last
// dimension: a stacked expert tensor (E, R, K) is E R rows of K).
struct HfBlock {
  std::string hf, ours;
  int64_t first = 0, rows = 0;
};

// Every Hugging Face tensor of the model, in Hugging Face's order (embeddings, each layer, the
// final norm, the head).
std::vector<HfBlock> hf_blocks(const model::GptConfig& c) {
  const int64_t C = c.channels, F = c.ffn();
  const int64_t q = c.heads * c.head_size(), kv = c.kv_heads_or_heads() * c.head_size();
  std::vector<HfBlock> out = {{"model.embed_tokens.weight", "wte", 0, c.vocab}};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string hf = str("model.layers.", l, "."), h = str("h.", l, ".");
    out.push_back({hf + "input_layernorm.weight", h + "ln1.w", 0, C});
    out.push_back({hf + "self_attn.q_proj.weight", h + "attn.qkv.w", 0, q});
    out.push_back({hf + "self_attn.k_proj.weight", h + "attn.qkv.w", q, kv});
    out.push_back({hf + "self_attn.v_proj.weight", h + "attn.qkv.w", q + kv, kv});
    out.push_back({hf + "self_attn.o_proj.weight", h + "attn.proj.w", 0, C});
    out.push_back({hf + "post_attention_layernorm.weight", h + "ln2.w", 0, C});
    if (model::is_moe_layer(c.moe, l)) {
      // Mixtral: the router is block_sparse_moe.gate; expert j's w1 (gate), w3 (up) and w2
      // (down) are its rows of our stacked [gate | up] and down tensors.
      const std::string moe = hf + "block_sparse_moe.";
      out.push_back({moe + "gate.weight", h + "moe.router.w", 0, c.moe.experts});
      for (int64_t j = 0; j < c.moe.experts; ++j) {
        const std::string e = str(moe, "experts.", j, ".");
        out.push_back({e + "w1.weight", h + "moe.fc.w", 2 * F * j, F});
        out.push_back({e + "w2.weight", h + "moe.proj.w", C * j, C});
        out.push_back({e + "w3.weight", h + "moe.fc.w", 2 * F * j + F, F});
      }
      continue;
    }
    out.push_back({hf + "mlp.gate_proj.weight", h + "mlp.fc.w", 0, F});
    out.push_back({hf + "mlp.up_proj.weight", h + "mlp.fc.w", F, F});
    out.push_back({hf + "mlp.down_proj.weight", h + "mlp.proj.w", 0, C});
  }
  out.push_back({"model.norm.weight", "lnf.w", 0, C});
  if (!c.tied_head()) out.push_back({"lm_head.weight", "lm_head.w", 0, c.vocab});
  return out;
}

// Elements of one row of `t`: its last dimension (1 for a vector).
int64_t row_length(const model::ParamTensor& t) {
  return t.shape.size() == 1 ? 1 : t.shape.back();
}

// The Hugging Face shape of a block: its rows by our row length (a vector stays a vector).
std::vector<int64_t> hf_shape(const HfBlock& b, const model::ParamTensor& t) {
  if (t.shape.size() == 1) return {b.rows};
  return {b.rows, row_length(t)};
}

int64_t positive_int(const nlohmann::json& j, const char* key, std::string_view path) {
  DTRAIN_CHECK(j.contains(key), path, ": no \"", key, "\"");
  DTRAIN_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() > 0, path, ": \"", key, "\" is ",
               j[key].dump(), ", not a positive integer");
  return j[key].get<int64_t>();
}

double positive_number(const nlohmann::json& j, const char* key, double absent,
                       std::string_view path) {
  if (!j.contains(key)) return absent;
  DTRAIN_CHECK(j[key].is_number() && j[key].get<double>() > 0, path, ": \"", key, "\" is ",
               j[key].dump(), ", not a positive number");
  return j[key].get<double>();
}

// The mapped weights file of `dir` and, for every block of `config`, its entry (shape checked).
struct HfLlamaWeights {
  std::string path;
  std::shared_ptr<const MappedFile> file;
  SafetensorsIndex index;
  std::vector<const SafetensorsEntry*> entries;  // hf_blocks' order
};

HfLlamaWeights open_weights(const std::string& dir, const model::GptConfig& config,
                            std::string_view flag) {
  HfLlamaWeights w;
  w.path = (fs::path(dir) / "model.safetensors").string();
  w.file = MappedFile::open(w.path, flag);
  try {
    w.index = parse_safetensors(w.file->bytes(), w.path);
  } catch (const Error& e) {
    throw Error(str(flag, " ", e.what()));
  }
  const model::ParamTable table = model::gpt_param_table(config);
  for (const HfBlock& b : hf_blocks(config)) {
    const SafetensorsEntry* e = w.index.find(b.hf);
    DTRAIN_CHECK(e != nullptr, flag, " ", w.path, ": no tensor '", b.hf, "'");
    const std::vector<int64_t> want =
        hf_shape(b, table[static_cast<size_t>(table.index_of(b.ours))]);
    DTRAIN_CHECK(e->shape == want, flag, " ", w.path, ": tensor '", b.hf, "' has shape ",
                 nlohmann::json(e->shape).dump(), ", but config.json makes it ",
                 nlohmann::json(want).dump());
    w.entries.push_back(e);
  }
  return w;
}

}  // namespace

void check_hf_llama_exportable(const model::GptConfig& c) {
  if (!c.moe.enabled()) return;
  DTRAIN_CHECK(c.moe.every == 1, "the model routes every ", c.moe.every, " blocks (--moe-every ",
               c.moe.every,
               "); MixtralForCausalLM routes every block, so it has no Hugging Face form");
}

nlohmann::json hf_llama_config(const model::GptConfig& c) {
  check_hf_llama_exportable(c);
  const bool mixtral = c.moe.enabled();
  nlohmann::json j = {{"model_type", mixtral ? "mixtral" : "llama"},
                      {"architectures", {mixtral ? "MixtralForCausalLM" : "LlamaForCausalLM"}},
                      {"vocab_size", c.vocab},
                      {"hidden_size", c.channels},
                      {"intermediate_size", c.ffn()},
                      {"num_hidden_layers", c.layers},
                      {"num_attention_heads", c.heads},
                      {"num_key_value_heads", c.kv_heads_or_heads()},
                      {"head_dim", c.head_size()},
                      {"max_position_embeddings", c.context},
                      {"rms_norm_eps", c.norm_eps},
                      {"rope_theta", c.rope_theta},
                      {"rope_scaling", nullptr},
                      {"hidden_act", "silu"},
                      {"attention_bias", false},
                      {"mlp_bias", false},
                      {"tie_word_embeddings", c.tie_embeddings},
                      {"torch_dtype", "float32"}};
  if (mixtral) {
    // Mixtral's config has no bias switches; it adds the experts, the top-k and the sliding
    // window (none: dtrain's attention is full causal).
    j.erase("attention_bias");
    j.erase("mlp_bias");
    j["num_local_experts"] = c.moe.experts;
    j["num_experts_per_tok"] = c.moe.top_k;
    j["router_aux_loss_coef"] = c.moe.aux_loss_coef;
    j["output_router_logits"] = false;
    j["sliding_window"] = nullptr;
  }
  return j;
}

model::GptConfig parse_hf_llama_config(const nlohmann::json& j, std::string_view path) {
  DTRAIN_CHECK(j.is_object(), path, ": not a JSON object");
  const std::string type = j.value("model_type", std::string());
  DTRAIN_CHECK(type == "llama" || type == "mixtral", path, ": model_type ",
               j.value("model_type", nlohmann::json()).dump(), ", not \"llama\" or \"mixtral\"");
  DTRAIN_CHECK(j.value("hidden_act", std::string("silu")) == "silu", path, ": hidden_act ",
               j["hidden_act"].dump(), "; dtrain's SwiGLU gates with silu");
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    DTRAIN_CHECK(!j.value(bias, false), path, ": \"", bias,
                 "\" is true; dtrain's Llama block has no biases");
  }
  DTRAIN_CHECK(!j.contains("rope_scaling") || j["rope_scaling"].is_null(), path, ": rope_scaling ",
               j.contains("rope_scaling") ? j["rope_scaling"].dump() : "",
               " is not supported (dtrain's RoPE is the plain one, one theta)");
  model::GptConfig c;
  c.family = model::ModelFamily::llama;
  c.vocab = positive_int(j, "vocab_size", path);
  c.channels = positive_int(j, "hidden_size", path);
  c.ffn_hidden = positive_int(j, "intermediate_size", path);
  c.layers = positive_int(j, "num_hidden_layers", path);
  c.heads = positive_int(j, "num_attention_heads", path);
  c.kv_heads =
      j.contains("num_key_value_heads") ? positive_int(j, "num_key_value_heads", path) : c.heads;
  c.context = positive_int(j, "max_position_embeddings", path);
  c.norm_eps = static_cast<float>(positive_number(j, "rms_norm_eps", 1e-6, path));
  c.rope_theta = static_cast<float>(positive_number(j, "rope_theta", 10000.0, path));
  c.tie_embeddings = j.value("tie_word_embeddings", false);
  if (type == "mixtral") {
    // Every block routed, dropless (Mixtral drops no token), the router's top-k renormalised.
    c.moe.experts = positive_int(j, "num_local_experts", path);
    c.moe.top_k = positive_int(j, "num_experts_per_tok", path);
    c.moe.every = 1;
    c.moe.capacity_factor = 0;
    const bool windowed = j.contains("sliding_window") && !j["sliding_window"].is_null();
    DTRAIN_CHECK(!windowed || (j["sliding_window"].is_number_integer() &&
                               j["sliding_window"].get<int64_t>() >= c.context),
                 path, ": sliding_window ", windowed ? j["sliding_window"].dump() : "",
                 " is shorter than max_position_embeddings ", c.context,
                 "; dtrain's attention is full causal (no window)");
  }
  DTRAIN_CHECK(c.channels % c.heads == 0, path, ": num_attention_heads ", c.heads,
               " does not divide hidden_size ", c.channels);
  DTRAIN_CHECK(
      !j.contains("head_dim") || j["head_dim"].is_null() || j["head_dim"] == c.channels / c.heads,
      path, ": head_dim ", j.contains("head_dim") ? j["head_dim"].dump() : "",
      " is not hidden_size / num_attention_heads = ", c.channels / c.heads);
  try {
    model::validate(c);
  } catch (const Error& e) {
    throw Error(str(path, ": ", e.what()));
  }
  return c;
}

std::vector<SafetensorsTensor> to_hf_llama(const checkpoint::SerialState& state) {
  std::vector<SafetensorsTensor> out;
  for (const HfBlock& b : hf_blocks(state.model)) {
    const model::ParamTensor& t = state.table[static_cast<size_t>(state.table.index_of(b.ours))];
    const std::span<const float> v = state.tensor(t, checkpoint::StateKind::param);
    const int64_t row = row_length(t);
    out.push_back(
        {b.hf, hf_shape(b, t), {v.begin() + b.first * row, v.begin() + (b.first + b.rows) * row}});
  }
  return out;
}

void check_hf_llama(const std::string& dir, const model::GptConfig& config, std::string_view flag) {
  (void)open_weights(dir, config, flag);
}

checkpoint::SerialState load_hf_llama(const std::string& dir, const model::GptConfig& config,
                                      std::string_view flag) {
  checkpoint::SerialState state;
  state.model = config;
  state.table = model::gpt_param_table(config);
  const auto n = static_cast<size_t>(state.table.total_count());
  state.params.assign(n, 0.0f);
  state.adam_m.assign(n, 0.0f);
  state.adam_v.assign(n, 0.0f);
  const HfLlamaWeights w = open_weights(dir, config, flag);
  const std::vector<HfBlock> blocks = hf_blocks(config);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const model::ParamTensor& t =
        state.table[static_cast<size_t>(state.table.index_of(blocks[i].ours))];
    const std::vector<float> v = read_tensor_f32(w.file->bytes(), w.index, *w.entries[i]);
    const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
    DTRAIN_CHECK(bad == v.end(), flag, " ", w.path, ": tensor ", blocks[i].hf, " holds ", *bad,
                 " at element ", bad - v.begin(), " of ", v.size(),
                 "; the weights must be finite numbers");
    std::copy(v.begin(), v.end(),
              state.params.begin() + t.offset + blocks[i].first * row_length(t));
  }
  return state;
}

}  // namespace dtrain::formats
