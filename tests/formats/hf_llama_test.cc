// The Llama family's Hugging Face folder: every serial tensor split into Hugging Face's names
// (q/k/v and gate/up as row blocks of the fused products, element by element), export then load
// bitwise with zero moments (untied and tied heads, and Mixtral's experts), config.json both
// ways, and the fields dtrain's block cannot run refused naming the file and the field.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/formats/hf_folder.h"
#include "dtrain/formats/hf_llama.h"
#include "dtrain/model/param_table.h"

namespace dtrain::formats {
namespace {

model::GptConfig llama(bool tied) {
  model::GptConfig c;
  c.family = model::ModelFamily::llama;
  c.vocab = 37;
  c.context = 16;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.channels = 8;
  c.ffn_hidden = 12;
  c.rope_theta = 500000.0f;
  c.norm_eps = 1e-6f;
  c.tie_embeddings = tied;
  return c;
}

// Mixtral-like: 3 SwiGLU experts, top-2, every block routed.
model::GptConfig mixtral() {
  model::GptConfig c = llama(false);
  c.moe = {.experts = 3, .top_k = 2, .every = 1};
  return c;
}

checkpoint::SerialState random_state(const model::GptConfig& c) {
  checkpoint::SerialState s;
  s.model = c;
  s.table = model::gpt_param_table(c);
  const auto n = static_cast<size_t>(s.table.total_count());
  Rng rng(11);
  s.params.resize(n);
  for (float& v : s.params) v = static_cast<float>(rng.normal());
  s.adam_m.assign(n, 1.0f);
  s.adam_v.assign(n, 2.0f);
  s.adam_step = 3;
  return s;
}

TEST(HfLlama, FusedProductsSplitIntoHuggingFacesProjectionsElementByElement) {
  const model::GptConfig c = llama(false);
  const checkpoint::SerialState s = random_state(c);
  std::map<std::string, SafetensorsTensor> hf;
  for (SafetensorsTensor& t : to_hf_llama(s)) hf[t.name] = std::move(t);
  // 1 + 2 x 9 + 2 tensors; q (NH HS = 8 rows), k and v (NKV HS = 4 rows each) of C = 8 columns.
  EXPECT_EQ(hf.size(), 21u);
  const model::ParamTensor& qkv = s.table[static_cast<size_t>(s.table.index_of("h.1.attn.qkv.w"))];
  const float* w = s.params.data() + qkv.offset;
  ASSERT_EQ(hf["model.layers.1.self_attn.k_proj.weight"].shape, (std::vector<int64_t>{4, 8}));
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t col = 0; col < 8; ++col) {
      EXPECT_EQ(hf["model.layers.1.self_attn.q_proj.weight"].data[r * 8 + col], w[r * 8 + col]);
      EXPECT_EQ(hf["model.layers.1.self_attn.k_proj.weight"].data[r * 8 + col],
                w[(8 + r) * 8 + col]);
      EXPECT_EQ(hf["model.layers.1.self_attn.v_proj.weight"].data[r * 8 + col],
                w[(12 + r) * 8 + col]);
    }
  }
  const model::ParamTensor& fc = s.table[static_cast<size_t>(s.table.index_of("h.0.mlp.fc.w"))];
  EXPECT_EQ(hf["model.layers.0.mlp.up_proj.weight"].shape, (std::vector<int64_t>{12, 8}));
  EXPECT_EQ(hf["model.layers.0.mlp.up_proj.weight"].data[0], s.params[fc.offset + 12 * 8]);
  EXPECT_EQ(hf["model.layers.0.mlp.gate_proj.weight"].data[5], s.params[fc.offset + 5]);
  EXPECT_EQ(hf["model.norm.weight"].shape, (std::vector<int64_t>{8}));
  EXPECT_TRUE(hf.contains("lm_head.weight"));
}

