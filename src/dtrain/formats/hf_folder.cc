// The folder dispatch: config.json's model_type picks GPT-2's mapping or Llama's.
#include "dtrain/formats/hf_folder.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "dtrain/core/check.h"
#include "dtrain/formats/hf_gpt2.h"
#include "dtrain/formats/hf_llama.h"

namespace dtrain::formats {
namespace {

namespace fs = std::filesystem;

struct Config {
  nlohmann::json json;
  std::string path;
  bool llama = false;
};

Config read_config(const std::string& dir, std::string_view flag) {
  DTRAIN_CHECK(fs::is_directory(dir), flag, " ", dir, ": not a directory (expected a folder with ",
               kHfConfigName, " and ", kHfWeightsName, ", as dtrain export writes)");
  Config c;
  c.path = (fs::path(dir) / kHfConfigName).string();
  std::ifstream in(c.path);
  DTRAIN_CHECK(in.good(), flag, " ", c.path, ": cannot be read");
  try {
    c.json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(flag, " ", c.path, ": not valid JSON (", e.what(), ")"));
  }
  const std::string type = c.json.is_object() ? c.json.value("model_type", std::string()) : "";
  c.llama = type == "llama" || type == "mixtral";
  return c;
}

}  // namespace

model::GptConfig read_hf_config(const std::string& dir, std::string_view flag) {
  const Config c = read_config(dir, flag);
  try {
    return c.llama ? parse_hf_llama_config(c.json, c.path) : parse_hf_gpt2_config(c.json, c.path);
  } catch (const Error& e) {
    throw Error(str(flag, " ", e.what()));
  }
}

void check_exportable(const model::GptConfig& config, std::string_view what) {
  DTRAIN_CHECK(config.llama() || !config.moe.enabled(), what, " holds a mixture-of-experts GPT (",
               model::describe(config),
               "): export writes GPT-2's dense layout, and Hugging Face's GPT-2 has no experts "
               "(a --family llama MoE exports as MixtralForCausalLM)");
  if (!config.llama()) return;
  try {
    check_hf_llama_exportable(config);
  } catch (const Error& e) {
    throw Error(str(what, ": ", e.what()));
  }
}

void export_hf(const checkpoint::SerialState& state, const std::string& dir, SafetensorsDtype dtype,
               std::string_view flag) {
  if (!state.model.llama()) {
    export_hf_gpt2(state, dir, dtype, flag);
    return;
  }
  write_file_atomically((fs::path(dir) / kHfWeightsName).string(),
                        safetensors_bytes(to_hf_llama(state), dtype, {{"format", "pt"}}), flag);
  write_file_atomically((fs::path(dir) / kHfConfigName).string(),
                        hf_llama_config(state.model).dump(2) + "\n", flag);
}

void check_hf(const std::string& dir, const model::GptConfig& config, std::string_view flag) {
  if (config.llama()) {
    check_hf_llama(dir, config, flag);
  } else {
    check_hf_gpt2(dir, config, flag);
  }
}

checkpoint::SerialState load_hf(const std::string& dir, std::string_view flag) {
  const model::GptConfig config = read_hf_config(dir, flag);
  return config.llama() ? load_hf_llama(dir, config, flag) : load_hf_gpt2(dir, flag);
}

}  // namespace dtrain::formats
