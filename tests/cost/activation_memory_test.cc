// activation_bytes_per_layer against Korthikanti et al. 2022's closed forms (Eq. 1, 2, 4 and
// the selective and full recompute cases), and the Llama-style extension (grouped K/V, SwiGLU)
// against its components.
#include <gtest/gtest.h>

#include "dtrain/cost/activation_memory.h"

namespace dtrain::plan {
namespace {

// A GPT-3-like layer: s = 2048, b = 1, h = 12288, a = 96 (2-byte activations, dropout on).
ActivationShape gpt3_layer() {
  ActivationShape x;
  x.seq = 2048;
  x.micro_batch = 1;
  x.hidden = 12288;
  x.heads = 96;
  return x;
}

double sbh(const ActivationShape& x) {
  return static_cast<double>(x.seq) * static_cast<double>(x.micro_batch) *
         static_cast<double>(x.hidden);
}
double as_over_h(const ActivationShape& x) {
  return static_cast<double>(x.heads) * static_cast<double>(x.seq) / static_cast<double>(x.hidden);
}

TEST(ActivationMemory, KorthikantiEquation1NoParallelism) {
  const ActivationShape x = gpt3_layer();
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(x), sbh(x) * (34 + 5 * as_over_h(x)));
}

TEST(ActivationMemory, KorthikantiEquation2TensorParallel) {
  for (int t : {2, 4, 8}) {
    ActivationShape x = gpt3_layer();
    x.tp = t;
    EXPECT_DOUBLE_EQ(activation_bytes_per_layer(x), sbh(x) * (10 + 24.0 / t + 5 * as_over_h(x) / t))
        << "t=" << t;
  }
}

TEST(ActivationMemory, KorthikantiEquation4SequenceParallel) {
  ActivationShape x = gpt3_layer();
  x.tp = 8;
  x.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(x), sbh(x) / 8 * (34 + 5 * as_over_h(x)));
}

TEST(ActivationMemory, SelectiveDropsTheScoresFullKeepsTheInput) {
  ActivationShape x = gpt3_layer();
  x.tp = 8;
  x.sequence_parallel = true;
  x.recompute = Recompute::selective;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(x), sbh(x) / 8 * 34);  // Eq. 6
  x.recompute = Recompute::full;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(x), 2 * sbh(x) / 8);
  x.sequence_parallel = false;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(x), 2 * sbh(x));
}

TEST(ActivationMemory, NewFieldsAtTheirDefaultsChangeNothing) {
  // The engine's tests initialise the shape with the first fields only; kv_heads = 0 and
  // gated_mlp = false must give the original count.
  ActivationShape x{64, 2, 128, 4, 0, 1, false, Recompute::none, 4, false, true};
  ActivationShape same = x;
  same.kv_heads = x.heads;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(x), activation_bytes_per_layer(same));
  // Components with 4-byte elements, no dropout, LayerNorm statistics kept:
  // 4 sbh + 4 sbh + 2*4h*sb + a s^2 b elements, + 4 s b floats.
  const double s = 64, b = 2, h = 128, a = 4;
  const double expected = 4 * (8 * s * b * h + 8 * h * s * b + a * s * s * b) + 4 * 4 * s * b;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(x), expected);
}

TEST(ActivationMemory, GroupedKeyValueHeadsAndSwiGlu) {
  // Llama-2-70B-like: h = 8192, 64 heads, 8 K/V heads, f = 28672, no dropout, selective.
  ActivationShape x;
  x.seq = 4096;
  x.micro_batch = 1;
  x.hidden = 8192;
  x.heads = 64;
  x.kv_heads = 8;
  x.ffn_hidden = 28672;
  x.tp = 8;
  x.dropout = false;
  x.recompute = Recompute::selective;
  x.gated_mlp = true;
  const double s = 4096, h = 8192, f = 28672, t = 8;
  // LN1 in, QKV in, LN2 in, MLP in: 4 sbh; Q and projection input 2 sbh/t; K and V each
  // sbh * 8/64 / t; gate, up and down-input 3 f s b / t. Two bytes each.
  const double elements = 4 * s * h + 2 * s * h / t + 2 * s * h * (8.0 / 64) / t + 3 * f * s / t;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(x), 2 * elements);
}

}  // namespace
}  // namespace dtrain::plan
