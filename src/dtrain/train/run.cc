// resolve(): presets, overrides and the checks that name flags; run_training().
#include "dtrain/train/run.h"

#include <cmath>
#include <filesystem>

#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/model/gemm.h"
#include "dtrain/train/data_parallel_engine.h"
#include "dtrain/train/pipeline_engine.h"
#include "dtrain/train/tensor_parallel_engine.h"

namespace dtrain::train {

TrainSetup resolve(const TrainOptions& o) {
  const model::GptPreset& preset = model::gpt_preset(o.model);
  model::GptConfig m = preset.config;
  const bool custom = o.vocab || o.context || o.layers || o.heads || o.channels;
  m.vocab = o.vocab.value_or(m.vocab);
  m.context = o.context.value_or(m.context);
  m.layers = o.layers.value_or(m.layers);
  m.heads = o.heads.value_or(m.heads);
  m.channels = o.channels.value_or(m.channels);
  model::validate(m);
  DTRAIN_CHECK(m.vocab >= kByteVocab, "--vocab ", m.vocab, " is smaller than the ", kByteVocab,
               " symbols of the byte tokenizer");

  const int64_t B = o.batch.value_or(preset.batch);
  const int64_t T = o.seq.value_or(m.context);
  DTRAIN_CHECK(B > 0, "--batch must be positive (got ", B, ")");
  DTRAIN_CHECK(T > 0, "--seq must be positive (got ", T, ")");
  DTRAIN_CHECK(T <= m.context, "--seq ", T, " exceeds --context ", m.context);
  validate_data_parallel(o.data_parallel, B);
  validate_pipeline(o.pipeline, m, B);
  DTRAIN_CHECK(!o.pipeline.enabled() || !o.data_parallel.enabled(),
               "--pp (pipeline) and --dp / --zero / --grad-accum (data parallel) cannot be ",
               "combined yet: pick one");
  validate_tensor_parallel(o.tensor_parallel, m);
  DTRAIN_CHECK(
      !o.tensor_parallel.enabled() || (!o.pipeline.enabled() && !o.data_parallel.enabled()),
      "--tp (tensor parallel) cannot be combined with --pp or --dp / --zero / ",
      "--grad-accum yet: pick one");
  DTRAIN_CHECK(o.steps > 0, "--steps must be positive (got ", o.steps, ")");
  DTRAIN_CHECK(o.eval_every >= 0, "--eval-every must not be negative (got ", o.eval_every, ")");
  DTRAIN_CHECK(o.eval_batches > 0, "--eval-batches must be positive (got ", o.eval_batches, ")");
  DTRAIN_CHECK(o.blas_threads > 0, "--blas-threads must be positive (got ", o.blas_threads, ")");
  DTRAIN_CHECK(o.threads > 0 && o.threads <= model::kMaxTeamSize, "--threads must be in [1, ",
               model::kMaxTeamSize, "] (got ", o.threads, ")");
  DTRAIN_CHECK(o.threads == 1 || o.blas_threads == 1, "--threads ", o.threads,
               " with --blas-threads ", o.blas_threads, " would run ", o.threads * o.blas_threads,
               " threads; use one or the other");
  DTRAIN_CHECK(o.weight_decay >= 0, "--weight-decay must not be negative (got ", o.weight_decay,
               ")");
  DTRAIN_CHECK(std::isfinite(o.grad_clip), "--grad-clip must be finite (got ", o.grad_clip, ")");

  TrainSetup setup;
  setup.blas_threads = o.blas_threads;
  Rng seeds(o.seed);
  setup.engine.model = m;
  setup.engine.batch = B;
  setup.engine.seq = T;
  setup.engine.adamw = {o.beta1, o.beta2, 1e-8f, o.weight_decay};
  setup.engine.grad_clip = o.grad_clip;
  setup.engine.init_seed = seeds.next_u64();
  setup.engine.threads = o.threads;

  TrainerConfig& t = setup.trainer;
  t.model = m;
  t.model_name = custom ? "custom" : preset.name;
  t.steps = o.steps;
  t.batch = B;
  t.seq = T;
  t.schedule = {o.lr, o.min_lr.value_or(o.lr / 10), o.warmup.value_or(o.steps / 10), o.steps};
  optim::validate(t.schedule);
  t.eval_every = o.eval_every;
  t.eval_batches = o.eval_batches;
  t.data_seed = seeds.next_u64();
  t.threads = o.threads;

  const std::string path = o.data.empty() ? default_corpus_path() : o.data;
  DTRAIN_CHECK(!o.data.empty() || std::filesystem::exists(path), "the default corpus '", path,
               "' is missing (run data/make_corpus.py to write it, or pass --data FILE)");
  setup.data = split_train_val(load_byte_tokens(path), o.val_fraction, path);
  check_split_fits(setup.data, T, o.seq ? "--seq" : "--context");
  setup.data_parallel = o.data_parallel;
  setup.pipeline = o.pipeline;
  setup.tensor_parallel = o.tensor_parallel;
  return setup;
}

TrainSummary run_training(const TrainOptions& options, TrainObserver* observer) {
  TrainSetup setup = resolve(options);
  model::set_blas_threads(setup.blas_threads);
  if (setup.tensor_parallel.enabled()) {
    return run_tensor_parallel(setup.engine, setup.tensor_parallel, setup.trainer, setup.data,
                               observer);
  }
  if (setup.pipeline.enabled()) {
    return run_pipeline(setup.engine, setup.pipeline, setup.trainer, setup.data, observer);
  }
  if (setup.data_parallel.enabled()) {
    return run_data_parallel({setup.engine, setup.data_parallel}, setup.trainer, setup.data,
                             observer);
  }
  SerialEngine engine(setup.engine);
  Trainer trainer(setup.trainer, engine, setup.data, observer);
  return trainer.run();
}

}  // namespace dtrain::train
