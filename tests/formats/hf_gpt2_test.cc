// The Hugging Face GPT-2 mapping: every tensor gets a distinct GPT-2 name, the four Linear
// weights are stored transposed (Conv1D's (in, out)), config.json carries the shape, and an
// export read back gives the parameters bitwise with zero AdamW moments.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/formats/hf_gpt2.h"
#include "dtrain/model/param_table.h"
#include "error_text.h"

namespace dtrain::formats {
namespace {

using test_support::error_of;

checkpoint::SerialState random_state(const model::GptConfig& c) {
  checkpoint::SerialState s;
  s.model = c;
  s.table = model::gpt_param_table(c);
  const auto n = static_cast<size_t>(s.table.total_count());
  Rng rng(9);
  s.params.resize(n);
  for (float& v : s.params) v = static_cast<float>(rng.normal());
  s.adam_m.assign(n, 1.0f);
  s.adam_v.assign(n, 2.0f);
  s.adam_step = 7;
  return s;
}

const model::GptConfig kConfig{.vocab = 301, .context = 8, .layers = 2, .heads = 2, .channels = 6};

TEST(HfGpt2, EveryTensorHasADistinctGpt2NameAndConv1dWeightsAreTransposed) {
  const checkpoint::SerialState s = random_state(kConfig);
  const std::vector<SafetensorsTensor> hf = to_hf_gpt2(s);
  ASSERT_EQ(hf.size(), s.table.size());
  std::set<std::string> names;
  for (const SafetensorsTensor& t : hf) names.insert(t.name);
  EXPECT_EQ(names.size(), hf.size());
  for (const char* n :
       {"wte.weight", "wpe.weight", "h.1.ln_1.weight", "h.1.attn.c_attn.bias",
        "h.0.attn.c_proj.weight", "h.0.mlp.c_fc.weight", "h.1.mlp.c_proj.bias", "ln_f.bias"}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
  const int64_t C = kConfig.channels;
  // c_attn.weight (C, 3C)[i][o] == our qkv.w (3C, C)[o][i]; c_proj of the MLP (4C, C).
  const auto& qkv =
      s.table[static_cast<size_t>(model::gpt_layer_param(1, model::LayerParam::qkv_w))];
  const auto& fc_proj =
      s.table[static_cast<size_t>(model::gpt_layer_param(1, model::LayerParam::fc_proj_w))];
  for (const SafetensorsTensor& t : hf) {
    if (t.name == "h.1.attn.c_attn.weight") {
      EXPECT_EQ(t.shape, (std::vector<int64_t>{C, 3 * C}));
      for (int64_t i = 0; i < C; ++i) {
        for (int64_t o = 0; o < 3 * C; ++o) {
          ASSERT_EQ(t.data[i * 3 * C + o], s.params[qkv.offset + o * C + i]);
        }
      }
    }
    if (t.name == "h.1.mlp.c_proj.weight") {
      EXPECT_EQ(t.shape, (std::vector<int64_t>{4 * C, C}));
      EXPECT_EQ(t.data[5 * C + 2], s.params[fc_proj.offset + 2 * 4 * C + 5]);
    }
    if (t.name == "wte.weight") {
      EXPECT_EQ(t.shape, (std::vector<int64_t>{301, C}));
    }
  }
}

TEST(HfGpt2, ExportReadsBackBitwiseWithFreshMoments) {
  const auto dir = std::filesystem::temp_directory_path() / "dtrain_hf_gpt2_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const checkpoint::SerialState s = random_state(kConfig);
  export_hf_gpt2(s, dir.string(), SafetensorsDtype::f32, "--output");
  const checkpoint::SerialState back = load_hf_gpt2(dir.string(), "--init-from");
  EXPECT_EQ(back.model, kConfig);
  ASSERT_EQ(back.params.size(), s.params.size());
  EXPECT_EQ(std::memcmp(back.params.data(), s.params.data(), s.params.size() * 4), 0);
  EXPECT_EQ(back.adam_step, 0);
  EXPECT_EQ(back.adam_m, std::vector<float>(s.params.size(), 0.0f));

  std::ifstream in(dir / kHfConfigName);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["n_embd"], 6);
  EXPECT_EQ(j["vocab_size"], 301);
  EXPECT_EQ(j["activation_function"], "gelu_new");
  EXPECT_EQ(j["model_type"], "gpt2");
  std::filesystem::remove_all(dir);
}

TEST(HfGpt2, ConfigErrorsNameTheFileAndField) {
  nlohmann::json j = hf_gpt2_config(kConfig);
  EXPECT_EQ(parse_hf_gpt2_config(j, "c.json"), kConfig);
  auto bad = j;
  bad["activation_function"] = "relu";
  EXPECT_NE(error_of([&] { parse_hf_gpt2_config(bad, "c.json"); }).find("activation_function"),
            std::string::npos);
  bad = j;
  bad.erase("n_head");
  EXPECT_NE(error_of([&] { parse_hf_gpt2_config(bad, "c.json"); }).find("c.json: no \"n_head\""),
            std::string::npos);
  bad = j;
  bad["layer_norm_epsilon"] = 1e-6;
  EXPECT_NE(error_of([&] { parse_hf_gpt2_config(bad, "c.json"); }).find("layer_norm_epsilon"),
            std::string::npos);
  bad = j;
  bad["n_head"] = 4;  // does not divide 6
  EXPECT_NE(error_of([&] { parse_hf_gpt2_config(bad, "c.json"); }).find("does not divide"),
            std::string::npos);
}

}  // namespace
}  // namespace dtrain::formats
