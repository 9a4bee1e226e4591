// resolve(): presets, overrides and the checks that name flags; run_training(): one Engine per
// rank on the chosen backend.
#include "dtrain/run/run.h"

#include <sys/resource.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "dtrain/comm/launch.h"
#include "dtrain/comm/topology.h"
#include "dtrain/core/check.h"
#include "dtrain/core/files.h"
#include "dtrain/core/rng.h"
#include "dtrain/core/system_memory.h"
#include "dtrain/core/version.h"
#include "dtrain/cost/memory_model.h"
#include "dtrain/data/token_file.h"
#include "dtrain/engine/engine.h"
#include "dtrain/formats/hf_folder.h"
#include "dtrain/machine/hardware.h"
#include "dtrain/model/bf16_gemm.h"
#include "dtrain/model/gemm.h"
#include "dtrain/report/layout_report.h"

namespace dtrain::train {

namespace {

// The mesh's size as the flags give it, every axis named: "--dp 2 x --cp 2 x --tp 1 x --pp 1".
std::string rank_product(const LayoutOptions& l) {
  return str("--dp ", l.dp, " x --cp ", l.cp, " x --tp ", l.tp, " x --pp ", l.pp);
}

// --save, --save-every, --keep-checkpoints, --resume and --inject-fault into `t`.
void resolve_checkpoint_flags(const TrainOptions& o, TrainerConfig& t) {
  const checkpoint::CheckpointConfig& c = o.checkpoint;
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
  // Every rank of the mesh (EP's ranks are carved from DP's).
  const int64_t ranks = o.layout.world();
  DTRAIN_CHECK(fault.rank < ranks, "--inject-fault: rank ", fault.rank,
               " does not exist (the run has ", ranks, " rank", ranks == 1 ? "" : "s", ": ",
               rank_product(o.layout), ")");
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
}

// Every file the run will read or write, checked before the first step: a run must not train
// for an hour and then fail to write its timeline.
void check_paths(const TrainOptions& o) {
  if (!o.layout.trace_path.empty()) check_output_file(o.layout.trace_path, "--trace");
  if (!o.layout.timeline_path.empty()) check_output_file(o.layout.timeline_path, "--timeline");
  if (!o.layout.cluster_path.empty()) {
    // Read, parsed and range-checked now (a refusal says where a cluster file comes from).
    (void)plan::read_cluster_file(o.layout.cluster_path);
  }
  if (!o.data.empty()) check_input_file(o.data, "--data");
  if (!o.eval_batch_out.empty()) check_output_file(o.eval_batch_out, "--write-eval-batch");
  if (!o.metrics_path.empty()) check_output_file(o.metrics_path, "--metrics");
  if (!o.checkpoint.resume.empty()) {
    DTRAIN_CHECK(std::filesystem::is_directory(o.checkpoint.resume), "--resume ",
                 o.checkpoint.resume, ": no such directory");
  }
}

// This run's identity (a resumed run keeps the checkpoint's) and the settings a --resume is
// checked against; then whether --save may be written by it.
checkpoint::RunRecord run_record(const TrainOptions& o, const StepConfig& engine,
                                 const TrainerConfig& t, const data::TokenSplit& data) {
  checkpoint::RunRecord run;
  run.version = str(version(), " (", git_commit(), ")");
  checkpoint::RunSettings& s = run.settings;
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
  s.precision = std::string(model::precision_name(engine.precision));
  s.data_name = o.data.empty() ? "(default corpus)" : o.data;
  s.data_tokens = static_cast<int64_t>(data.train.size() + data.val.size());
  // CRC of train then val, continued across the two: the same tokens give the same number.
  // Over the tokens as stored (int32 for text, uint16 for a token file).
  s.data_crc32 = checkpoint::crc32(data.val.bytes(), checkpoint::crc32(data.train.bytes()));
  const checkpoint::CheckpointConfig& c = o.checkpoint;
  if (!c.resume.empty()) {
    const checkpoint::CheckpointManifest found = checkpoint::read_manifest(c.resume);
    if (found.manifest.run && !found.manifest.run->id.empty()) run.id = found.manifest.run->id;
    if (found.manifest.run && !c.allow_resume_changes) {
      std::string list;
      for (const std::string& d :
           checkpoint::setting_differences(found.manifest.run->settings, s)) {
        list += (list.empty() ? "" : "; ") + d;
      }
      DTRAIN_CHECK(list.empty(), "--resume ", found.dir,
                   ": this run's settings differ from the checkpoint's run (", list,
                   "); resume with the same flags, or pass --allow-resume-changes to continue "
                   "with the new ones");
    }
  }
  if (run.id.empty()) run.id = checkpoint::new_run_id();
  if (!c.save_dir.empty()) {
    checkpoint::check_save_directory(c.save_dir, run.id, !c.resume.empty(), c.overwrite);
  }
  return run;
}

// --init-from DIR: the model's shape is config.json's; a shape flag given as well must agree,
// and so must an explicit --model preset (with its overrides: `m` on entry).
void take_init_from_shape(const TrainOptions& o, model::GptConfig& m) {
  DTRAIN_CHECK(o.checkpoint.resume.empty(), "--init-from and --resume: a resume continues the ",
               "checkpoint's weights; give one of them");
  const model::GptConfig c = formats::read_hf_config(o.init_from, "--init-from");
  const std::string path = (std::filesystem::path(o.init_from) / formats::kHfConfigName).string();
  const auto agree = [&](const std::optional<int64_t>& flag, int64_t value, const char* name,
                         const char* key) {
    DTRAIN_CHECK(!flag || *flag == value, name, " ", flag.value_or(0), " differs from --init-from ",
                 path, " (", key, " ", value, ")");
  };
  const bool llama = c.llama();  // config.json's keys are the family's
  agree(o.vocab, c.vocab, "--vocab", "vocab_size");
  agree(o.context, c.context, "--context", llama ? "max_position_embeddings" : "n_positions");
  agree(o.layers, c.layers, "--layers", llama ? "num_hidden_layers" : "n_layer");
  agree(o.heads, c.heads, "--heads", llama ? "num_attention_heads" : "n_head");
  agree(o.channels, c.channels, "--hidden", llama ? "hidden_size" : "n_embd");
  agree(o.kv_heads, c.kv_heads_or_heads(), "--kv-heads", "num_key_value_heads");
  agree(o.ffn_hidden, c.ffn(), "--ffn-hidden", "intermediate_size");
  DTRAIN_CHECK(!o.family || *o.family == c.family, "--family ", name(*o.family),
               " differs from --init-from ", path, " (model_type ", llama ? "llama" : "gpt2", ")");
  DTRAIN_CHECK(!o.rope_theta || *o.rope_theta == c.rope_theta, "--rope-theta ",
               o.rope_theta.value_or(0), " differs from --init-from ", path, " (rope_theta ",
               c.rope_theta, ")");
  DTRAIN_CHECK(!o.norm_eps || *o.norm_eps == c.norm_eps, "--norm-eps ", o.norm_eps.value_or(0),
               " differs from --init-from ", path, " (rms_norm_eps ", c.norm_eps, ")");
  DTRAIN_CHECK(!o.tie_embeddings || c.tie_embeddings, "--tie-embeddings differs from --init-from ",
               path, " (tie_word_embeddings false)");
  // A Mixtral folder brings its experts and top-k; the routing's training settings
  // (--capacity-factor, --aux-loss-coef) stay the run's.
  DTRAIN_CHECK(!o.moe.enabled() || (c.moe.enabled() && o.moe.experts == c.moe.experts &&
                                    o.moe.top_k == c.moe.top_k && o.moe.every == 1),
               "--experts ", o.moe.experts, " --top-k ", o.moe.top_k, " --moe-every ", o.moe.every,
               " differ from --init-from ", path,
               c.moe.enabled() ? str(" (num_local_experts ", c.moe.experts,
                                     ", num_experts_per_tok ", c.moe.top_k, ", every block routed)")
                               : std::string(" (a dense model: no num_local_experts)"));
  // The vocabulary is left out: a token file sets it, and it was compared above when given.
  const auto shape = [](const model::GptConfig& g) {
    return str("T=", g.context, " L=", g.layers, " NH=", g.heads, " C=", g.channels);
  };
  model::GptConfig preset = m;
  preset.vocab = c.vocab;
  preset.moe = c.moe;  // compared above
  DTRAIN_CHECK(!o.model_given || preset == c, "--model ", o.model, " (", shape(preset),
               ") differs from the shape of --init-from ", path, " (", shape(c),
               "): drop --model to take the export's shape, or give the preset it was trained as");
  m = c;
  m.moe.capacity_factor = o.moe.capacity_factor;
  m.moe.aux_loss_coef = o.moe.aux_loss_coef;
}

// The threads backend runs every rank as threads of this process (plus a communication
// thread each under DP); past this many the run is a mistake, not a job.
constexpr int64_t kMaxThreadRanks = 1024;

// The plan/ formulas' peak bytes of every rank (report/layout_report.h) against --max-rank-memory
// and against what the machine has left for the ranks this process runs (all of them on the
// threads backend, one under MPI): a run that cannot fit is refused now, with the figures,
// instead of dying in std::bad_alloc later.
void check_memory(const EngineConfig& c, const LayoutOptions& o) {
  double largest = 0, all = 0;
  int largest_stage = 0;
  for (int stage = 0; stage < c.pp; ++stage) {
    const double bytes = planned_rank_peak_bytes(c, stage);
    all += bytes * c.dp * c.tp;
    if (bytes > largest) {
      largest = bytes;
      largest_stage = stage;
    }
  }
  DTRAIN_CHECK(
      o.max_rank_memory == 0 || largest <= static_cast<double>(o.max_rank_memory),
      "--max-rank-memory ", format_gib(static_cast<double>(o.max_rank_memory)),
      ": a rank of pipeline stage ", largest_stage, " needs ", format_gib(largest),
      " by the plan/ formulas (model states, activations in flight, ZeRO-3's gathered "
      "units); shard it with --zero, --pp, --tp or (long sequences) --cp, or use a smaller "
      "--global-batch or model");
  const bool mpi = o.backend == comm::Backend::mpi;
  double needed = mpi ? largest : all;
  const std::optional<AvailableMemory> room = available_memory();
  if (!room) return;
  // Under ulimit -v a rank's threads count in full before they touch a byte: the rank thread's
  // and its DP communication thread's stacks (RLIMIT_STACK each); OpenBLAS's work buffer
  // (BUFFER_SIZE, 32 MiB on x86-64), which it maps per calling thread and, when the mapping
  // fails, retries forever instead of failing; and an allocator arena for each of the two
  // threads, which reserves address space ahead of use in growing extents (jemalloc) or 64 MiB
  // heaps (glibc). The arena allowance is measured, not derived: with 64 MiB a thread, `train
  // --model tiny` at --dp 1, 2, 4 and 8 under every ulimit -v from 150 MB to 1 GB in 50 MB steps
  // either runs or is refused here, never waits in OpenBLAS (tests/cli/memory_limits.sh);
  // with stacks and buffer alone, limits from 350 MB to 650 MB waited forever, and with 40 MiB
  // a thread --dp 2 still did at 550 MB. VmSize is read while the process may still be starting
  // a thread of its own beside the ranks (its stack and arena mapped a moment later): under
  // ctest's load --dp 2 passed this check at 550 MB and then waited, where alone it is refused
  // below 610 MB. So the process is given one more thread's stack and arena.
  std::string extra;
  if (room->address_space) {
    rlimit stack{};
    const double stack_bytes =
        ::getrlimit(RLIMIT_STACK, &stack) == 0 && stack.rlim_cur != RLIM_INFINITY
            ? static_cast<double>(stack.rlim_cur)
            : 8.0 * 1024 * 1024;
    constexpr double kOpenBlasBufferBytes = 32.0 * 1024 * 1024;
    constexpr double kArenaAllowanceBytes = 64.0 * 1024 * 1024;
    const double per_rank = 2 * (stack_bytes + kArenaAllowanceBytes) + kOpenBlasBufferBytes;
    const double per_process = stack_bytes + kArenaAllowanceBytes;
    needed += per_rank * (mpi ? 1 : c.world()) + per_process;
    extra = str(", plus ", format_gib(per_rank), " per rank and ", format_gib(per_process),
                " for the process under the address-space limit: thread stacks, OpenBLAS's "
                "buffer and the allocator's arenas");
  }
  DTRAIN_CHECK(needed <= static_cast<double>(room->bytes), "the run needs at least ",
               format_gib(needed), mpi ? " per process" : " in this process", " (",
               mpi ? "the largest rank" : str(c.world(), " rank(s)"), " by the plan/ formulas",
               extra, ") but ", format_gib(static_cast<double>(room->bytes)), " is available (",
               room->source, "); use a smaller --global-batch or model, or shard it with --zero",
               room->address_space ? ", or raise ulimit -v" : "");
}

// The run's MoE: the flags' when --experts is given; else a preset's experts (mixtral-small) with
// --top-k and --moe-every where they leave their defaults' values, and the routing's training
// settings (--capacity-factor, --aux-loss-coef) always the flags'.
model::MoeConfig moe_of(const model::MoeConfig& preset, const model::MoeConfig& flags) {
  if (flags.enabled() || !preset.enabled()) return flags;
  const model::MoeConfig defaults;
  model::MoeConfig m = preset;
  if (flags.top_k != defaults.top_k) m.top_k = flags.top_k;
  if (flags.every != defaults.every) m.every = flags.every;
  m.capacity_factor = flags.capacity_factor;
  m.aux_loss_coef = flags.aux_loss_coef;
  return m;
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
  m.moe = moe_of(preset.config.moe, o.moe);
  if (o.family) m.family = *o.family;
  m.kv_heads = o.kv_heads.value_or(m.kv_heads);
  m.ffn_hidden = o.ffn_hidden.value_or(m.ffn_hidden);
  m.rope_theta = o.rope_theta.value_or(m.rope_theta);
  m.norm_eps = o.norm_eps.value_or(m.norm_eps);
  m.tie_embeddings = m.tie_embeddings || o.tie_embeddings;
  if (!o.init_from.empty()) take_init_from_shape(o, m);  // a Llama folder makes it a Llama
  DTRAIN_CHECK(m.llama() || (!o.kv_heads && !o.ffn_hidden && !o.rope_theta && !o.norm_eps &&
                             !o.tie_embeddings),
               "--kv-heads, --ffn-hidden, --rope-theta, --norm-eps and --tie-embeddings set the "
               "Llama block: add --family llama (or a Llama preset)");
  model::validate(m);
  // The data before the model: a token file sets the vocabulary.
  const std::string path = o.data.empty() ? data::default_corpus_path() : o.data;
  DTRAIN_CHECK(!o.data.empty() || std::filesystem::exists(path), "the default corpus '", path,
               "' is missing (run data/make_corpus.py to write it, or pass --data FILE)");
  data::TokenData data = data::load_token_data(path, o.vocab);
  if (data.format == data::TokenFileFormat::text) {
    DTRAIN_CHECK(m.vocab >= data::kByteVocab, "--vocab ", m.vocab, " is smaller than the ",
                 data::kByteVocab, " symbols of the byte tokenizer");
  } else {
    DTRAIN_CHECK(o.init_from.empty() || m.vocab == data.vocab, "--init-from ", o.init_from,
                 ": the model's vocabulary is ", m.vocab, ", but --data ", path,
                 " holds tokens of ", data.vocab, (o.vocab ? " (--vocab)" : ""));
    m.vocab = data.vocab;
  }
  if (!o.init_from.empty()) formats::check_hf(o.init_from, m, "--init-from");

  const int64_t B = o.batch.value_or(preset.batch);
  const int64_t T = o.seq.value_or(m.context);
  DTRAIN_CHECK(B > 0, "--global-batch must be positive (got ", B, ")");
  DTRAIN_CHECK(T > 0, "--seq-length must be positive (got ", T, ")");
  DTRAIN_CHECK(T <= m.context, "--seq-length ", T, " exceeds --context ", m.context);
  const LayoutOptions& l = o.layout;
  comm::check_timeout(l.timeout_s);
  {
    const int64_t ranks = static_cast<int64_t>(l.dp) * l.cp * l.tp * l.pp;
    // Under mpirun: with threads each process would run its own copy of the job; with MPI every
    // process must be a rank (an idle one means a wrong -np). Only the first process prints.
    comm::check_launch(l.backend, ranks, rank_product(l));
    DTRAIN_CHECK(l.backend != comm::Backend::threads || ranks <= kMaxThreadRanks, rank_product(l),
                 " = ", ranks, " rank threads is more than the threads backend runs (",
                 kMaxThreadRanks, "); use --backend mpi for larger jobs");
  }

  TrainSetup setup;
  setup.blas_threads = o.blas_threads;
  Rng seeds(o.seed);
  setup.step.model = m;
  setup.step.batch = B;
  setup.step.seq = T;
  setup.step.adamw = {o.beta1, o.beta2, 1e-8f, o.weight_decay};
  setup.step.grad_clip = o.grad_clip;
  setup.step.init_seed = seeds.next_u64();
  setup.step.threads = o.threads;
  setup.step.recompute = o.recompute;
  setup.step.precision = o.precision;
  // The layout's checks (each names its flag), before any rank starts.
  setup.layout = l;
  setup.engine = make_engine_config(setup.step, l);
  check_memory(setup.engine, l);

  TrainerConfig& t = setup.trainer;
  t.model = m;
  // The routing's training settings (--capacity-factor, --aux-loss-coef) leave the preset's shape.
  model::GptConfig shape = m;
  shape.moe.capacity_factor = preset.config.moe.capacity_factor;
  shape.moe.aux_loss_coef = preset.config.moe.aux_loss_coef;
  t.model_name = custom || shape != preset.config ? "custom" : preset.name;
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
  t.max_rank_memory = l.max_rank_memory;
  t.single_process_job = l.backend == comm::Backend::threads;
  if (l.ranks_per_node > 0) t.warnings = layout_warnings(setup.engine);
  if (setup.engine.cluster && plan::has_measured_rates(*setup.engine.cluster)) {
    const std::string gap = clock_not_priced(setup.engine);
    if (!gap.empty()) {
      t.warnings.push_back(str("--cluster ", l.cluster_path,
                               ": the clock table will carry no prediction, only the measured "
                               "phases: ",
                               gap));
    }
  }
  if (o.precision == model::Precision::bf16 &&
      model::bf16_gemm_backend() == model::Bf16GemmBackend::emulated) {
    const std::string why = model::bf16_slow_reason(model::bf16_support());
    if (!why.empty())
      t.warnings.push_back("--precision bf16 will be slower than fp32 here: " + why);
  }

  setup.data = data::split_train_val(std::move(data.tokens), o.val_fraction, path);
  data::check_split_fits(setup.data, T, o.seq ? "--seq-length" : "--context");
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
  t.run = run_record(o, setup.step, t, setup.data);
  t.stop = o.stop;
  t.init_from = o.init_from;
  t.eval_batch_out = o.eval_batch_out;
  t.metrics_path = o.metrics_path;
  return setup;
}

TrainSummary run_training(const TrainOptions& options, TrainObserver* observer, bool* is_reporter) {
  const TrainSetup setup = resolve(options);
  model::set_blas_threads(setup.blas_threads);
  TrainSummary summary;
  bool reporter = false;
  comm::run_on_backend(
      setup.layout.backend, setup.engine.world(),
      [&](comm::Communicator& world) {
        Engine engine(setup.engine, world);
        // MPI ranks each hold their own StopRequest: they agree on a stop over a group of their
        // own, so the all-reduce it takes per step stays out of the measured traffic.
        std::unique_ptr<comm::Communicator> stop_group;
        if (setup.layout.backend == comm::Backend::mpi && setup.trainer.stop != nullptr) {
          std::vector<int> everyone(static_cast<size_t>(world.size()));
          std::iota(everyone.begin(), everyone.end(), 0);
          stop_group = world.subgroup(everyone, "stop");
        }
        Trainer loop(setup.trainer, engine, setup.data, world.rank() == 0 ? observer : nullptr,
                     stop_group.get());
        TrainSummary s = loop.run();
        LayoutReport report = gather_layout_report(engine, world, setup.layout);
        if (world.rank() == 0) {
          s.planned_activation_bytes = report.ranks.front().planned_activations_peak_bytes;
          s.planned_peak_total_bytes = planned_rank_peak_bytes(engine.config(), engine.coord().pp);
          s.layout = std::move(report);
          summary = std::move(s);
        } else if (setup.layout.backend == comm::Backend::mpi) {
          summary.stop_signal = s.stop_signal;  // this process's only rank: its exit status
        }
      },
      comm::LaunchOptions{setup.layout.timeout_s}, &reporter);
  if (is_reporter != nullptr) *is_reporter = reporter;
  return summary;
}

}  // namespace dtrain::train
