// A Hugging Face model folder (model.safetensors + config.json) of either family dtrain trains:
// GPT-2 (hf_gpt2.h) or Llama (hf_llama.h), told apart by config.json's model_type ("gpt2", or
// absent, as GPT-2 folders often leave it; "llama", or "mixtral" for Llama with experts). What
// `dtrain export` and `--init-from` call.
#pragma once

#include <string>
#include <string_view>

#include "dtrain/checkpoint/train_state.h"
#include "dtrain/formats/hf_gpt2.h"  // kHfWeightsName, kHfConfigName
#include "dtrain/formats/safetensors.h"
#include "dtrain/model/gpt_config.h"

namespace dtrain::formats {

// The model shape of `dir`'s config.json; errors name `flag` and the file.
model::GptConfig read_hf_config(const std::string& dir, std::string_view flag);
// Refuses a model without a Hugging Face form (a GPT with experts, a Llama MoE that routes only
// some blocks), naming `what` (e.g. "--checkpoint DIR").
void check_exportable(const model::GptConfig& config, std::string_view what);
// Writes dir/model.safetensors and dir/config.json (each atomically) in the state's family.
void export_hf(const checkpoint::SerialState& state, const std::string& dir, SafetensorsDtype dtype,
               std::string_view flag);
void check_hf(const std::string& dir, const model::GptConfig& config, std::string_view flag);
checkpoint::SerialState load_hf(const std::string& dir, std::string_view flag);

}  // namespace dtrain::formats
