// Name and layout mapping between dtrain's GPT tensors and Hugging Face's GPT-2, and the folder
// of model.safetensors + config.json.
#include "dtrain/formats/hf_gpt2.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "dtrain/core/check.h"
#include "dtrain/core/mapped_file.h"
#include "dtrain/model/ops/layernorm.h"
#include "dtrain/model/param_table.h"

namespace dtrain::formats {
namespace {

namespace fs = std::filesystem;

// (rows, cols) row-major -> (cols, rows) row-major.
std::vector<float> transposed(std::span<const float> a, int64_t rows, int64_t cols) {
  std::vector<float> out(a.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = a[r * cols + c];
  }
  return out;
}

int64_t config_int(const nlohmann::json& j, const char* key, std::string_view path) {
  DTRAIN_CHECK(j.contains(key), path, ": no \"", key, "\"");
  DTRAIN_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() > 0, path, ": \"", key, "\" is ",
               j[key].dump(), ", not a positive integer");
  return j[key].get<int64_t>();
}

}  // namespace

HfName hf_gpt2_name(std::string_view name) {
  if (name == "wte") return {"wte.weight", false};
  if (name == "wpe") return {"wpe.weight", false};
  if (name == "lnf.w") return {"ln_f.weight", false};
  if (name == "lnf.b") return {"ln_f.bias", false};
  // "h.<l>.<part>"
  const size_t dot = name.find('.', 2);
  DTRAIN_CHECK(name.substr(0, 2) == "h." && dot != std::string_view::npos,
               "no GPT-2 name for tensor '", name, "'");
  const std::string prefix(name.substr(0, dot + 1));
  const std::string_view part = name.substr(dot + 1);
  struct Pair {
    std::string_view ours, theirs;
    bool transposed;
  };
  static constexpr Pair kParts[] = {
      {"ln1.w", "ln_1.weight", false},
      {"ln1.b", "ln_1.bias", false},
      {"attn.qkv.w", "attn.c_attn.weight", true},
      {"attn.qkv.b", "attn.c_attn.bias", false},
      {"attn.proj.w", "attn.c_proj.weight", true},
      {"attn.proj.b", "attn.c_proj.bias", false},
      {"ln2.w", "ln_2.weight", false},
      {"ln2.b", "ln_2.bias", false},
      {"mlp.fc.w", "mlp.c_fc.weight", true},
      {"mlp.fc.b", "mlp.c_fc.bias", false},
      {"mlp.proj.w", "mlp.c_proj.weight", true},
      {"mlp.proj.b", "mlp.c_proj.bias", false},
  };
  for (const Pair& p : kParts) {
    if (part == p.ours) return {prefix + std::string(p.theirs), p.transposed};
  }
  throw Error(str("no GPT-2 name for tensor '", name, "'"));
}

nlohmann::json hf_gpt2_config(const model::GptConfig& c) {
  return {{"model_type", "gpt2"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"vocab_size", c.vocab},
          {"n_positions", c.context},
          {"n_ctx", c.context},
          {"n_embd", c.channels},
          {"n_layer", c.layers},
          {"n_head", c.heads},
          {"n_inner", nullptr},
          {"layer_norm_epsilon", model::kLayerNormEps},
          {"activation_function", "gelu_new"},
          {"tie_word_embeddings", true},
          {"torch_dtype", "float32"}};
}

model::GptConfig parse_hf_gpt2_config(const nlohmann::json& j, std::string_view path) {
  DTRAIN_CHECK(j.is_object(), path, ": not a JSON object");
  DTRAIN_CHECK(!j.contains("model_type") || j["model_type"] == "gpt2", path, ": model_type ",
               j.value("model_type", nlohmann::json()).dump(), ", not \"gpt2\"");
  DTRAIN_CHECK(!j.contains("activation_function") || j["activation_function"] == "gelu_new", path,
               ": activation_function ", j["activation_function"].dump(),
               "; dtrain's GELU is the tanh approximation, \"gelu_new\"");
  if (j.contains("layer_norm_epsilon")) {
    DTRAIN_CHECK(j["layer_norm_epsilon"].is_number(), path, ": layer_norm_epsilon is not a number");
    const double eps = j["layer_norm_epsilon"].get<double>();
    DTRAIN_CHECK(std::abs(eps - model::kLayerNormEps) <= 1e-3 * model::kLayerNormEps, path,
                 ": layer_norm_epsilon ", eps, "; dtrain's LayerNorm uses ", model::kLayerNormEps);
  }
  DTRAIN_CHECK(!j.contains("n_inner") || j["n_inner"].is_null() ||
                   j["n_inner"] == 4 * config_int(j, "n_embd", path),
               path, ": n_inner ", j["n_inner"].dump(), "; dtrain's MLP is 4 x n_embd");
  model::GptConfig c;
  c.vocab = config_int(j, "vocab_size", path);
  c.context = config_int(j, "n_positions", path);
  c.layers = config_int(j, "n_layer", path);
  c.heads = config_int(j, "n_head", path);
  c.channels = config_int(j, "n_embd", path);
  DTRAIN_CHECK(c.channels % c.heads == 0, path, ": n_head ", c.heads, " does not divide n_embd ",
               c.channels);
  return c;
}

