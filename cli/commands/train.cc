// `dtrain train`: parses the flags into train::TrainOptions and calls train::run_training;
// the progress goes to stderr, the summary (table, or JSON with --json) to stdout.
#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "build_info.h"
#include "command_registry.h"
#include "dtrain/checkpoint/checkpoint.h"
#include "dtrain/comm/launch.h"
#include "dtrain/core/check.h"
#include "dtrain/core/units.h"
#include "dtrain/cost/context_parallel.h"
#include "dtrain/cost/pipeline_model.h"
#include "dtrain/data/data.h"
#include "dtrain/parallel/mesh.h"
#include "dtrain/parallel/pipeline_stages.h"
#include "dtrain/run/progress.h"
#include "dtrain/run/report.h"
#include "dtrain/run/run.h"
#include "embedded.h"
#include "file_roles.h"
#include "renamed_flags.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

// Whether --model names a preset with experts (mixtral-small): its MoE flags need no --experts.
bool preset_routes(const std::string& name) {
  for (const model::GptPreset& p : model::gpt_presets()) {
    if (p.name == name) return p.config.moe.enabled();
  }
  return false;
}

// Ctrl-C / SIGTERM / SIGUSR1 (a scheduler's warning): before the first step, the process ends
// at once (nothing is trained yet, nothing to save: the start-up may be blocked on a FIFO or
// busy for a while); after it, the first signal asks the run to stop after the step in progress
// (with a final checkpoint under --save and the summary). Under the threads backend a second
// signal exits at once; under mpirun the ranks agree on the step through one all-reduce per
// step, and a repeated signal changes nothing (mpirun itself sends SIGTERM after the user's
// signal, then SIGKILL: see docs/checkpoints.md for the timing).
train::StopRequest* g_stop = nullptr;
bool g_repeat_quits = true;  // the threads backend: a second Ctrl-C quits now
bool g_prints = true;        // one process speaks: not launched, or rank 0 of mpirun's

void write_stderr(const char* text, size_t bytes) {
  [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, text, bytes);
}

template <size_t N>
void say(const char (&text)[N]) {
  if (g_prints) write_stderr(text, N - 1);
}

// mpirun's own stop (SIGTERM from the parent, after the user's SIGTERM/SIGINT reached mpirun)
// comes while mpirun sleeps before its SIGKILL and reads none of the ranks' output: a rank
// writing progress into a full pipe would block there until killed, checkpoint unwritten. From
// then on stdout and stderr do not block (what does not fit is lost, as mpirun shows nothing).
void stop_blocking_on_output() {
  for (const int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    const int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  }
}

extern "C" void on_stop_signal(int signal_number, siginfo_t* info, void* /*context*/) {
  if (g_stop == nullptr) _exit(128 + signal_number);
  if (!g_repeat_quits && info != nullptr && info->si_pid == getppid()) stop_blocking_on_output();
  if (!g_stop->started()) {
    switch (signal_number) {
      case SIGINT:
        say("\nstopped by SIGINT during start-up, before the first step: nothing to save\n");
        break;
      case SIGTERM:
        say("\nstopped by SIGTERM during start-up, before the first step: nothing to save\n");
        break;
      default:
        say("\nstopped by SIGUSR1 during start-up, before the first step: nothing to save\n");
        break;
    }
    _exit(128 + signal_number);
  }
  if (!g_stop->request(signal_number)) {
    if (g_repeat_quits) _exit(128 + signal_number);
    return;
  }
  if (g_repeat_quits) {
    say("\nstopping after this step (saving a checkpoint with --save); again to quit now\n");
  } else {
    say("\nstopping after this step on every rank (saving a checkpoint with --save)\n");
  }
}

