// FLOP counts against Narayanan et al. 2021 §5.1 (the 72 and 96 forms of their Eq. 3, derived
// below) and their end-to-end training-time estimates (GPT-3 in ~34 days, the 1T model in ~84).
#include <gtest/gtest.h>

#include "dtrain/plan/compute_model.h"

namespace dtrain::plan {
namespace {

TEST(ComputeModel, NarayananFormsForGpt) {
  // Per step of B sequences: 3 passes (forward, 2x backward) of l (24Bsh^2 + 4Bs^2h) plus the
  // logit layer's 3 * 2BshV = 72 B s l h^2 (1 + s/(6h) + V/(12 l h)); full recompute adds one
  // more forward of the layers, giving Eq. 3: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
  const ModelShape& m = model_preset("gpt3-175b");
  const double B = 1536, s = 2048, l = 96, h = 12288, V = 51200;
  const double no_recompute = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
  const double eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  const TrainingFlops none = training_flops(m, B, Recompute::none, FlopsConvention::narayanan);
  EXPECT_NEAR(none.model, no_recompute, no_recompute * 1e-12);
  EXPECT_EQ(none.recompute, 0);
  const TrainingFlops full = training_flops(m, B, Recompute::full, FlopsConvention::narayanan);
  EXPECT_NEAR(full.model, no_recompute, no_recompute * 1e-12);  // MFU counts no recompute
  EXPECT_NEAR(full.hardware(), eq3, eq3 * 1e-12);
  // Selective recompute adds only attention's two s x s products: l * 4 B s^2 h.
  const TrainingFlops sel = training_flops(m, B, Recompute::selective, FlopsConvention::narayanan);
  EXPECT_NEAR(sel.recompute, l * 4 * B * s * s * h, 1);
}

TEST(ComputeModel, SixNdConvention) {
  const ModelShape& m = model_preset("llama2-7b");
  const double n = static_cast<double>(param_count(m));
  const double tokens = 256.0 * m.seq;
  const TrainingFlops f = training_flops(m, 256, Recompute::full, FlopsConvention::six_nd);
  EXPECT_DOUBLE_EQ(f.model, 6 * n * tokens);
  EXPECT_DOUBLE_EQ(f.hardware(), 8 * n * tokens);
  EXPECT_EQ(training_flops(m, 256, Recompute::none, FlopsConvention::six_nd).recompute, 0);
}

TEST(ComputeModel, GeneralShapeUsesTheMatmulWeights) {
  // Llama: 2 FLOPs per matmul weight per token plus 4 s h per token for attention.
  const ModelShape& m = model_preset("llama2-70b");
  const double tokens = 4096;
  EXPECT_DOUBLE_EQ(
      layer_forward_flops(m, tokens, 4096),
      2 * tokens * static_cast<double>(layer_matmul_param_count(m)) + 4 * tokens * 4096 * 8192);
  EXPECT_DOUBLE_EQ(recompute_flops_per_layer(m, tokens, 4096, Recompute::full),
                   layer_forward_flops(m, tokens, 4096));
}

TEST(ComputeModel, NarayananTrainingTimeEstimates) {
  // §5.1: with full recompute the FLOPs per token are ~8P (Eq. 3 with 96 B s l h^2 ~ 8 B s P), so
  // training T tokens on n GPUs at X FLOP/s each takes ~8 T P / (n X).
  auto days = [](double params, double tokens, double gpus, double flops_per_gpu) {
    const double tokens_per_s = gpus * flops_per_gpu / (8 * params);
    return days_to_train(tokens, tokens_per_s);
  };
  // P is each model's Eq. 2 count (174.6B and 1008.0B); the paper rounds the days to whole ones.
  const double gpt3 = static_cast<double>(param_count(model_preset("gpt3-175b")));
  const double one_t = static_cast<double>(param_count(model_preset("megatron-1t")));
  // GPT-3: 300B tokens, 1024 A100s at 140 teraFLOP/s: "~34 days".
  EXPECT_NEAR(days(gpt3, 300e9, 1024, 140e12), 34, 0.5);
  // The 1T model: 450B tokens, 3072 A100s at 163 teraFLOP/s: "~84 days".
  EXPECT_NEAR(days(one_t, 450e9, 3072, 163e12), 84, 0.5);
}

TEST(ComputeModel, ConventionNames) {
  EXPECT_EQ(parse_flops_convention("narayanan"), FlopsConvention::narayanan);
  EXPECT_EQ(parse_flops_convention("6nd"), FlopsConvention::six_nd);
  EXPECT_FALSE(parse_flops_convention("7nd").has_value());
}

}  // namespace
}  // namespace dtrain::plan
