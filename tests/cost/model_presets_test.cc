// Parameter counts from the shape, against the published figures: GPT-3's shape by Narayanan et
// al. 2021 Eq. 2, the Megatron-LM 2021 family (Table 1 names each model by its Eq. 2 count), and
// the Llama 2 shapes counted component by component.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "dtrain/core/check.h"
#include "dtrain/cost/model_presets.h"

namespace dtrain::plan {
namespace {

// Eq. 2 as the paper writes it, in floating point: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)).
double narayanan_eq2(double l, double h, double V, double s) {
  return 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
}

TEST(ModelPresets, Gpt3ShapeGivesNarayananEq2) {
  const ModelShape& m = model_preset("gpt3-175b");
  ASSERT_EQ(m.layers, 96);
  ASSERT_EQ(m.hidden, 12288);
  ASSERT_EQ(m.vocab, 51200);
  ASSERT_EQ(m.seq, 2048);
  const double eq2 = narayanan_eq2(96, 12288, 51200, 2048);
  // Our count is the same sum in integers: 12 l h^2 + 13 l h + (V + s) h.
  EXPECT_EQ(shape_param_count(m), int64_t{12} * 96 * 12288 * 12288 + int64_t{13} * 96 * 12288 +
                                      int64_t{51200 + 2048} * 12288);
  EXPECT_NEAR(static_cast<double>(shape_param_count(m)), eq2, eq2 * 1e-12);
  // The paper's 174.6B is rounded to 0.1B, so the count lies within 0.05B of it.
  EXPECT_NEAR(static_cast<double>(param_count(m)) / 1e9, 174.6, 0.05);
}

TEST(ModelPresets, MegatronFamilyMatchesTable1Names) {
  // Table 1 of Narayanan et al. 2021 gives each model's size to 0.1B; our Eq. 2 count must round
  // to it.
  const struct {
    const char* name;
    double billions;
  } kTable[] = {{"megatron-1.7b", 1.7},     {"megatron-3.6b", 3.6},     {"megatron-7.5b", 7.5},
                {"megatron-18.4b", 18.4},   {"megatron-39.1b", 39.1},   {"megatron-76.1b", 76.1},
                {"megatron-145.6b", 145.6}, {"megatron-310.1b", 310.1}, {"megatron-529.6b", 529.6},
                {"megatron-1t", 1008.0}};
  for (const auto& row : kTable) {
    const ModelShape& m = model_preset(row.name);
    const double eq2 = narayanan_eq2(static_cast<double>(m.layers), static_cast<double>(m.hidden),
                                     static_cast<double>(m.vocab), static_cast<double>(m.seq));
    EXPECT_NEAR(static_cast<double>(param_count(m)), eq2, eq2 * 1e-12) << row.name;
    EXPECT_NEAR(static_cast<double>(param_count(m)) / 1e9, row.billions, 0.05) << row.name;
  }
}

// Llama: per layer Q and O (h x h each), K and V (h x kv*d each), SwiGLU (3 h f), two RMSNorm
// weight vectors (2h); embeddings V h, untied output V h, final RMSNorm h.
int64_t llama_by_hand(int64_t l, int64_t h, int64_t a, int64_t kv, int64_t f, int64_t V) {
  const int64_t d = h / a;
  const int64_t layer = 2 * h * h + 2 * h * kv * d + 3 * h * f + 2 * h;
  return l * layer + 2 * V * h + h;
}

TEST(ModelPresets, Llama2ShapesCountedByComponent) {
  EXPECT_EQ(param_count(model_preset("llama2-7b")), llama_by_hand(32, 4096, 32, 32, 11008, 32000));
  EXPECT_EQ(param_count(model_preset("llama2-13b")), llama_by_hand(40, 5120, 40, 40, 13824, 32000));
  EXPECT_EQ(param_count(model_preset("llama2-70b")), llama_by_hand(80, 8192, 64, 8, 28672, 32000));
  // The model names round these: 6.74B -> 7B, 13.0B -> 13B, 69.0B -> 70B (within 4%).
  EXPECT_NEAR(static_cast<double>(param_count(model_preset("llama2-7b"))) / 7e9, 1, 0.04);
  EXPECT_NEAR(static_cast<double>(param_count(model_preset("llama2-13b"))) / 13e9, 1, 0.04);
  EXPECT_NEAR(static_cast<double>(param_count(model_preset("llama2-70b"))) / 70e9, 1, 0.04);
}

TEST(ModelPresets, GptLayerCountIsTwelveHSquaredPlusThirteenH) {
  ModelShape m;
  m.family = ModelFamily::gpt;
  m.layers = 2;
  m.hidden = 64;
  m.heads = 4;
  m.vocab = 100;
  m.seq = 16;
  EXPECT_EQ(layer_param_count(m), 12 * 64 * 64 + 13 * 64);
  EXPECT_EQ(layer_matmul_param_count(m), 12 * 64 * 64);
  EXPECT_EQ(embedding_param_count(m), (100 + 16) * 64);
  EXPECT_EQ(head_param_count(m), 0);
}

TEST(ModelPresets, ParamsOverrideWins) {
  ModelShape m = model_preset("llama2-7b");
  m.params_override = 7'000'000'000;
  EXPECT_EQ(param_count(m), 7'000'000'000);
  EXPECT_NE(shape_param_count(m), 7'000'000'000);
}

TEST(ModelPresets, PresetLookupIsCaseInsensitiveAndErrorsNameTheFlag) {
  EXPECT_EQ(model_preset("LLAMA2-70B").name, "llama2-70b");
  try {
    model_preset("gpt5");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--model"), std::string::npos) << what;
    EXPECT_NE(what.find("gpt5"), std::string::npos) << what;
    EXPECT_NE(what.find("llama2-70b"), std::string::npos) << what;
  }
}

TEST(ModelPresets, ValidateNamesTheField) {
  ModelShape m = model_preset("gpt3-175b");
  m.layers = 0;
  EXPECT_THROW(
      {
        try {
          validate(m);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("--layers"), std::string::npos);
          throw;
        }
      },
      Error);
  m = model_preset("gpt3-175b");
  m.heads = 7;
  try {
    validate(m);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--heads 7 does not divide --hidden 12288"),
              std::string::npos)
        << e.what();
  }
  m = model_preset("gpt3-175b");
  m.vocab = -5;
  try {
    validate(m);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--vocab"), std::string::npos) << e.what();
  }
}

TEST(ModelPresets, EveryPresetIsValidAndSourced) {
  for (const ModelShape& m : model_presets()) {
    EXPECT_NO_THROW(validate(m)) << m.name;
    EXPECT_FALSE(m.source.empty()) << m.name;
    // Mixtral's paper publishes no batch size: its plans need --global-batch.
    if (m.name == "mixtral-8x7b") {
      EXPECT_EQ(m.default_global_batch, 0);
    } else {
      EXPECT_GT(m.default_global_batch, 0) << m.name;
    }
  }
}

}  // namespace
}  // namespace dtrain::plan
