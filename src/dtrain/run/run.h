// The `dtrain train` entry point: command-line options (as parsed, unvalidated) become the
// checked configs of one step, the loop and the layout, then one Engine per rank on the chosen
// backend. Every error names the flag or file at fault.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dtrain/checkpoint/checkpoint.h"
#include "dtrain/engine/layout.h"
#include "dtrain/engine/step_config.h"
#include "dtrain/run/stop_request.h"
#include "dtrain/run/trainer.h"

namespace dtrain::train {

struct TrainOptions {
  std::string model = "tiny";  // preset
  bool model_given = false;    // --model was given, not defaulted (--init-from checks it)
  // Overrides of the preset's shape.
  std::optional<int64_t> vocab, context, layers, heads, channels;
  model::MoeConfig moe;  // --experts, --top-k, --moe-every, --capacity-factor, --aux-loss-coef
  // --family and the Llama family's shape and settings (unset: the preset's).
  std::optional<model::ModelFamily> family;
  std::optional<int64_t> kv_heads, ffn_hidden;
  std::optional<float> rope_theta, norm_eps;
  bool tie_embeddings = false;  // --tie-embeddings
  int64_t steps = 200;
  std::optional<int64_t> batch;  // default: the preset's
  std::optional<int64_t> seq;    // default: the context
  float lr = 3e-3f;
  std::optional<float> min_lr;    // default: lr / 10
  std::optional<int64_t> warmup;  // default: steps / 10
  float weight_decay = 0.1f;
  float beta1 = 0.9f, beta2 = 0.95f;
  float grad_clip = 1.0f;
  int64_t eval_every = 50;
  int64_t eval_batches = 8;
  uint64_t seed = 1;
  std::string data;  // empty: the default corpus
  double val_fraction = 0.1;
  int threads = 1;                        // compute threads of the rank (a model::ThreadTeam)
  int blas_threads = 1;                   // OpenBLAS's own threads (keep 1 when threads > 1)
  Recompute recompute = Recompute::none;  // --recompute
  model::Precision precision = model::Precision::fp32;  // --precision
  LayoutOptions layout;  // --dp, --tp, --pp, --zero, --sequence-parallel, --schedule, ...
  checkpoint::CheckpointConfig checkpoint;  // --save, --save-every, --keep-checkpoints, --resume
  std::string inject_fault;  // --inject-fault rank=R,step=S,kind=throw|exit|bad_alloc (empty: none)
  std::string init_from;     // --init-from: a GPT-2 folder whose weights start the run
  std::string eval_batch_out;   // --write-eval-batch FILE
  std::string metrics_path;     // --metrics FILE.jsonl
  StopRequest* stop = nullptr;  // set by a SIGINT/SIGTERM/SIGUSR1 handler; may be null
};

struct TrainSetup {
  StepConfig step;
  TrainerConfig trainer;
  data::TokenSplit data;
  int blas_threads = 1;
  LayoutOptions layout;
  EngineConfig engine;  // the layout, checked
};

// Checks the options and loads the data; throws Error naming the flag or file.
TrainSetup resolve(const TrainOptions& options);

// resolve(), then the run: one Engine per rank (rank threads of this process, or the processes
// mpirun started), a Trainer on each, with `observer` (may be null) watching rank 0; returns
// rank 0's summary with every rank's figures (TrainSummary::layout).
// Under --backend mpi every process returns; `*is_reporter` (if given) is true on the one that
// holds rank 0 and should print.
TrainSummary run_training(const TrainOptions& options, TrainObserver* observer,
                          bool* is_reporter = nullptr);

}  // namespace dtrain::train
