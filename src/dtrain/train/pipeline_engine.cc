// PipelineEngine: the stage model and its optimizer, the step after the schedule (the gradient
// finalization of parallel/finalize_grads.h, AdamW), the flag checks, and the SPMD run over the
// threads backend with its report, trace and timeline.
#include "dtrain/train/pipeline_engine.h"

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/parallel/finalize_grads.h"
#include "dtrain/parallel/mesh.h"
#include "dtrain/parallel/pipeline_checker.h"
#include "dtrain/plan/comm_model.h"
#include "dtrain/trace/chrome_trace.h"
#include "dtrain/trace/timeline_svg.h"
#include "dtrain/train/step_update.h"

namespace dtrain::train {
namespace {

const parallel::PartitionFlags kFlags{"--pp", "--layers", "--stage-layers", "--chunks"};

int chunks_of(const PipelineSetup& s, plan::ScheduleKind kind) {
  if (s.chunks != 0) return s.chunks;
  return kind == plan::ScheduleKind::interleaved ? 2 : 1;
}

parallel::PipelineExecutorConfig executor_config(const PipelineEngineConfig& c) {
  parallel::PipelineExecutorConfig e;
  e.schedule = parallel::make_schedule(c.schedule, c.partition.stages(), c.microbatches,
                                       c.partition.chunks());
  e.partition = c.partition;
  e.micro_batch = c.base.batch / c.microbatches;
  e.seq = c.base.seq;
  return e;
}

void check_writable(const std::string& path, const char* flag) {
  if (path.empty()) return;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  DTRAIN_CHECK(dir.empty() || std::filesystem::is_directory(dir), flag, ": cannot write ", path,
               " (no directory ", dir.string(), ")");
}

std::string percent(double fraction) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << 100 * fraction << "%";
  return out.str();
}

}  // namespace

plan::ScheduleKind parse_schedule(const std::string& text) {
  std::string known;
  for (plan::ScheduleKind k :
       {plan::ScheduleKind::gpipe, plan::ScheduleKind::one_f_one_b, plan::ScheduleKind::interleaved,
        plan::ScheduleKind::zero_bubble_h1}) {
    if (text == plan::name(k)) return k;
    known += known.empty() ? "" : ", ";
    known += plan::name(k);
  }
  throw Error(str("--schedule \"", text, "\" is not one of ", known));
}

parallel::StagePartition validate_pipeline(const PipelineSetup& s, const model::GptConfig& m,
                                           int64_t batch) {
  DTRAIN_CHECK(s.pp >= 1, "--pp must be >= 1, got ", s.pp);
  DTRAIN_CHECK(s.microbatches >= 1, "--microbatches must be >= 1, got ", s.microbatches);
  DTRAIN_CHECK(batch % s.microbatches == 0, "--batch ", batch, " is not divisible into ",
               "--microbatches ", s.microbatches, " micro-batches of equal size");
  const plan::ScheduleKind kind = parse_schedule(s.schedule);
  DTRAIN_CHECK(s.chunks >= 0, "--chunks must be >= 1, got ", s.chunks);
  const int v = chunks_of(s, kind);
  DTRAIN_CHECK(v == 1 || kind == plan::ScheduleKind::interleaved, "--chunks ", v,
               " applies only to --schedule interleaved, not ", s.schedule);
  check_writable(s.trace_path, "--trace");
  check_writable(s.timeline_path, "--timeline");
  const int layers = static_cast<int>(m.layers);
  if (s.stage_layers.empty()) return parallel::balanced_partition(layers, s.pp, v, kFlags);
  const std::vector<int> list = parallel::parse_stage_layers(s.stage_layers, "--stage-layers");
  return parallel::explicit_partition(layers, s.pp, v, list, kFlags);
}

