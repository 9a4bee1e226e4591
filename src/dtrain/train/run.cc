// resolve(): presets, overrides and the checks that name flags; run_training().
#include "dtrain/train/run.h"

#include <cmath>
#include <filesystem>
#include <optional>
#include <span>

#include "dtrain/comm/launch.h"
#include "dtrain/comm/topology.h"
#include "dtrain/core/check.h"
#include "dtrain/core/files.h"
#include "dtrain/core/rng.h"
#include "dtrain/core/system_memory.h"
#include "dtrain/core/version.h"
#include "dtrain/model/gemm.h"
#include "dtrain/plan/hardware.h"
#include "dtrain/plan/memory_model.h"
#include "dtrain/train/data_parallel_engine.h"
#include "dtrain/train/mesh_engine.h"
#include "dtrain/train/pipeline_engine.h"
#include "dtrain/train/tensor_parallel_engine.h"

namespace dtrain::train {

namespace {

// --save, --save-every, --keep-checkpoints, --resume and --inject-fault into `t`.
void resolve_checkpoint_flags(const TrainOptions& o, TrainerConfig& t) {
  const CheckpointConfig& c = o.checkpoint;
  DTRAIN_CHECK(c.save_every >= 0, "--save-every must not be negative (got ", c.save_every, ")");
  DTRAIN_CHECK(c.save_every == 0 || !c.save_dir.empty(), "--save-every ", c.save_every,
               " needs --save DIR (where to write the checkpoints)");
  DTRAIN_CHECK(c.keep >= 0, "--keep-checkpoints must not be negative (got ", c.keep, ")");
  DTRAIN_CHECK(c.keep == 0 || !c.save_dir.empty(), "--keep-checkpoints needs --save DIR");
  DTRAIN_CHECK(c.resume.empty() || std::filesystem::is_directory(c.resume), "--resume ", c.resume,
               ": no such directory");
  // The directory is made (and tried) now, not after the last step.
  if (!c.save_dir.empty()) check_output_directory(c.save_dir, "--save");
  t.checkpoint = c;
  if (o.inject_fault.empty()) return;
  const FaultSpec fault = parse_fault(o.inject_fault);
  const int64_t ranks =
      static_cast<int64_t>(o.data_parallel.dp) * o.tensor_parallel.tp * o.pipeline.pp;
  DTRAIN_CHECK(fault.rank < ranks, "--inject-fault: rank ", fault.rank,
               " does not exist (the run has ", ranks, " ranks)");
  DTRAIN_CHECK(fault.step <= o.steps, "--inject-fault: step ", fault.step,
               " is after the last (--steps ", o.steps, ")");
  t.fault = fault;
}

// The optimizer and loop settings that have a valid range, each refused with its flag.
void check_values(const TrainOptions& o) {
  DTRAIN_CHECK(std::isfinite(o.lr) && o.lr > 0, "--lr must be a positive number (got ", o.lr, ")");
  DTRAIN_CHECK(!o.min_lr || (std::isfinite(*o.min_lr) && *o.min_lr >= 0 && *o.min_lr <= o.lr),
               "--min-lr must be in [0, --lr ", o.lr, "] (got ", o.min_lr.value_or(0), ")");
  DTRAIN_CHECK(std::isfinite(o.beta1) && o.beta1 >= 0 && o.beta1 < 1,
               "--beta1 must be in [0, 1) (got ", o.beta1, ")");
  DTRAIN_CHECK(std::isfinite(o.beta2) && o.beta2 >= 0 && o.beta2 < 1,
               "--beta2 must be in [0, 1) (got ", o.beta2, ")");
  DTRAIN_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
               "--weight-decay must be a non-negative number (got ", o.weight_decay, ")");
  DTRAIN_CHECK(std::isfinite(o.grad_clip) && o.grad_clip >= 0,
               "--grad-clip must be a non-negative number, 0 for no clipping (got ", o.grad_clip,
               ")");
  DTRAIN_CHECK(o.steps > 0, "--steps must be positive (got ", o.steps, ")");
  DTRAIN_CHECK(!o.warmup || (*o.warmup >= 0 && *o.warmup <= o.steps), "--warmup must be in [0, ",
               "--steps ", o.steps, "] (got ", o.warmup.value_or(0), ")");
  DTRAIN_CHECK(o.eval_every >= 0, "--eval-every must not be negative (got ", o.eval_every, ")");
  DTRAIN_CHECK(o.eval_batches > 0, "--eval-batches must be positive (got ", o.eval_batches, ")");
  DTRAIN_CHECK(std::isfinite(o.val_fraction) && o.val_fraction > 0 && o.val_fraction < 1,
               "--val-fraction must be between 0 and 1 (got ", o.val_fraction, ")");
  DTRAIN_CHECK(o.blas_threads > 0, "--blas-threads must be positive (got ", o.blas_threads, ")");
  DTRAIN_CHECK(o.threads > 0 && o.threads <= model::kMaxTeamSize, "--threads must be in [1, ",
               model::kMaxTeamSize, "] (got ", o.threads, ")");
  DTRAIN_CHECK(o.threads == 1 || o.blas_threads == 1, "--threads ", o.threads,
               " with --blas-threads ", o.blas_threads, " would run ", o.threads * o.blas_threads,
               " threads; use one or the other");
  DTRAIN_CHECK(o.mesh.ranks_per_node >= 0, "--ranks-per-node must be positive (got ",
               o.mesh.ranks_per_node, ")");
  const PipelineSetup defaults;
  DTRAIN_CHECK(o.pipeline.pp > 1 || o.pipeline.schedule == defaults.schedule, "--schedule ",
               o.pipeline.schedule, " needs --pp 2 or more (a pipeline to schedule)");
  DTRAIN_CHECK(o.pipeline.pp > 1 || o.pipeline.stage_layers.empty(),
               "--stage-layers needs --pp 2 or more");
  DTRAIN_CHECK(o.pipeline.pp > 1 || o.pipeline.chunks == defaults.chunks,
               "--chunks needs --pp 2 or more and --schedule interleaved");
}

// Every file the run will read or write, checked before the first step: a run must not train
// for an hour and then fail to write its timeline.
void check_paths(const TrainOptions& o) {
  if (!o.pipeline.trace_path.empty()) check_output_file(o.pipeline.trace_path, "--trace");
  if (!o.pipeline.timeline_path.empty()) check_output_file(o.pipeline.timeline_path, "--timeline");
  if (!o.mesh.cluster_path.empty()) {
    check_input_file(o.mesh.cluster_path, "--cluster");
    (void)plan::read_cluster_file(o.mesh.cluster_path);  // parsed and range-checked now
  }
  if (!o.data.empty()) check_input_file(o.data, "--data");
  if (!o.checkpoint.resume.empty()) {
    DTRAIN_CHECK(std::filesystem::is_directory(o.checkpoint.resume), "--resume ",
                 o.checkpoint.resume, ": no such directory");
  }
}

// This run's identity (a resumed run keeps the checkpoint's) and the settings a --resume is
// checked against; then whether --save may be written by it.
RunRecord run_record(const TrainOptions& o, const SerialEngineConfig& engine,
                     const TrainerConfig& t, const TokenSplit& data) {
  RunRecord run;
  run.version = str(version(), " (", git_commit(), ")");
  RunSettings& s = run.settings;
  s.lr = t.schedule.lr;
  s.min_lr = t.schedule.min_lr;
  s.warmup = t.schedule.warmup_steps;
  s.schedule_steps = t.schedule.total_steps;
  s.beta1 = engine.adamw.beta1;
  s.beta2 = engine.adamw.beta2;
  s.eps = engine.adamw.eps;
  s.weight_decay = engine.adamw.weight_decay;
  s.grad_clip = engine.grad_clip;
  s.init_seed = engine.init_seed;
  s.data_name = o.data.empty() ? "(default corpus)" : o.data;
  s.data_tokens = static_cast<int64_t>(data.train.size() + data.val.size());
  // CRC of train then val, continued across the two: the same tokens give the same number.
  s.data_crc32 = crc32(std::as_bytes(std::span<const int32_t>(data.val)),
                       crc32(std::as_bytes(std::span<const int32_t>(data.train))));
  const CheckpointConfig& c = o.checkpoint;
  if (!c.resume.empty()) {
    const CheckpointManifest found = read_manifest(c.resume);
    if (found.manifest.run && !found.manifest.run->id.empty()) run.id = found.manifest.run->id;
    if (found.manifest.run && !c.allow_resume_changes) {
      std::string list;
      for (const std::string& d : setting_differences(found.manifest.run->settings, s)) {
        list += (list.empty() ? "" : "; ") + d;
      }
      DTRAIN_CHECK(list.empty(), "--resume ", found.dir,
                   ": this run's settings differ from the checkpoint's run (", list,
                   "); resume with the same flags, or pass --allow-resume-changes to continue "
                   "with the new ones");
    }
  }
  if (run.id.empty()) run.id = new_run_id();
  if (!c.save_dir.empty()) {
    check_save_directory(c.save_dir, run.id, !c.resume.empty(), c.overwrite);
  }
  return run;
}

// The threads backend runs every rank as threads of this process (plus a communication
// thread each under DP); past this many the run is a mistake, not a job.
constexpr int64_t kMaxThreadRanks = 1024;

// A lower bound of what this process will allocate: the model states of every rank it runs
// (plan::model_state_bytes at 4 + 4 + 8 bytes per parameter, ZeRO-sharded over --dp) and one
// micro-batch of activations per DP replica. A run that needs more than the machine has left
// is refused now, with both figures, instead of dying in std::bad_alloc later.
void check_memory(const model::GptConfig& m, int64_t B, int64_t T, const TrainOptions& o,
                  bool mpi) {
  const int dp = std::max(1, o.data_parallel.dp);
  const int64_t params = model::gpt_param_count(m);
  const plan::StateBytes fp32{4, 4, 8};
  const double states = static_cast<double>(
      plan::model_state_bytes(params, dp, o.data_parallel.zero_stage, fp32).total());
  const int64_t micro = std::max<int64_t>(
      1, B / dp /
             std::max<int64_t>(
                 1, std::max<int64_t>(o.data_parallel.grad_accum, o.pipeline.microbatches)));
  const double activations = planned_activation_bytes(m, micro, T, o.threads, o.recompute);
  // Threads: every DP replica lives in this process; MPI: one rank per process.
  const int64_t ranks = static_cast<int64_t>(dp) * o.tensor_parallel.tp * o.pipeline.pp;
  const double needed = mpi ? (states * dp + activations * dp) / static_cast<double>(ranks)
                            : states * dp + activations * dp;
  const std::optional<AvailableMemory> room = available_memory();
  if (!room) return;
  DTRAIN_CHECK(needed <= static_cast<double>(room->bytes), "the run needs at least ",
               format_gib(needed), mpi ? " per process" : " in this process", " (model states ",
               format_gib(mpi ? states * dp / static_cast<double>(ranks) : states * dp),
               ", activations ",
               format_gib(mpi ? activations * dp / static_cast<double>(ranks) : activations * dp),
               ") but ", format_gib(static_cast<double>(room->bytes)), " is available (",
               room->source, "); use a smaller --batch or model, or shard it with --zero");
}

}  // namespace

