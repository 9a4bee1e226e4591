// What one optimizer step computes, whatever the layout: the model, the global batch, AdamW,
// clipping, the initialisation seed, the rank's compute threads, the recompute mode and the
// precision. The engine (engine/engine.h) runs it on a mesh; the tests' single-rank reference runs
// it alone.
#pragma once

#include <cstdint>

#include "dtrain/core/recompute.h"
#include "dtrain/model/gpt_config.h"
#include "dtrain/model/precision.h"
#include "dtrain/optim/adamw.h"

namespace dtrain::train {

struct StepConfig {
  model::GptConfig model;
  int64_t batch = 0;  // B, global
  int64_t seq = 0;    // T
  optim::AdamWConfig adamw;
  float grad_clip = 1.0f;  // max global norm; <= 0 disables clipping
  uint64_t init_seed = 0;  // parameter initialisation
  int threads = 1;         // compute threads per rank (a model::ThreadTeam); OpenBLAS stays as set
  Recompute recompute = Recompute::none;  // --recompute: what each block keeps for backward
  model::Precision precision = model::Precision::fp32;  // --precision: the matrix products' format
};

}  // namespace dtrain::train