PipelineEngine::PipelineEngine(const PipelineEngineConfig& config, comm::Communicator& pp)
    : config_(config),
      pp_(pp),
      team_(config.base.threads),
      model_(config.base.model, parallel::stage_of(config.partition, pp.rank()), &tracker_, nullptr,
             &team_, config.base.recompute),
      adamw_(model_.param_count(), config.base.adamw, &tracker_) {
  const int P = config.partition.stages();
  DTRAIN_CHECK(pp.size() == P, "pipeline: ", pp.size(), " ranks for ", P, " stages");
  DTRAIN_CHECK(config.microbatches >= 1 && config.base.batch % config.microbatches == 0, "--batch ",
               config.base.batch, " is not divisible into --microbatches ", config.microbatches,
               " micro-batches of equal size");
  // Every stage draws its tensors' initial values from the whole model's seeds (by name), so
  // the two copies of the tied wte start equal and the run matches the serial one.
  model_.init_params(config.base.init_seed);
  if (P > 1 && (pp.rank() == 0 || pp.rank() == P - 1)) {
    const int members[] = {0, P - 1};
    embedding_group_ = pp.subgroup(members, "embedding");
  }
  executor_ =
      std::make_unique<parallel::PipelineExecutor>(pp, model_, executor_config(config), &tracker_);
}

std::string PipelineEngine::describe() const {
  const parallel::DeviceMesh mesh(1, 1, config_.partition.stages());
  std::string s = mesh.describe(pp_.global_rank());
  s += str(" ", plan::name(config_.schedule));
  if (config_.partition.chunks() > 1) s += str(" (v = ", config_.partition.chunks(), ")");
  s += str(", ", config_.microbatches, " micro-batches of ",
           config_.base.batch / config_.microbatches);
  return s;
}

float PipelineEngine::broadcast_from_last(float value) {
  comm::broadcast<float>(pp_, &value, 1, pp_.size() - 1);
  return value;
}

StepStats PipelineEngine::train_step(const Batch& batch, float lr) {
  DTRAIN_CHECK(batch.batch == config_.base.batch && batch.seq == config_.base.seq,
               "pipeline: batch (", batch.batch, ", ", batch.seq, ") differs from the configured (",
               config_.base.batch, ", ", config_.base.seq, ")");
  StepStats stats;
  PipelineEngineStep step;
  model_.zero_grads();
  const comm::Traffic before = pp_.traffic();
  step.pipeline = executor_->run(batch.inputs, batch.targets);
  step.pipeline_bytes_sent = (pp_.traffic() - before).bytes_sent;
  for (const parallel::MeasuredAction& m : step.pipeline.actions) {
    const double ms = (m.end_us - m.start_us) * 1e-3;
    if (m.action.kind == parallel::ActionKind::forward) stats.forward_ms += ms;
    if (parallel::is_compute(m.action.kind) && m.action.kind != parallel::ActionKind::forward) {
      stats.backward_ms += ms;
    }
  }
  Stopwatch optimizer_watch;
  auto span = [&](const char* label, double start) {
    step.after.push_back({label, trace::SpanKind::other, -1, -1, start, now_us()});
  };

  // The tied wte's two halves summed (first and last stage), then the global norm: each stage
  // counts its own tensors, the last stage's wte copy left out (parallel/finalize_grads.h).
  double start = now_us();
  parallel::sum_tied_embedding_grads(model_, embedding_group_.get());
  if (embedding_group_ != nullptr) span("sum wte gradient", start);
  start = now_us();
  parallel::GradOwnership owner;
  owner.coord.pp = pp_.rank();
  owner.tied_copy = parallel::holds_tied_copy(model_.stage());
  const parallel::GradNorm norm = parallel::global_grad_norm(
      parallel::owned_sum_of_squares(model_.param_table(), owner, model_.grads()), &pp_,
      config_.base.grad_clip);
  stats.grad_norm = norm.norm;
  stats.loss = broadcast_from_last(step.pipeline.loss);
  span("gradient norm", start);
  check_not_diverged(stats);
  start = now_us();
  adamw_.step(model_.params(), model_.grads(), lr, norm.clip_scale);
  span("AdamW", start);
  stats.optimizer_ms = optimizer_watch.elapsed_us() * 1e-3;
  PipelineStepTiming timing;
  const std::vector<parallel::MeasuredAction>& actions = step.pipeline.actions;
  if (!actions.empty()) {
    timing.first_start_us = actions.front().start_us;
    timing.last_end_us = actions.back().end_us;
  }
  for (const parallel::MeasuredAction& m : actions) {
    if (parallel::is_compute(m.action.kind)) timing.busy_us += m.end_us - m.start_us;
  }
  timings_.push_back(timing);
  last_step_ = std::move(step);
  return stats;
}