TrainSetup resolve(const TrainOptions& o) {
  const model::GptPreset& preset = model::gpt_preset(o.model);
  model::GptConfig m = preset.config;
  const bool custom = o.vocab || o.context || o.layers || o.heads || o.channels;
  check_values(o);
  check_paths(o);
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
  const int axes = (o.data_parallel.dp > 1 ? 1 : 0) + (o.tensor_parallel.tp > 1 ? 1 : 0) +
                   (o.pipeline.pp > 1 ? 1 : 0);
  // --dp alone stays on the data-parallel engine (buckets, overlap, ZeRO-3) on either backend;
  // anything else off the threads backend's single-axis engines goes to the mesh engine.
  const bool dp_only = o.tensor_parallel.tp == 1 && !o.tensor_parallel.sequence_parallel &&
                       !o.pipeline.enabled() && o.mesh.rank_order == MeshSetup{}.rank_order;
  const bool composed =
      !dp_only && (axes >= 2 || o.mesh.backend != "threads" || o.mesh.ranks_per_node != 0 ||
                   o.mesh.rank_order != MeshSetup{}.rank_order);
  DTRAIN_CHECK(comm::parse_backend(o.mesh.backend).has_value(), "--backend \"", o.mesh.backend,
               "\" is not one of threads, mpi");
  comm::check_timeout(o.mesh.timeout_s);
  // Under mpirun: with threads each process would run its own copy of the job; with MPI every
  // process must be a rank (an idle one means a wrong -np). Only the first process prints.
  comm::check_launch(*comm::parse_backend(o.mesh.backend),
                     int64_t{o.data_parallel.dp} * o.tensor_parallel.tp * o.pipeline.pp,
                     str("--dp ", o.data_parallel.dp, " x --tp ", o.tensor_parallel.tp, " x --pp ",
                         o.pipeline.pp));
  DTRAIN_CHECK(o.mesh.dp_all_reduce == "flat" || o.mesh.dp_all_reduce == "hierarchical",
               "--dp-all-reduce \"", o.mesh.dp_all_reduce, "\" is not one of flat, hierarchical");
  DTRAIN_CHECK(
      o.mesh.dp_all_reduce == "flat" || (dp_only && o.mesh.ranks_per_node > 0),
      "--dp-all-reduce hierarchical needs --ranks-per-node and --dp alone (no --tp, --pp)");
  DTRAIN_CHECK(o.mesh.dp_all_reduce == "flat" || o.data_parallel.zero_stage == 0,
               "--dp-all-reduce hierarchical needs --zero 0 (got --zero ",
               o.data_parallel.zero_stage, ")");
  if (!composed && o.mesh.ranks_per_node != 0) {
    (void)comm::NodeTopology(o.data_parallel.dp, o.mesh.ranks_per_node);  // names the flag
  }
  if (!composed) {
    validate_data_parallel(o.data_parallel, B);
    validate_pipeline(o.pipeline, m, B);
    validate_tensor_parallel(o.tensor_parallel, m);
    DTRAIN_CHECK(!o.pipeline.enabled() || !o.data_parallel.enabled(),
                 "--grad-accum / --zero with --pp: use --microbatches for the pipeline's "
                 "micro-batches, and --dp 2 or more for ZeRO beside a pipeline");
    DTRAIN_CHECK(
        !o.tensor_parallel.enabled() || (!o.pipeline.enabled() && !o.data_parallel.enabled()),
        "--tp with --zero, --grad-accum, --microbatches or another --schedule needs --dp or "
        "--pp of 2 or more (the composed engine)");
  }
  {
    const int64_t ranks =
        static_cast<int64_t>(o.data_parallel.dp) * o.tensor_parallel.tp * o.pipeline.pp;
    DTRAIN_CHECK(o.mesh.backend != "threads" || ranks <= kMaxThreadRanks,
                 "--dp x --tp x --pp = ", ranks,
                 " rank threads is more than the threads backend runs (", kMaxThreadRanks,
                 "); use --backend mpi for larger jobs");
  }
  check_memory(m, B, T, o, o.mesh.backend == "mpi");

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
  setup.engine.recompute = o.recompute;

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
  t.recompute = o.recompute;

  const std::string path = o.data.empty() ? default_corpus_path() : o.data;
  DTRAIN_CHECK(!o.data.empty() || std::filesystem::exists(path), "the default corpus '", path,
               "' is missing (run data/make_corpus.py to write it, or pass --data FILE)");
  setup.data = split_train_val(load_byte_tokens(path), o.val_fraction, path);
  check_split_fits(setup.data, T, o.seq ? "--seq" : "--context");
  // Evaluation batches beyond the split's distinct windows would repeat the same tokens.
  const int64_t distinct_eval_batches =
      std::max<int64_t>(1, (static_cast<int64_t>(setup.data.val.size()) - 1) / (B * T));
  if (t.eval_batches > distinct_eval_batches) {
    t.notes.push_back(str("--eval-batches ", t.eval_batches, " capped to ", distinct_eval_batches,
                          ": the validation split (", setup.data.val.size(), " tokens) holds ",
                          distinct_eval_batches, " distinct batch(es) of ", B, " x ", T,
                          " tokens"));
    t.eval_batches = distinct_eval_batches;
  }
  resolve_checkpoint_flags(o, t);
  t.run = run_record(o, setup.engine, t, setup.data);
  t.stop = o.stop;
  setup.data_parallel = o.data_parallel;
  setup.pipeline = o.pipeline;
  setup.tensor_parallel = o.tensor_parallel;
  setup.mesh = o.mesh;
  setup.composed = composed;
  // The composed layout's checks (each names its flag), before any rank starts.
  if (composed)
    (void)mesh_config(setup.engine, o.data_parallel, o.tensor_parallel, o.pipeline, o.mesh);
  return setup;
}