std::vector<SafetensorsTensor> to_hf_gpt2(const checkpoint::SerialState& state) {
  std::vector<SafetensorsTensor> out;
  for (const model::ParamTensor& t : state.table.tensors()) {
    const HfName hf = hf_gpt2_name(t.name);
    const std::span<const float> v = state.tensor(t, checkpoint::StateKind::param);
    if (hf.transposed) {
      out.push_back({hf.name, {t.shape[1], t.shape[0]}, transposed(v, t.shape[0], t.shape[1])});
    } else {
      out.push_back({hf.name, t.shape, {v.begin(), v.end()}});
    }
  }
  return out;
}

void export_hf_gpt2(const checkpoint::SerialState& state, const std::string& dir,
                    SafetensorsDtype dtype, std::string_view flag) {
  DTRAIN_CHECK(!state.model.llama(), flag,
               ": a Llama-family checkpoint is exported by formats::export_hf (hf_folder.h)");
  const std::vector<SafetensorsTensor> tensors = to_hf_gpt2(state);
  write_file_atomically((fs::path(dir) / kHfWeightsName).string(),
                        safetensors_bytes(tensors, dtype, {{"format", "pt"}}), flag);
  write_file_atomically((fs::path(dir) / kHfConfigName).string(),
                        hf_gpt2_config(state.model).dump(2) + "\n", flag);
}

model::GptConfig read_hf_gpt2_config(const std::string& dir, std::string_view flag) {
  DTRAIN_CHECK(fs::is_directory(dir), flag, " ", dir, ": not a directory (expected a folder with ",
               kHfConfigName, " and ", kHfWeightsName, ", as dtrain export writes)");
  const std::string config_path = (fs::path(dir) / kHfConfigName).string();
  std::ifstream in(config_path);
  DTRAIN_CHECK(in.good(), flag, " ", config_path, ": cannot be read");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(flag, " ", config_path, ": not valid JSON (", e.what(), ")"));
  }
  try {
    return parse_hf_gpt2_config(j, config_path);
  } catch (const Error& e) {
    throw Error(str(flag, " ", e.what()));
  }
}

namespace {

// The mapped weights file of `dir`, its index, and the entry of every tensor of `table` (in
// table order), each checked for its shape.
struct HfWeights {
  std::string path;
  std::shared_ptr<const MappedFile> file;
  SafetensorsIndex index;
  std::vector<const SafetensorsEntry*> entries;
};

HfWeights open_hf_weights(const std::string& dir, const model::ParamTable& table,
                          std::string_view flag) {
  HfWeights w;
  w.path = (fs::path(dir) / kHfWeightsName).string();
  w.file = MappedFile::open(w.path, flag);
  try {
    w.index = parse_safetensors(w.file->bytes(), w.path);
  } catch (const Error& e) {
    throw Error(str(flag, " ", e.what()));
  }
  for (const model::ParamTensor& t : table.tensors()) {
    const HfName hf = hf_gpt2_name(t.name);
    const SafetensorsEntry* e = w.index.find(hf.name);
    if (e == nullptr) e = w.index.find("transformer." + hf.name);
    DTRAIN_CHECK(e != nullptr, flag, " ", w.path, ": no tensor '", hf.name, "'");
    const std::vector<int64_t> want =
        hf.transposed ? std::vector<int64_t>{t.shape[1], t.shape[0]} : t.shape;
    DTRAIN_CHECK(e->shape == want, flag, " ", w.path, ": tensor '", e->name, "' has shape ",
                 nlohmann::json(e->shape).dump(), ", but ", kHfConfigName, " makes it ",
                 nlohmann::json(want).dump());
    w.entries.push_back(e);
  }
  return w;
}

}  // namespace

void check_hf_gpt2(const std::string& dir, const model::GptConfig& config, std::string_view flag) {
  (void)open_hf_weights(dir, model::gpt_param_table(config), flag);
}

checkpoint::SerialState load_hf_gpt2(const std::string& dir, std::string_view flag) {
  checkpoint::SerialState state;
  state.model = read_hf_gpt2_config(dir, flag);
  state.table = model::gpt_param_table(state.model);
  const auto n = static_cast<size_t>(state.table.total_count());
  state.params.assign(n, 0.0f);
  state.adam_m.assign(n, 0.0f);
  state.adam_v.assign(n, 0.0f);
  const HfWeights w = open_hf_weights(dir, state.table, flag);
  for (size_t i = 0; i < state.table.size(); ++i) {
    const model::ParamTensor& t = state.table[i];
    std::vector<float> v = read_tensor_f32(w.file->bytes(), w.index, *w.entries[i]);
    // A NaN or an infinity would make every loss NaN from the first step: refuse it here.
    const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
    DTRAIN_CHECK(bad == v.end(), flag, " ", w.path, ": tensor ", w.entries[i]->name, " holds ",
                 *bad, " at element ", bad - v.begin(), " of ", v.size(),
                 "; the weights must be finite numbers (re-export them from a healthy checkpoint)");
    if (hf_gpt2_name(t.name).transposed) v = transposed(v, t.shape[1], t.shape[0]);
    std::copy(v.begin(), v.end(), state.params.begin() + t.offset);
  }
  return state;
}

}  // namespace dtrain::formats
