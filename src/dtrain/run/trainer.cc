// Trainer::run: the loop, timing and the summary.
#include "dtrain/run/trainer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

#include "dtrain/comm/collectives.h"
#include "dtrain/core/check.h"
#include "dtrain/core/cpu_usage.h"
#include "dtrain/core/malloc_info.h"
#include "dtrain/core/system_memory.h"
#include "dtrain/core/timer.h"
#include "dtrain/formats/hf_folder.h"
#include "dtrain/formats/safetensors.h"
#include "dtrain/run/metrics.h"

namespace dtrain::train {

Trainer::Trainer(const TrainerConfig& config, StepEngine& engine, const data::TokenSplit& data,
                 TrainObserver* observer, comm::Communicator* stop_group)
    : config_(config), engine_(engine), data_(data), observer_(observer), stop_group_(stop_group) {
  DTRAIN_CHECK(config.steps > 0, "--steps must be positive (got ", config.steps, ")");
  DTRAIN_CHECK(config.eval_every >= 0, "--eval-every must not be negative (got ", config.eval_every,
               ")");
  DTRAIN_CHECK(config.eval_batches > 0, "--eval-batches must be positive (got ",
               config.eval_batches, ")");
  optim::validate(config.schedule);
  data::check_split_fits(data, config.seq);
}

Trainer::~Trainer() = default;

float Trainer::evaluate() {
  batch_.resize(config_.batch, config_.seq);
  double total = 0;
  for (int64_t k = 0; k < config_.eval_batches; ++k) {
    data::eval_batch(data_.val, k, batch_);
    total += engine_.eval_loss(batch_);
  }
  return static_cast<float>(total / static_cast<double>(config_.eval_batches));
}

int Trainer::agree_on_stop(int64_t steps_done) {
  if (config_.stop == nullptr) return 0;
  if (stop_group_ == nullptr) {
    return config_.stop->should_stop(steps_done) ? config_.stop->signal_number() : 0;
  }
  // Every rank runs this at every step boundary, so the ranks that got no signal (mpirun may
  // deliver it to some only) learn of it at the same step as the ones that did.
  int64_t signal = config_.stop->signal_number();
  comm::all_reduce(*stop_group_, &signal, 1, comm::ReduceOp::max);
  return static_cast<int>(signal);
}

int Trainer::job_rank() {
  comm::Communicator* comm = engine_.job_communicator();
  return comm != nullptr ? comm->rank() : 0;
}

// Every rank reads the whole checkpoint and takes its share (the SPMD engines run one Trainer
// per rank); the step, the sampler's position and RNG, and the AdamW step come back with it,
// so the loss sequence continues bit for bit.
int64_t Trainer::resume(data::BatchSampler& sampler) {
  const checkpoint::LoadedCheckpoint c = checkpoint::load_checkpoint(config_.checkpoint.resume);
  checkpoint::check_compatible(c, config_.model, config_.batch, config_.seq, "--resume",
                               config_.checkpoint.allow_resume_changes);
  const checkpoint::TrainerPosition& p = c.manifest.position;
  DTRAIN_CHECK(p.data_seed == config_.data_seed, "--resume ", c.dir,
               ": written by a run with another --seed (its batch order differs)");
  DTRAIN_CHECK(p.step < config_.steps, "--resume ", c.dir, ": the checkpoint is at step ", p.step,
               ", nothing is left to do for --steps ", config_.steps);
  engine_.import_state(c.state);
  sampler.set_state(p.sampler);
  return p.step;
}

void Trainer::init_from() {
  checkpoint::SerialState state = formats::load_hf(config_.init_from, "--init-from");
  // The routing's training settings are the run's (a folder holds weights, not them).
  state.model.moe.capacity_factor = config_.model.moe.capacity_factor;
  state.model.moe.aux_loss_coef = config_.model.moe.aux_loss_coef;
  DTRAIN_CHECK(state.model == config_.model, "--init-from ", config_.init_from, ": the model is ",
               model::describe(state.model), ", but this run's is ",
               model::describe(config_.model));
  engine_.import_state(state);
}

void Trainer::write_eval_batch() {
  data::Batch b;
  b.resize(config_.batch, config_.seq);
  data::eval_batch(data_.val, 0, b);
  std::string bytes(reinterpret_cast<const char*>(b.inputs.data()), b.inputs.size() * 4);
  bytes.append(reinterpret_cast<const char*>(b.targets.data()), b.targets.size() * 4);
  formats::write_file_atomically(config_.eval_batch_out, bytes, "--write-eval-batch");
}

std::string Trainer::save(int64_t step, const data::BatchSampler& sampler) {
  checkpoint::TrainerPosition p;
  p.step = step;
  p.batch = config_.batch;
  p.seq = config_.seq;
  p.data_seed = config_.data_seed;
  p.sampler = sampler.state();
  return checkpoint::save_checkpoint(engine_, config_.model, p, config_.checkpoint.save_dir,
                                     config_.checkpoint.keep, config_.run,
                                     config_.checkpoint.overwrite);
}

TrainSummary Trainer::run() {
  TrainSummary s;
  s.config = config_;
  s.engine = engine_.describe();
  s.data_source = data_.source;
  s.train_tokens = static_cast<int64_t>(data_.train.size());
  s.val_tokens = static_cast<int64_t>(data_.val.size());
  s.param_count = engine_.param_count();
  s.tokens_per_step = config_.batch * config_.seq;
  s.ln_vocab = std::log(static_cast<double>(config_.model.vocab));
  if (observer_ != nullptr) observer_->on_start(config_, engine_);

  auto eval_now = [&](int64_t step) {
    const EvalRecord r{step, evaluate()};
    s.evals.push_back(r);
    if (observer_ != nullptr) observer_->on_eval(r);
    if (metrics_) metrics_->eval(r);
  };
  const checkpoint::CheckpointConfig& ckpt = config_.checkpoint;
  if (!ckpt.save_dir.empty() && job_rank() == 0 && !save_lock_) {
    save_lock_ = std::make_unique<checkpoint::SaveDirectoryLock>(
        ckpt.save_dir, config_.run.id, !ckpt.resume.empty(), ckpt.overwrite);
  }
  data::BatchSampler sampler(data_.train, config_.batch, config_.seq, config_.data_seed);
  if (config_.checkpoint.resume.empty() && !config_.init_from.empty()) init_from();
  const int64_t first = config_.checkpoint.resume.empty() ? 0 : resume(sampler);
  // The outputs come after every input was read and accepted: a refused resume or save folder
  // leaves the metrics file and the eval batch as they were.
  if (!config_.metrics_path.empty() && job_rank() == 0) {
    metrics_ = std::make_unique<MetricsWriter>(config_.metrics_path, config_,
                                               !config_.checkpoint.resume.empty());
  }
  if (!config_.eval_batch_out.empty() && job_rank() == 0) write_eval_batch();
  s.first_step = first;
  eval_now(first);

  std::vector<double> step_ms;
  std::optional<CpuTimes> cpu_after_first;
  if (config_.stop != nullptr) config_.stop->mark_started();
  for (int64_t step = first; step < config_.steps; ++step) {
    inject_fault_if_due(config_.fault, job_rank(), step + 1);
    sampler.next(batch_);
    StepRecord r;
    r.step = step + 1;
    r.lr = optim::learning_rate(config_.schedule, step);
    const int64_t faults_before = minor_page_faults();
    Stopwatch watch;
    r.stats = engine_.train_step(batch_, r.lr);
    r.step_ms = watch.elapsed_us() * 1e-3;
    r.page_faults = minor_page_faults() - faults_before;
    // --max-rank-memory is a limit, not a forecast: the rank's measured peak must stay under it.
    const int64_t peak = engine_.memory().peak_total_bytes();
    DTRAIN_CHECK(config_.max_rank_memory == 0 || peak <= config_.max_rank_memory,
                 "--max-rank-memory ", format_gib(static_cast<double>(config_.max_rank_memory)),
                 ": ", engine_.describe(), " held ", format_gib(static_cast<double>(peak)), " (",
                 peak, " bytes) at its peak in step ", step + 1,
                 " (the plan/ figure leaves out communication buffers; shard further or raise the "
                 "cap)");
    s.train_losses.push_back(r.stats.loss);
    if (config_.model.moe.enabled()) {
      s.moe_steps.push_back({r.step, r.stats.aux_loss, r.stats.expert_tokens,
                             r.stats.moe_assignments, r.stats.moe_dropped});
    }
    step_ms.push_back(r.step_ms);
    s.forward_ms += r.stats.forward_ms;
    s.backward_ms += r.stats.backward_ms;
    s.optimizer_ms += r.stats.optimizer_ms;
    if (observer_ != nullptr) observer_->on_step(r);
    if (metrics_) metrics_->step(r, s.tokens_per_step, peak);
    const bool last = step + 1 == config_.steps;
    if (last || (config_.eval_every > 0 && (step + 1) % config_.eval_every == 0)) {
      eval_now(step + 1);
    }
    const int stop_signal = last ? 0 : agree_on_stop(step + 1);
    const bool stopping = stop_signal != 0;
    if (!ckpt.save_dir.empty() &&
        (last || stopping || (ckpt.save_every > 0 && (step + 1) % ckpt.save_every == 0))) {
      s.last_checkpoint = save(step + 1, sampler);
    }
    s.last_step = step + 1;
    // The window of the clock's measured steps (those after the first) starts here.
    if (step == first && config_.single_process_job) cpu_after_first = read_cpu_times();
    if (stopping) {
      s.stop_signal = stop_signal;
      break;
    }
  }
  if (cpu_after_first && s.last_step - first > 1) {
    const CpuTimes end = read_cpu_times();
    s.other_load_cores = other_load_cores(*cpu_after_first, end,
                                          static_cast<int>(std::thread::hardware_concurrency()));
    s.other_load_window_s = end.wall_s - cpu_after_first->wall_s;
  }

  const auto n = static_cast<double>(s.last_step - first);
  for (double ms : step_ms) s.train_seconds += ms * 1e-3;
  s.ms_per_step = s.train_seconds * 1e3 / n;
  std::vector<double> sorted = step_ms;
  std::sort(sorted.begin(), sorted.end());
  s.median_ms_per_step = sorted[sorted.size() / 2];
  s.tokens_per_s = static_cast<double>(s.tokens_per_step) * n / s.train_seconds;
  s.forward_ms /= n;
  s.backward_ms /= n;
  s.optimizer_ms /= n;
  s.first_train_loss = s.train_losses.front();
  s.final_train_loss = s.train_losses.back();
  const size_t tail = std::min<size_t>(10, s.train_losses.size());
  double tail_sum = 0;
  for (size_t i = s.train_losses.size() - tail; i < s.train_losses.size(); ++i) {
    tail_sum += s.train_losses[i];
  }
  s.final_train_loss_avg = static_cast<float>(tail_sum / static_cast<double>(tail));
  s.first_val_loss = s.evals.front().val_loss;
  s.final_val_loss = s.evals.back().val_loss;

  const MemoryTracker& mem = engine_.memory();
  for (int t = 0; t < kMemoryTagCount; ++t) {
    const auto tag = static_cast<MemoryTag>(t);
    s.memory.push_back({tag, mem.current_bytes(tag), mem.peak_bytes(tag)});
  }
  s.peak_total_bytes = mem.peak_total_bytes();
  if (observer_ != nullptr) observer_->on_finish(s);
  return s;
}

}  // namespace dtrain::train
