// Room formats/ (dtrain::formats): model formats for other tools, safetensors and the Hugging
// Face GPT-2 mapping (export, --init-from); includes checkpoint and what lies below it.
//
// The model in Hugging Face's GPT-2 names and layouts, as a folder of model.safetensors and
// config.json: `dtrain export` writes it from a checkpoint of any layout (the serial state the
// checkpoint reader assembles), `dtrain train --init-from` reads it into any layout. Our Linear
// weights are (out, in); GPT-2's Conv1D weights are (in, out), so those four are transposed.
// The vocabulary is the real one: TP's padded rows are not part of the serial state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/checkpoint/train_state.h"
#include "dtrain/formats/safetensors.h"
#include "dtrain/model/gpt_config.h"

namespace dtrain::formats {

inline constexpr std::string_view kHfWeightsName = "model.safetensors";
inline constexpr std::string_view kHfConfigName = "config.json";

// The Hugging Face name of our serial tensor `name` ("h.0.attn.qkv.w" -> "h.0.attn.c_attn.weight")
// and whether it is stored transposed.
struct HfName {
  std::string name;
  bool transposed = false;
};
HfName hf_gpt2_name(std::string_view name);

// config.json's fields (n_embd, n_layer, n_head, n_positions, vocab_size, layer_norm_epsilon,
// activation_function "gelu_new", model_type "gpt2", ...), and back; errors name `path`.
nlohmann::json hf_gpt2_config(const model::GptConfig& config);
model::GptConfig parse_hf_gpt2_config(const nlohmann::json& json, std::string_view path);

// The parameters of `state` (serial layout) as GPT-2 tensors, in our table's order.
std::vector<SafetensorsTensor> to_hf_gpt2(const checkpoint::SerialState& state);

// Writes dir/model.safetensors and dir/config.json (each atomically); `dir` must exist.
void export_hf_gpt2(const checkpoint::SerialState& state, const std::string& dir,
                    SafetensorsDtype dtype, std::string_view flag);

// The model shape of `dir`'s config.json; errors name `flag` and the file.
model::GptConfig read_hf_gpt2_config(const std::string& dir, std::string_view flag);
// Checks `dir`'s model.safetensors for `config` without reading the values: the file is valid
// and holds every tensor with its GPT-2 shape (a run checks this before its first step).
void check_hf_gpt2(const std::string& dir, const model::GptConfig& config, std::string_view flag);

// Reads a folder export_hf_gpt2 (or Hugging Face's GPT-2, "transformer." prefixes and an
// lm_head tied to wte allowed) wrote: the serial state with those parameters, AdamW moments 0
// and step 0. Errors name `flag`, the file and the tensor.
checkpoint::SerialState load_hf_gpt2(const std::string& dir, std::string_view flag);

}  // namespace dtrain::formats
