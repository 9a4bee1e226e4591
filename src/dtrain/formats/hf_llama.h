// The Llama family in Hugging Face's LlamaForCausalLM names and layouts, as a folder of
// model.safetensors and config.json: `dtrain export` writes it from a checkpoint of any layout,
// `dtrain train --init-from` reads it (ours or Hugging Face's) into any layout. Our Linear
// weights are (out, in) as torch's, so nothing is transposed; our fused [q | k | v] and
// [gate | up] products are q_proj, k_proj, v_proj and gate_proj, up_proj row blocks. RoPE is
// Hugging Face's rotate_half convention on both sides, so the weights run unchanged there.
// A Mixtral-like model (--family llama with --experts, every block routed) is MixtralForCausalLM:
// each block's router is block_sparse_moe.gate and expert j's gate, down and up projections are
// block_sparse_moe.experts.j.w1, w2 and w3, rows of our stacked expert tensors.
// The folder dispatch (GPT-2 or Llama by config.json's model_type) is hf_folder.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/checkpoint/train_state.h"
#include "dtrain/formats/safetensors.h"
#include "dtrain/model/gpt_config.h"

namespace dtrain::formats {

// config.json's fields (model_type "llama", hidden_size, intermediate_size, num_attention_heads,
// num_key_value_heads, num_hidden_layers, vocab_size, max_position_embeddings, rms_norm_eps,
// rope_theta, tie_word_embeddings, hidden_act "silu", no biases), and back; errors name `path`
// and the field.
// Mixtral's: model_type "mixtral", num_local_experts, num_experts_per_tok, no window; read back
// dropless with every block routed. A model that routes only some blocks has no Hugging Face
// form: check_hf_llama_exportable refuses it, naming --moe-every.
void check_hf_llama_exportable(const model::GptConfig& config);
nlohmann::json hf_llama_config(const model::GptConfig& config);
model::GptConfig parse_hf_llama_config(const nlohmann::json& json, std::string_view path);

// The parameters of `state` (serial layout) as Hugging Face Llama tensors.
std::vector<SafetensorsTensor> to_hf_llama(const checkpoint::SerialState& state);

// Checks `dir`'s model.safetensors for `config` without reading the values (every tensor there
// with its shape); reads it into a serial state (moments 0, step 0), errors naming `flag`, the
// file and the tensor.
void check_hf_llama(const std::string& dir, const model::GptConfig& config, std::string_view flag);
checkpoint::SerialState load_hf_llama(const std::string& dir, const model::GptConfig& config,
                                      std::string_view flag);

}  // namespace dtrain::formats
