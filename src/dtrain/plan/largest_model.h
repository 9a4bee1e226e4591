// The largest model of a shape family that fits one GPU for one layout, with everything the
// planner counts on the busiest stage (model states, activations, buffers and workspace): the
// activation-aware companion of largest_model_params (memory_model.h, model states only).
#pragma once

#include <cstdint>

#include "dtrain/plan/planner.h"

namespace dtrain::plan {

// A shape family: `input.model`'s depth, sequence length, vocabulary, family and head size,
// made wider or narrower. Width moves in steps of whole heads such that TP still splits them:
// heads = k x step with step = tp x (heads / kv_heads), hidden = heads x head size, the KV heads
// in the model's ratio, the FFN 4h (GPT) or the model's ffn/hidden ratio rounded up to a
// multiple of 256 (Llama's multiple_of).
ModelShape widen(const ModelShape& family, int64_t heads);

struct LargestShape {
  ModelShape model;  // hidden 0 when not even one step of heads fits
  int64_t params = 0;
  MemoryBreakdown memory;    // the fitting model's busiest stage
  MemoryBreakdown too_wide;  // the next width up, which does not fit
  int64_t heads_step = 1;
};

// The widest member of input.model's family whose plan for `layout` fits the cluster's GPU
// memory (evaluate(...).memory.fits()), by bisection on the head count: memory grows with width.
// Throws Error when the layout is invalid for the family (e.g. --pp not dividing --layers) or
// the model overrides its parameter count.
LargestShape largest_model_shape(const PlanInput& input, const Layout& layout);

}  // namespace dtrain::plan