// A stage holds whole tensors under their serial names. The tied wte lives on the first and
// the last stage with the same values; only the stage with the embedding writes it.
RankState PipelineEngine::export_state() {
  RankState s;
  const model::ParamTable& table = model_.param_table();
  const std::pair<StateKind, std::span<const float>> kinds[] = {{StateKind::param, model_.params()},
                                                                {StateKind::adam_m, adamw_.m()},
                                                                {StateKind::adam_v, adamw_.v()}};
  for (const model::ParamTensor& t : table.tensors()) {
    if (t.name == "wte" && !model_.stage().embedding) continue;
    for (const auto& [kind, values] : kinds) {
      StatePiece p{t.name, kind, {{0, t.count}}, {}};
      const auto first = values.begin() + t.offset;
      p.data.assign(first, first + t.count);
      s.pieces.push_back(std::move(p));
    }
  }
  s.adam_step = adamw_.step_count();
  return s;
}

void PipelineEngine::import_state(const SerialState& state) {
  copy_whole_state(state, model_.param_table(), model_.params(), adamw_.m(), adamw_.v());
  adamw_.set_step_count(state.adam_step);
}

const PipelineEngineStep& PipelineEngine::last_step() const {
  DTRAIN_CHECK(!timings_.empty(), "pipeline: no training step yet");
  return last_step_;
}

float PipelineEngine::eval_loss(const Batch& batch) {
  return broadcast_from_last(executor_->evaluate(batch.inputs, batch.targets));
}

namespace {

PipelineStageRow stage_row(PipelineEngine& engine, const parallel::ScheduleReport& checked) {
  parallel::PipelineExecutor& ex = engine.executor();
  const MemoryTracker& mem = engine.memory();
  PipelineStageRow row;
  row.rank = ex.rank();
  row.layers = parallel::layer_ranges(ex.partition(), ex.rank());
  row.param_count = engine.model().param_count();
  row.params_bytes = mem.current_bytes(MemoryTag::params);
  row.grads_bytes = mem.current_bytes(MemoryTag::grads);
  row.optimizer_bytes = mem.current_bytes(MemoryTag::optimizer);
  row.activations_peak_bytes = mem.peak_bytes(MemoryTag::activations);
  row.microbatch_activation_bytes = ex.microbatch_activation_bytes();
  const PipelineEngineStep& last = engine.last_step();
  row.peak_inflight_bytes = last.pipeline.peak_inflight_bytes;
  row.measured_inflight = static_cast<double>(row.peak_inflight_bytes) /
                          static_cast<double>(row.microbatch_activation_bytes);
  // A split backward (ZB-H1) frees a micro-batch at its W: the checker's F-to-W weight stash.
  const parallel::RankReport& rr = checked.ranks[static_cast<size_t>(ex.rank())];
  row.checker_inflight = ex.schedule().kind == plan::ScheduleKind::zero_bubble_h1
                             ? rr.peak_weight_stash
                             : rr.peak_inflight;
  for (const parallel::MeasuredAction& m : last.pipeline.actions) {
    if (parallel::is_compute(m.action.kind)) row.busy_ms += (m.end_us - m.start_us) * 1e-3;
  }
  row.bytes_sent = last.pipeline_bytes_sent;
  int64_t sends = 0;
  for (const parallel::Action& a : ex.schedule().per_rank[static_cast<size_t>(ex.rank())]) {
    sends += parallel::is_send(a.kind) ? 1 : 0;
  }
  const parallel::PipelineExecutorConfig& c = ex.config();
  row.formula_bytes_sent =
      sends * static_cast<int64_t>(plan::pp_bytes_per_microbatch(
                  c.micro_batch, c.seq, engine.model().config().channels, sizeof(float), 1, false));
  return row;
}

}  // namespace