// Mixtral: expert j's w1 (gate), w3 (up) and w2 (down) are its rows of the stacked tensors, the
// router is block_sparse_moe.gate; no dense MLP tensors.
TEST(HfLlama, MixtralExpertsAreRowsOfTheStackedTensors) {
  const model::GptConfig c = mixtral();
  const checkpoint::SerialState s = random_state(c);
  std::map<std::string, SafetensorsTensor> hf;
  for (SafetensorsTensor& t : to_hf_llama(s)) hf[t.name] = std::move(t);
  // 1 + 2 x (6 + 1 router + 3 experts x 3) + 2 tensors.
  EXPECT_EQ(hf.size(), 35u);
  EXPECT_FALSE(hf.contains("model.layers.0.mlp.gate_proj.weight"));
  const std::string moe = "model.layers.1.block_sparse_moe.";
  const auto offset = [&](const char* name) {
    return s.table[static_cast<size_t>(s.table.index_of(name))].offset;
  };
  // fc (3, 2F = 24, C = 8): expert 2's gate rows start at 2 x 24 x 8, its up rows 12 x 8 later.
  ASSERT_EQ(hf[moe + "experts.2.w1.weight"].shape, (std::vector<int64_t>{12, 8}));
  ASSERT_EQ(hf[moe + "experts.2.w2.weight"].shape, (std::vector<int64_t>{8, 12}));
  const int64_t fc = offset("h.1.moe.fc.w"), proj = offset("h.1.moe.proj.w");
  for (int64_t i = 0; i < 12 * 8; ++i) {
    EXPECT_EQ(hf[moe + "experts.2.w1.weight"].data[i], s.params[fc + 2 * 24 * 8 + i]);
    EXPECT_EQ(hf[moe + "experts.2.w3.weight"].data[i], s.params[fc + 2 * 24 * 8 + 12 * 8 + i]);
    EXPECT_EQ(hf[moe + "experts.2.w2.weight"].data[i], s.params[proj + 2 * 8 * 12 + i]);
  }
  EXPECT_EQ(hf[moe + "gate.weight"].shape, (std::vector<int64_t>{3, 8}));
  EXPECT_EQ(hf[moe + "gate.weight"].data[9], s.params[offset("h.1.moe.router.w") + 9]);
  const nlohmann::json j = hf_llama_config(c);
  EXPECT_EQ(j["model_type"], "mixtral");
  EXPECT_EQ(j["architectures"][0], "MixtralForCausalLM");
  EXPECT_EQ(j["num_local_experts"], 3);
  EXPECT_EQ(j["num_experts_per_tok"], 2);
  // Routing only some blocks has no Mixtral form.
  model::GptConfig every2 = c;
  every2.moe.every = 2;
  EXPECT_THROW(check_exportable(every2, "--checkpoint ck"), Error);
  model::GptConfig gpt_moe;
  gpt_moe.moe = c.moe;
  EXPECT_THROW(check_exportable(gpt_moe, "--checkpoint ck"), Error);
  EXPECT_NO_THROW(check_exportable(c, "--checkpoint ck"));
}

TEST(HfLlama, ExportReadsBackBitwiseWithFreshMoments) {
  for (const model::GptConfig& c : {llama(false), llama(true), mixtral()}) {
    const auto dir = std::filesystem::temp_directory_path() / "dtrain_hf_llama_test";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const checkpoint::SerialState s = random_state(c);
    export_hf(s, dir.string(), SafetensorsDtype::f32, "--output");
    EXPECT_EQ(read_hf_config(dir.string(), "--init-from"), c);
    const checkpoint::SerialState back = load_hf(dir.string(), "--init-from");
    EXPECT_EQ(back.model, c);
    ASSERT_EQ(back.params.size(), s.params.size());
    EXPECT_EQ(std::memcmp(back.params.data(), s.params.data(), s.params.size() * 4), 0);
    EXPECT_EQ(back.adam_step, 0);
    EXPECT_EQ(back.adam_m, std::vector<float>(s.params.size(), 0.0f));
    std::filesystem::remove_all(dir);
  }
}

TEST(HfLlama, ConfigErrorsNameTheFileAndField) {
  const model::GptConfig c = llama(false);
  const nlohmann::json j = hf_llama_config(c);
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["intermediate_size"], 12);
  EXPECT_EQ(parse_hf_llama_config(j, "c.json"), c);
  const auto refused = [&](const char* key, nlohmann::json value, const char* says) {
    nlohmann::json bad = j;
    bad[key] = std::move(value);
    try {
      (void)parse_hf_llama_config(bad, "c.json");
      ADD_FAILURE() << key << " was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("c.json"), std::string::npos) << what;
      EXPECT_NE(what.find(says), std::string::npos) << what;
    }
  };
  refused("attention_bias", true, "attention_bias");
  refused("hidden_act", "gelu", "hidden_act");
  refused("rope_scaling", {{"type", "linear"}, {"factor", 2.0}}, "rope_scaling");
  refused("num_key_value_heads", 3, "--kv-heads 3 must divide --heads 4");
  refused("head_dim", 4, "head_dim");
  refused("model_type", "mistral", "model_type");
  // Mixtral's fields: the experts are required, a window shorter than the context refused.
  const nlohmann::json m = hf_llama_config(mixtral());
  EXPECT_EQ(parse_hf_llama_config(m, "c.json"), mixtral());
  nlohmann::json no_experts = m;
  no_experts.erase("num_local_experts");
  EXPECT_THROW((void)parse_hf_llama_config(no_experts, "c.json"), Error);
  nlohmann::json windowed = m;
  windowed["sliding_window"] = 4;
  EXPECT_THROW((void)parse_hf_llama_config(windowed, "c.json"), Error);
  windowed["sliding_window"] = 16;  // the whole context: full causal attention
  EXPECT_EQ(parse_hf_llama_config(windowed, "c.json"), mixtral());
}

}  // namespace
}  // namespace dtrain::formats
