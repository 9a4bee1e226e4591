// WeightGradStash: one buffer per micro-batch, cut into each block's four output gradients in
// the order of BlockOutputGrads.
#include "dtrain/model/weight_grad_stash.h"

#include "dtrain/core/check.h"
#include "dtrain/model/block_ops.h"

namespace dtrain::model {

WeightGradStash::WeightGradStash(const GptConfig& config, int64_t B, int64_t T,
                                 MemoryTracker* tracker, LayerRange layers, int tp)
    : range_(layers) {
  DTRAIN_CHECK(tp > 0 && config.channels % tp == 0, "WeightGradStash: tp ", tp,
               " does not divide C ", config.channels);
  const int64_t BT = B * T, C = config.channels;
  // The qkv product's columns and the MLP's first product's, on this TP rank.
  const block::Widths w = block::widths(config, tp);
  const int64_t qkv = w.qkv, fc = w.fc;
  const int64_t per_layer = BT * (qkv + C + fc + C);
  storage_ = Buffer<float>(per_layer * layers.count, MemoryTag::activations, tracker);
  float* p = storage_.data();
  for (int64_t l = 0; l < layers.count; ++l) {
    BlockOutputGrads g;
    g.dqkv = p;
    p += BT * qkv;
    g.dproj = p;
    p += BT * C;
    g.dfc = p;
    p += BT * fc;
    g.dfc_proj = p;
    p += BT * C;
    layers_.push_back(g);
  }
}

}  // namespace dtrain::model
