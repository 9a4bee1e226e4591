// Measured memory vs the planner's formulas: the activation bytes the model keeps per block
// equal plan::activation_bytes_per_layer (fp32, no dropout, LayerNorm statistics), the rest
// equals plan::head_activation_bytes + plan::workspace_activation_bytes, and params/grads are
// 4 bytes per parameter. "Measured" means read from the MemoryTracker the buffers charge.
#include <gtest/gtest.h>

#include "dtrain/cost/activation_memory.h"
#include "dtrain/cost/head_activation_memory.h"
#include "dtrain/model/gpt.h"

namespace dtrain::model {
namespace {

struct Shape {
  GptConfig config;
  int64_t B, T;
};

std::vector<Shape> shapes() {
  return {
      {gpt_preset("tiny").config, 8, 32},
      {gpt_preset("bench").config, 8, 64},
      {{.vocab = 300, .context = 9, .layers = 3, .heads = 3, .channels = 24}, 3, 7},  // odd sizes
  };
}

plan::ActivationShape layer_shape(const Shape& s) {
  plan::ActivationShape a;
  a.seq = s.T;
  a.micro_batch = s.B;
  a.hidden = s.config.channels;
  a.heads = s.config.heads;
  a.bytes_per_element = 4;
  a.dropout = false;
  a.count_layernorm_stats = true;
  return a;
}

plan::HeadActivationShape head_shape(const Shape& s) {
  return {.seq = s.T,
          .micro_batch = s.B,
          .hidden = s.config.channels,
          .vocab = s.config.vocab,
          .bytes_per_element = 4};
}

int64_t activation_bytes(const GptConfig& g, int64_t B, int64_t T) {
  MemoryTracker tracker;
  GptActivations acts(g, B, T, &tracker);
  return tracker.current_bytes(MemoryTag::activations);
}

TEST(ActivationMemory, PerLayerBytesEqualThePlanFormula) {
  for (const Shape& s : shapes()) {
    // Two models that differ by exactly one block: the difference is one block's bytes.
    GptConfig one = s.config, two = s.config;
    one.layers = 1;
    two.layers = 2;
    const int64_t per_layer = activation_bytes(two, s.B, s.T) - activation_bytes(one, s.B, s.T);
    const double planned = plan::activation_bytes_per_layer(layer_shape(s));
    EXPECT_EQ(static_cast<double>(per_layer), planned) << describe(s.config);
    std::printf("%s B=%lld T=%lld: %lld activation bytes per layer (plan: %.0f)\n",
                describe(s.config).c_str(), static_cast<long long>(s.B),
                static_cast<long long>(s.T), static_cast<long long>(per_layer), planned);
  }
}

TEST(ActivationMemory, HeadAndWorkspaceEqualThePlanFormulas) {
  for (const Shape& s : shapes()) {
    const int64_t all = activation_bytes(s.config, s.B, s.T);
    const double layers =
        static_cast<double>(s.config.layers) * plan::activation_bytes_per_layer(layer_shape(s));
    EXPECT_EQ(static_cast<double>(all), layers + plan::head_activation_bytes(head_shape(s)))
        << describe(s.config);
    MemoryTracker tracker;
    GptWorkspace ws(s.config, s.B, s.T, &tracker);
    EXPECT_EQ(static_cast<double>(tracker.current_bytes(MemoryTag::activations)),
              plan::workspace_activation_bytes(head_shape(s)))
        << describe(s.config);
  }
}

TEST(ActivationMemory, ModelChargesEveryTagItOwns) {
  const Shape s = shapes()[0];
  MemoryTracker tracker;
  {
    GptModel m(s.config, &tracker);
    const int64_t param_bytes = 4 * gpt_param_count(s.config);
    EXPECT_EQ(tracker.current_bytes(MemoryTag::params), param_bytes);
    EXPECT_EQ(tracker.current_bytes(MemoryTag::grads), param_bytes);
    EXPECT_EQ(tracker.current_bytes(MemoryTag::activations), 0);  // sized on first use
    m.set_batch_shape(s.B, s.T);
    EXPECT_EQ(
        static_cast<double>(tracker.current_bytes(MemoryTag::activations)),
        static_cast<double>(s.config.layers) * plan::activation_bytes_per_layer(layer_shape(s)) +
            plan::head_activation_bytes(head_shape(s)) +
            plan::workspace_activation_bytes(head_shape(s)));
  }
  for (int t = 0; t < kMemoryTagCount; ++t) {
    EXPECT_EQ(tracker.current_bytes(static_cast<MemoryTag>(t)), 0) << "leak in tag " << t;
  }
}

}  // namespace
}  // namespace dtrain::model