TrainSummary run_pipeline(const SerialEngineConfig& base, const PipelineSetup& setup,
                          const TrainerConfig& trainer, const TokenSplit& data,
                          TrainObserver* observer, double timeout_s) {
  PipelineEngineConfig config;
  config.base = base;
  config.partition = validate_pipeline(setup, base.model, base.batch);
  config.schedule = parse_schedule(setup.schedule);
  config.microbatches = setup.microbatches;
  const int P = setup.pp;
  const parallel::PipelineSchedule schedule = executor_config(config).schedule;
  const parallel::ScheduleReport unit = parallel::simulate_schedule(schedule);

  TrainSummary summary;
  std::vector<PipelineStageRow> rows(static_cast<size_t>(P));
  std::vector<PipelineEngineStep> last_steps(static_cast<size_t>(P));
  std::vector<std::vector<PipelineStepTiming>> timings(static_cast<size_t>(P));
  comm::threads::run_ranks(
      P,
      [&](comm::Communicator& world) {
        PipelineEngine engine(config, world);
        Trainer loop(trainer, engine, data, world.rank() == 0 ? observer : nullptr);
        TrainSummary s = loop.run();
        const auto r = static_cast<size_t>(world.rank());
        rows[r] = stage_row(engine, unit);
        last_steps[r] = engine.last_step();
        timings[r] = engine.timings();
        if (r == 0) summary = std::move(s);
      },
      comm::threads::WorldOptions{timeout_s});

  PipelineReport report;
  report.setup = setup;
  report.chunks = config.partition.chunks();
  report.micro_batch = base.batch / setup.microbatches;
  report.stages = rows;
  report.weight_gradient_split = config.schedule == plan::ScheduleKind::zero_bubble_h1;
  // Step k's bubble as measured_bubble defines it: 1 - sum(busy) / (P * makespan).
  const size_t K = timings[0].size();
  double bubble_sum = 0;
  for (size_t k = K > 1 ? 1 : 0; k < K; ++k) {
    double first = timings[0][k].first_start_us, last = timings[0][k].last_end_us, busy = 0;
    for (const auto& rank : timings) {
      first = std::min(first, rank[k].first_start_us);
      last = std::max(last, rank[k].last_end_us);
      busy += rank[k].busy_us;
    }
    bubble_sum += last > first ? 1 - busy / (P * (last - first)) : 0;
  }
  report.mean_measured_bubble = bubble_sum / static_cast<double>(K > 1 ? K - 1 : 1);
  std::vector<std::vector<parallel::MeasuredAction>> last_actions;
  for (const PipelineEngineStep& s : last_steps) last_actions.push_back(s.pipeline.actions);
  const parallel::MeasuredBubble last = parallel::measured_bubble(schedule, last_actions);
  report.makespan_ms = last.makespan_us * 1e-3;
  report.measured_bubble = last.fraction_of_total;
  report.forward_ms = last.forward_us * 1e-3;
  report.backward_ms = last.backward_input_us * 1e-3;
  report.weight_ms = last.backward_weight_us * 1e-3;
  const plan::StageTimes times{last.forward_us, last.backward_input_us, last.backward_weight_us};
  report.predicted_bubble =
      plan::pipeline_bubble(config.schedule, P, setup.microbatches, report.chunks, times)
          .fraction_of_total;
  parallel::SimulationOptions sim;
  sim.times = times;
  report.simulated_bubble = parallel::simulate_schedule(schedule, sim).bubble_fraction_of_total;

  if (!setup.trace_path.empty() || !setup.timeline_path.empty()) {
    double origin = last_actions[0].empty() ? 0 : last_actions[0].front().start_us;
    for (const auto& rank_actions : last_actions) {
      for (const parallel::MeasuredAction& m : rank_actions) origin = std::min(origin, m.start_us);
    }
    trace::Timeline timeline = parallel::to_measured_timeline(schedule, last_actions, origin);
    for (size_t r = 0; r < last_steps.size(); ++r) {
      for (trace::Span s : last_steps[r].after) {
        s.start -= origin;
        s.end -= origin;
        timeline.rows[r].spans.push_back(s);
      }
    }
    timeline.title = str(setup.schedule, " on ", P, " ranks, M = ", setup.microbatches,
                         report.chunks > 1 ? str(", v = ", report.chunks) : std::string(),
                         ": step ", K, " measured, bubble ", percent(report.measured_bubble),
                         " (predicted ", percent(report.predicted_bubble), ")");
    if (!setup.trace_path.empty()) trace::write_chrome_trace(timeline, setup.trace_path);
    if (!setup.timeline_path.empty()) trace::write_timeline_svg(timeline, setup.timeline_path);
  }
  summary.pipeline = report;
  return summary;
}

}  // namespace dtrain::train