TrainSummary run_training(const TrainOptions& options, TrainObserver* observer, bool* is_reporter) {
  TrainSetup setup = resolve(options);
  model::set_blas_threads(setup.blas_threads);
  if (is_reporter != nullptr) *is_reporter = true;
  if (setup.composed) {
    return run_mesh(setup.engine, setup.data_parallel, setup.tensor_parallel, setup.pipeline,
                    setup.mesh, setup.trainer, setup.data, observer, is_reporter);
  }
  if (setup.tensor_parallel.enabled()) {
    return run_tensor_parallel(setup.engine, setup.tensor_parallel, setup.trainer, setup.data,
                               observer, setup.mesh.timeout_s);
  }
  if (setup.pipeline.enabled()) {
    return run_pipeline(setup.engine, setup.pipeline, setup.trainer, setup.data, observer,
                        setup.mesh.timeout_s);
  }
  const std::optional<comm::Backend> backend = comm::parse_backend(setup.mesh.backend);
  if (setup.data_parallel.enabled() || *backend != comm::Backend::threads ||
      setup.mesh.ranks_per_node > 0) {
    DataParallelEngineConfig config{setup.engine, setup.data_parallel};
    config.backend = *backend;
    config.ranks_per_node = setup.mesh.ranks_per_node;
    config.hierarchical = setup.mesh.dp_all_reduce == "hierarchical";
    config.cluster_path = setup.mesh.cluster_path;
    config.timeout_s = setup.mesh.timeout_s;
    return run_data_parallel(config, setup.trainer, setup.data, observer, is_reporter);
  }
  SerialEngine engine(setup.engine);
  Trainer trainer(setup.trainer, engine, setup.data, observer);
  return trainer.run();
}

}  // namespace dtrain::train