// Installs the handlers for the lifetime of one run and restores the previous ones after.
class StopSignals {
 public:
  StopSignals(train::StopRequest& stop, bool mpi) {
    g_stop = &stop;
    g_repeat_quits = !mpi;
    g_prints = comm::launcher_world().rank == 0;
    struct sigaction action {};
    action.sa_sigaction = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_SIGINFO;
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
    sigaction(SIGUSR1, &action, &old_usr1_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGUSR1, &old_usr1_, nullptr);
    g_stop = nullptr;
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  struct sigaction old_usr1_ {};
};

struct TrainFlags {
  train::TrainOptions options;
  // Holders for the flags whose absence means "the preset's value".
  int64_t vocab = 0, context = 0, layers = 0, heads = 0, channels = 0, batch = 0, seq = 0;
  std::string family;
  int64_t kv_heads = 0, ffn_hidden = 0;
  float rope_theta = 0, norm_eps = 0;
  int64_t warmup = 0;
  float min_lr = 0;
  bool json = false;
  std::string bucket_size = "1MiB";
  int64_t log_every = 0;
  int64_t seed = 1;
  // Names, turned into the layout's enums and numbers by set_layout_names.
  std::string schedule, backend = "threads", rank_order = "tp-dp-pp", dp_all_reduce = "flat";
  std::string dp_algo = "auto", cp_algo = "ring", cp_split = "balanced";
  std::string stage_layers, max_rank_memory;
};

// The layout flags given by name become the library's enums here, at the CLI's edge; each
// error names its flag and the names it knows.
void set_layout_names(const TrainFlags& f, train::LayoutOptions& l) {
  l.bucket_bytes = parse_bytes(f.bucket_size, "--bucket-size");
  if (!f.max_rank_memory.empty())
    l.max_rank_memory = parse_bytes(f.max_rank_memory, "--max-rank-memory");
  if (!f.schedule.empty()) l.schedule = plan::parse_schedule(f.schedule);
  const std::optional<comm::Backend> backend = comm::parse_backend(f.backend);
  DTRAIN_CHECK(backend.has_value(), "--backend \"", f.backend, "\" is not one of threads, mpi");
  l.backend = *backend;
  const std::optional<parallel::RankOrder> order = parallel::parse_rank_order(f.rank_order);
  DTRAIN_CHECK(order.has_value(), "--rank-order \"", f.rank_order,
               "\" must name tp, dp and pp once each (cp at most once), fastest first (e.g. "
               "tp-dp-pp or tp-cp-dp-pp)");
  l.rank_order = *order;
  DTRAIN_CHECK(f.dp_all_reduce == "flat" || f.dp_all_reduce == "hierarchical", "--dp-all-reduce \"",
               f.dp_all_reduce, "\" is not one of flat, hierarchical");
  l.dp_all_reduce =
      f.dp_all_reduce == "flat" ? train::DpAllReduce::flat : train::DpAllReduce::hierarchical;
  DTRAIN_CHECK(f.dp_algo == "auto" || f.dp_algo == "ring" || f.dp_algo == "direct", "--dp-algo \"",
               f.dp_algo, "\" is not one of auto, ring, direct");
  l.dp_algorithm = *comm::parse_algorithm(f.dp_algo);
  const std::optional<plan::CpAlgorithm> cp_algo = plan::parse_cp_algorithm(f.cp_algo);
  DTRAIN_CHECK(cp_algo.has_value() && *cp_algo != plan::CpAlgorithm::automatic, "--cp-algo \"",
               f.cp_algo, "\" is not one of ring, all-gather, ulysses");
  l.cp_algorithm = *cp_algo;
  DTRAIN_CHECK(f.cp_split == "balanced" || f.cp_split == "contiguous", "--cp-split \"", f.cp_split,
               "\" is not one of balanced, contiguous");
  l.cp_contiguous = f.cp_split == "contiguous";
  if (!f.stage_layers.empty()) {
    l.stage_layers = parallel::parse_stage_layers(f.stage_layers, "--stage-layers");
  }
}

// A flag that only means something beside another (--top-k with --experts, --cp-algo with --cp)
// is refused alone, as --schedule is without --pp: accepted and ignored, it would read as taken.
// Its default value passes (--dump-config writes every flag, and its file must replay).
void refuse_alone(const CLI::App& cmd, const std::vector<std::pair<std::string, bool>>& flags,
                  bool has_base, const std::string& needs) {
  if (has_base) return;
  for (const auto& [flag, is_default] : flags) {
    DTRAIN_CHECK(is_default || cmd.get_option(flag)->count() == 0, flag, " needs ", needs);
  }
}

// The mixture-of-experts flags (model/moe_config.h); their ranges are checked by
// model::validate, which names the flag.
void add_moe_flags(CLI::App& cmd, model::MoeConfig& m) {
  cmd.add_option("--experts", m.experts,
                 "Experts E of each MoE block's MLP (0: a dense model; model/ops/moe.h; not yet "
                 "with sample or export); --top-k, --moe-every, --capacity-factor and "
                 "--aux-loss-coef need it")
      ->capture_default_str();
  cmd.add_option("--top-k", m.top_k, "Experts each token is routed to (with --experts)")
      ->capture_default_str();
  cmd.add_option("--moe-every", m.every,
                 "Every n-th block's MLP is MoE: blocks n-1, 2n-1, ... (with --experts)")
      ->capture_default_str();
  cmd.add_option("--capacity-factor", m.capacity_factor,
                 "Each expert takes at most ceil(c * tokens * k / E) assignments per micro-batch, "
                 "the rest dropped in token order (0: dropless)")
      ->capture_default_str();
  cmd.add_option("--aux-loss-coef", m.aux_loss_coef,
                 "Coefficient of the load-balancing loss E * sum_e f_e * P_e added to the loss "
                 "trained (the reported loss is the cross-entropy; the aux loss is reported apart)")
      ->capture_default_str();
}

template <typename T>
void take_if_given(const CLI::Option* flag, T value, std::optional<T>& target) {
  if (flag->count() > 0) target = value;
}

// The folders a run reads (--resume, --init-from) or owns (--save): no output may go into them (a
// --trace over a checkpoint's shard, or a metrics line appended to its latest, loses the
// checkpoint). A --resume naming one checkpoint of a --save root (a folder holding `latest`)
// brings the root too: its `latest` and run.json are what the next --resume reads.
std::vector<NamedPath> run_folders(const train::TrainOptions& o) {
  std::vector<NamedPath> folders = {{"--resume", o.checkpoint.resume},
                                    {"--init-from", o.init_from},
                                    {"--save", o.checkpoint.save_dir}};
  if (!o.checkpoint.resume.empty()) {
    std::error_code ec;
    const std::filesystem::path root =
        std::filesystem::weakly_canonical(o.checkpoint.resume, ec).parent_path();
    if (!ec && std::filesystem::is_regular_file(root / checkpoint::kLatestName, ec)) {
      folders.push_back(
          {str("the checkpoint root of --resume ", o.checkpoint.resume, ":"), root.string()});
    }
  }
  return folders;
}

void add_train(CLI::App& app) {
  auto f = std::make_shared<TrainFlags>();
  train::TrainOptions& o = f->options;
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train the GPT model on one rank or on a DP x TP x PP mesh of ranks (--dp, --tp, --pp, "
      "--zero), as threads or as MPI processes (--backend mpi under mpirun); byte-level text or "
      "a token file (llm.c's or a raw uint16 .bin), the default corpus ships in data/");
  auto* model_flag = cmd->add_option("--model", o.model,
                                     "Model preset: tiny, bench, wide, llama-tiny or llama-small")
                         ->capture_default_str();
  auto* vocab = cmd->add_option(
      "--vocab", f->vocab,
      "Vocabulary size V (>= 256 for bytes; default: preset). With a token file: the "
      "tokens' vocabulary (needed for a raw .bin; llm.c's files default to 50257)");
  auto* context =
      cmd->add_option("--context", f->context, "Context length (rows of wpe; default: preset)");
  auto* layers = cmd->add_option("--layers", f->layers, "Transformer blocks L (default: preset)");
  auto* heads = cmd->add_option("--heads", f->heads,
                                "Attention heads NH; must divide --hidden (default: preset)");
  auto* channels =
      cmd->add_option("--hidden", f->channels, "Hidden size C, the model width (default: preset)");
  accept_old_spelling(*cmd, cmd->get_option("--hidden"), "--channels");
  add_moe_flags(*cmd, o.moe);
  auto* family = cmd->add_option("--family", f->family,
                                 "Block family: gpt (GPT-2: LayerNorm, GELU, learned positions, "
                                 "tied head) or llama (RMSNorm, SwiGLU, RoPE, grouped-query "
                                 "attention, untied head; default: preset)");
  auto* kv_heads = cmd->add_option("--kv-heads", f->kv_heads,
                                   "Llama: key/value heads, dividing --heads (1: multi-query; "
                                   "default: preset, or --heads)");
  auto* ffn_hidden =
      cmd->add_option("--ffn-hidden", f->ffn_hidden,
                      "Llama: the SwiGLU width F (default: preset, or 4 x --hidden)");
  auto* rope_theta = cmd->add_option("--rope-theta", f->rope_theta,
                                     "Llama: RoPE's base theta (default 10000; Llama 3: 500000)");
  auto* norm_eps =
      cmd->add_option("--norm-eps", f->norm_eps, "Llama: RMSNorm's eps (default 1e-5)");
  cmd->add_flag("--tie-embeddings", o.tie_embeddings,
                "Llama: the output head is the word embedding (default: untied)");
  cmd->add_option("--steps", o.steps, "Optimizer steps")->capture_default_str();
  auto* batch =
      cmd->add_option("--global-batch", f->batch, "Sequences per step B (default: preset)");
  accept_old_spelling(*cmd, cmd->get_option("--global-batch"), "--batch");
  auto* seq = cmd->add_option("--seq-length", f->seq,
                              "Tokens per sequence T, at most --context (default: the context)");
  accept_old_spelling(*cmd, cmd->get_option("--seq-length"), "--seq");
  cmd->add_option("--lr", o.lr, "Peak learning rate")->capture_default_str();
  auto* min_lr =
      cmd->add_option("--min-lr", f->min_lr, "Learning rate at the last step (default: lr/10)");
  auto* warmup = cmd->add_option("--warmup", f->warmup, "Linear warmup steps (default: steps/10)");
  cmd->add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay")
      ->capture_default_str();
  cmd->add_option("--beta1", o.beta1, "AdamW beta1")->capture_default_str();
  cmd->add_option("--beta2", o.beta2, "AdamW beta2")->capture_default_str();
  cmd->add_option("--grad-clip", o.grad_clip, "Maximum global gradient norm (0: no clipping)")
      ->capture_default_str();
  cmd->add_option("--eval-every", o.eval_every,
                  "Validation loss every N steps (0: only at start and end)")
      ->capture_default_str();
  cmd->add_option("--eval-batches", o.eval_batches, "Validation batches per evaluation")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "Seed of the initialisation and the batch order")
      ->check(whole_number(0, std::numeric_limits<int64_t>::max()))
      ->capture_default_str();
  cmd->add_option("--data", o.data,
                  "File to train on: text, read as bytes (default: data/corpus.txt); an llm.c "
                  "token file (recognised by its header); or raw uint16 tokens in a .bin file "
                  "with --vocab. Token files are memory-mapped (docs/data.md)")
      ->check(kNotEmpty);
  cmd->add_option("--val-fraction", o.val_fraction,
                  "Share of the file (its end) held out for validation")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads,
                  "Compute threads: ops split across them, OpenBLAS single-threaded in each")
      ->capture_default_str();
  cmd->add_option("--blas-threads", o.blas_threads,
                  "OpenBLAS's own threads (an alternative to --threads)")
      ->capture_default_str();
  cmd->add_option("--log-every", f->log_every,
                  "Without a terminal: a progress line every N steps (default: steps/10)")
      ->check(whole_number(0, std::numeric_limits<int64_t>::max()));
  train::LayoutOptions& l = o.layout;
  cmd->add_option("--dp", l.dp,
                  "Data-parallel ranks; each takes --global-batch / N sequences of every step")
      ->capture_default_str();
  cmd->add_option("--ep", l.ep,
                  "Expert-parallel ranks, carved from --dp: each holds --experts / N experts "
                  "and the routed rows travel to them by all-to-all (not with --cp yet)")
      ->capture_default_str();
  cmd->add_option("--zero", l.zero_stage,
                  "ZeRO stage over the DP ranks: 0 plain DP, 1 optimizer state, 2 + gradients, "
                  "3 + parameters sharded (with any --tp and --pp)")
      ->capture_default_str();
  cmd->add_option("--bucket-size", f->bucket_size,
                  "Gradient bucket size for the all-reduce / reduce-scatter, e.g. 256KiB, 1MiB")
      ->capture_default_str();
  cmd->add_option("--grad-accum", l.grad_accum,
                  "Micro-batches per step on each DP rank (gradients synced after the last)")
      ->capture_default_str();
  cmd->add_option("--micro-batch", l.micro_batch,
                  "Sequences per micro-batch b (plan's layout flag): sets --microbatches to "
                  "each DP rank's rows / b under --pp, else --grad-accum")
      ->check(whole_number(1, kMaxBatch));
  cmd->add_option("--pp", l.pp, "Pipeline stages P; the blocks split across them")
      ->capture_default_str();
  cmd->add_option("--microbatches", l.microbatches,
                  "Micro-batches M per step on each DP rank (the pipeline's); must divide the "
                  "rank's rows")
      ->capture_default_str();
  cmd->add_option("--schedule", f->schedule,
                  "Pipeline schedule: gpipe, 1f1b, interleaved or zb-h1 (default: 1f1b, or "
                  "interleaved with --vp 2 or more)");
  cmd->add_option("--vp", l.chunks,
                  "Model chunks v per stage, the interleaved schedule's (default 2 there); "
                  "v > 1 alone means --schedule interleaved, as in plan");
  accept_old_spelling(*cmd, cmd->get_option("--vp"), "--chunks");
  cmd->add_option("--stage-layers", f->stage_layers,
                  "Explicit split of the blocks, e.g. 3,3,2 (per chunk if interleaved)");
  cmd->add_option("--trace", l.trace_path,
                  "Write the last step of every rank (compute, sends, TP collectives, DP syncs "
                  "and ZeRO gathers) as a Chrome/Perfetto trace (JSON)")
      ->check(kNotEmpty);
  cmd->add_option("--timeline", l.timeline_path,
                  "Draw the last step of every rank as an SVG timeline")
      ->check(kNotEmpty);
  cmd->add_option("--tp", l.tp,
                  "Tensor-parallel ranks: heads, MLP columns and the vocabulary split across "
                  "them; must divide --heads")
      ->capture_default_str();
  cmd->add_option(
         "--cp", l.cp,
         "Context-parallel ranks: each sequence's tokens split across them, attention "
         "computed across the group (--cp-algo); --seq-length divisible by 2 x cp for ring and "
         "all-gather, by cp for ulysses; an MoE model's router sees the whole "
         "sequence (not with --ep yet)")
      ->capture_default_str();
  cmd->add_option("--cp-algo", f->cp_algo,
                  "Attention across the CP group: ring (K/V blocks passed round, load-balanced "
                  "2 x cp chunks), all-gather (K/V gathered once per layer) or ulysses "
                  "(all-to-alls to a head split; --heads divisible by cp x tp); with --cp")
      ->default_str("ring");
  cmd->add_option("--cp-split", f->cp_split,
                  "Which tokens a CP rank holds under ring and all-gather: balanced (chunks r and "
                  "2cp-1-r of 2cp: the same causal work on every rank) or contiguous (T/cp in a "
                  "row: the last rank does 2 - 1/cp times the mean, for comparison); with --cp")
      ->default_str("balanced");
  cmd->add_flag("--sequence-parallel", l.sequence_parallel,
                "With --tp N: LayerNorms and residual regions on 1/N of each micro-batch's "
                "token rows (also between pipeline stages)");
  cmd->add_option("--recompute", o.recompute,
                  "Activation recomputation: none, selective (attention scores rebuilt in "
                  "backward) or full (each block's forward rerun before its backward)")
      ->transform(recompute_names())
      ->default_str("none");
  cmd->add_option("--precision", o.precision,
                  "fp32, or bf16 (mixed precision): bf16 weights, gradients and stored "
                  "activations, fp32 master weights and AdamW moments (2 + 2 + 12 bytes per "
                  "parameter); every matrix product on bf16 operands with fp32 sums (oneDNN's "
                  "AVX512-BF16/AMX kernels where the CPU has them, else emulated); TP and PP "
                  "move bf16 activations; LayerNorm, softmax, the loss and the residual stream "
                  "stay fp32")
      ->transform(precision_names())
      ->default_str("fp32");
  cmd->add_option("--grad-reduce", l.grad_reduce,
                  "Element type of the DP gradient all-reduce / reduce-scatters on the wire: fp32 "
                  "(each hop adds in fp32, the average rounded once into bf16 gradients under "
                  "--precision bf16), or bf16 (half the bytes; each ring hop rounds to bf16)")
      ->transform(precision_names())
      ->default_str("fp32");
  cmd->add_option("--backend", f->backend,
                  "threads (rank threads in this process) or mpi (the processes mpirun started)")
      ->default_str("threads");
  cmd->add_option("--timeout", l.timeout_s,
                  "Seconds a rank waits for a peer before failing (under mpirun: before the job "
                  "is aborted with a message naming the peer)")
      ->capture_default_str();
  cmd->add_option("--rank-order", f->rank_order,
                  "How global ranks map onto the DP x CP x TP x PP mesh, fastest-varying axis "
                  "first (tp-dp-pp keeps TP groups on consecutive ranks, inside a node; cp, when "
                  "not named, goes right after tp)")
      ->default_str("tp-dp-pp");
  cmd->add_option("--ranks-per-node", l.ranks_per_node,
                  "Declare the topology: G consecutive ranks per node; the report shows groups "
                  "that cross nodes and each rank's intra- and inter-node bytes")
      ->check(whole_number(1, kMaxRanks));
  cmd->add_option("--max-rank-memory", f->max_rank_memory,
                  "Refuse a layout whose ranks need more than this (plan/ formulas, before the "
                  "first step) and stop a run whose rank's measured peak passes it, e.g. 64MiB");
  cmd->add_option("--save", o.checkpoint.save_dir,
                  "Write checkpoints under DIR (DIR/step-NNNNNNNN, DIR/latest) at the end")
      ->check(kNotEmpty);
  cmd->add_option("--save-every", o.checkpoint.save_every,
                  "With --save: also write a checkpoint every N steps");
  cmd->add_option("--keep-checkpoints", o.checkpoint.keep,
                  "With --save: keep only the newest K checkpoints (0: all)")
      ->capture_default_str();
  cmd->add_option("--resume", o.checkpoint.resume,
                  "Continue from a checkpoint directory, or from DIR/latest of a --save DIR; "
                  "any layout can read it")
      ->check(kNotEmpty);
  cmd->add_option("--init-from", o.init_from,
                  "Start from the weights of a Hugging Face GPT-2 folder (model.safetensors + "
                  "config.json, as dtrain export writes); the model's shape is its config's; any "
                  "layout")
      ->check(kNotEmpty);
  cmd->add_option("--metrics", o.metrics_path,
                  "Write FILE.jsonl: the run record, then a JSON line per step (loss, lr, "
                  "grad_norm, step_ms, tokens_per_s, memory_peak_bytes) and per evaluation "
                  "(val_loss); dtrain plot draws it")
      ->check(kNotEmpty);
  cmd->add_option("--write-eval-batch", o.eval_batch_out,
                  "Write validation batch 0 to FILE: int32 inputs (B, T) then targets (B, T), "
                  "little-endian (its loss is the first validation loss with --eval-batches 1)")
      ->check(kNotEmpty);
  cmd->add_flag("--overwrite", o.checkpoint.overwrite,
                "With --save: take over a directory holding another run's checkpoints (they are "
                "removed when this run writes its first checkpoint)");
  cmd->add_flag("--allow-resume-changes", o.checkpoint.allow_resume_changes,
                "With --resume: continue although the learning rate, schedule, AdamW settings, "
                "clipping or data differ from the checkpoint's run");
  cmd->add_option(
      "--inject-fault", o.inject_fault,
      "Make one rank fail before a step (tests): rank=R,step=S,kind=throw|exit|bad_alloc");
  cmd->add_option("--cluster", l.cluster_path,
                  "A cluster description (JSON, e.g. from `dtrain calibrate`): the report prices "
                  "each rank's communication on its links (with --ranks-per-node)")
      ->check(kNotEmpty);
  cmd->add_option("--dp-all-reduce", f->dp_all_reduce,
                  "flat (one ring over the DP group) or hierarchical (reduce-scatter inside each "
                  "node, all-reduce across nodes, all-gather inside; needs --ranks-per-node and "
                  "--zero 0)")
      ->default_str("flat");
  cmd->add_option("--dp-algo", f->dp_algo,
                  "The flat DP syncs' algorithm (all-reduces, ZeRO's reduce-scatters and "
                  "gathers): ring, direct (ranks that share memory read each other's buffers in "
                  "place: the threads backend, or MPI ranks all on one node), or auto (direct "
                  "where the DP group shares memory and sits on one node, else ring)")
      ->default_str("auto");
  cmd->add_flag("--json", f->json, "Print the summary as JSON instead of a table");

  cmd->callback([=] {
    train::TrainOptions& opt = f->options;
    // Without --data the run reads the corpus that ships with dtrain: no output may be it either.
    const std::string data_flag = opt.data.empty() ? "--data (the default corpus)" : "--data";
    const std::vector<NamedPath> outputs = {{"--metrics", opt.metrics_path},
                                            {"--trace", opt.layout.trace_path},
                                            {"--timeline", opt.layout.timeline_path},
                                            {"--write-eval-batch", opt.eval_batch_out}};
    refuse_outputs_that_are_inputs(
        *cmd,
        {{data_flag, opt.data.empty() ? data::default_corpus_path() : opt.data},
         {"--cluster", opt.layout.cluster_path}},
        outputs);
    refuse_outputs_in_folders(run_folders(opt), outputs);
    const model::MoeConfig dense;
    refuse_alone(*cmd,
                 {{"--top-k", opt.moe.top_k == dense.top_k},
                  {"--moe-every", opt.moe.every == dense.every},
                  {"--capacity-factor", opt.moe.capacity_factor == dense.capacity_factor},
                  {"--aux-loss-coef", opt.moe.aux_loss_coef == dense.aux_loss_coef}},
                 opt.moe.experts > 0 || preset_routes(opt.model),
                 "--experts E (a mixture-of-experts model)");
    const TrainFlags defaults;
    refuse_alone(*cmd,
                 {{"--cp-algo", f->cp_algo == defaults.cp_algo},
                  {"--cp-split", f->cp_split == defaults.cp_split}},
                 opt.layout.cp > 1, "--cp 2 or more (context parallelism)");
    opt.model_given = model_flag->count() > 0;
    take_if_given(vocab, f->vocab, opt.vocab);
    take_if_given(context, f->context, opt.context);
    take_if_given(layers, f->layers, opt.layers);
    take_if_given(heads, f->heads, opt.heads);
    take_if_given(channels, f->channels, opt.channels);
    if (family->count() > 0) {
      DTRAIN_CHECK(f->family == "gpt" || f->family == "llama", "--family: unknown family '",
                   f->family, "' (use gpt or llama)");
      opt.family = f->family == "llama" ? model::ModelFamily::llama : model::ModelFamily::gpt;
    }
    take_if_given(kv_heads, f->kv_heads, opt.kv_heads);
    take_if_given(ffn_hidden, f->ffn_hidden, opt.ffn_hidden);
    take_if_given(rope_theta, f->rope_theta, opt.rope_theta);
    take_if_given(norm_eps, f->norm_eps, opt.norm_eps);
    take_if_given(batch, f->batch, opt.batch);
    take_if_given(seq, f->seq, opt.seq);
    take_if_given(warmup, f->warmup, opt.warmup);
    take_if_given(min_lr, f->min_lr, opt.min_lr);
    opt.seed = static_cast<uint64_t>(f->seed);
    set_layout_names(*f, opt.layout);
    train::ProgressPrinter progress(stderr, train::is_terminal(stderr), f->log_every);
    bool reporter = true;
    train::StopRequest stop;
    std::optional<StopSignals> signals;
    signals.emplace(stop, opt.layout.backend == comm::Backend::mpi);
    opt.stop = &stop;
    // In process (the Python module), the caller's observer replaces the progress printer.
    const EmbeddedHooks* embedded = embedded_hooks();
    train::TrainObserver* observer =
        embedded != nullptr && embedded->observer != nullptr ? embedded->observer : &progress;
    const train::TrainSummary summary = train::run_training(opt, observer, &reporter);
    signals.reset();
    // Under mpirun, the process holding rank 0 prints; every rank exits as the stop says.
    if (!reporter) {
      if (summary.stop_signal != 0) throw CLI::RuntimeError(128 + summary.stop_signal);
      return;
    }
    if (f->json) {
      std::cout << with_build(train::summary_to_json(summary)).dump(2) << "\n";
    } else {
      train::print_summary(std::cout, summary);
    }
    std::cout.flush();
    // 128 + the signal, as a shell reports a process the signal ended (130 for Ctrl-C).
    if (summary.stop_signal != 0) throw CLI::RuntimeError(128 + summary.stop_signal);
  });
}

const CommandRegistration kRegistration("", add_train);

}  // namespace
}  // namespace dtrain::cli
