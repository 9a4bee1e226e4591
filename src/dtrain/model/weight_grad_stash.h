// WeightGradStash: what a split (zero-bubble) backward keeps between B and W for one
// micro-batch of a range of blocks: each of a block's four linears' output gradient. The
// linears' inputs are activations GptActivations already holds, so W needs nothing else.
#pragma once

#include <cstdint>
#include <vector>

#include "dtrain/core/buffer.h"
#include "dtrain/model/gpt_config.h"
#include "dtrain/model/gpt_stage.h"

namespace dtrain::model {

// One block's kept output gradients (pointers into the stash's one buffer).
struct BlockOutputGrads {
  float* dqkv = nullptr;      // (B, T, 3*C_local) qkv linear's output gradient
  float* dproj = nullptr;     // (B, T, C)         attention projection's (d ln2_in)
  float* dfc = nullptr;       // (B, T, 4*C_local) MLP fc's (d GELU input)
  float* dfc_proj = nullptr;  // (B, T, C)         MLP projection's (d block output)
};

class WeightGradStash {
 public:
  // Blocks `layers` of a (B, T) micro-batch; with tp > 1 the column-parallel outputs (qkv, fc)
  // are a TP rank's. Charged to the activations tag: plan::weight_grad_stash_bytes_per_layer
  // per block.
  WeightGradStash(const GptConfig& config, int64_t B, int64_t T, MemoryTracker* tracker,
                  LayerRange layers, int tp = 1);

  BlockOutputGrads& layer(int64_t l) { return layers_[static_cast<size_t>(l - range_.first)]; }
  LayerRange range() const { return range_; }

 private:
  LayerRange range_;
  Buffer<float> storage_;
  std::vector<BlockOutputGrads> layers_;
};

}  // namespace dtrain::model
