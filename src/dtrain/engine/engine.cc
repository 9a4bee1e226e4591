// Engine: the groups of the mesh, the step (schedule with the DP hooks; gradient finalization
// and AdamW in step_finalize.cc), what it measures per step, and its checkpoint mapping.
#include "dtrain/engine/engine.h"

#include <algorithm>
#include <cmath>

#include "dtrain/clock/engine_clock.h"
#include "dtrain/comm/collectives.h"
#include "dtrain/comm/rank_order.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/cost/moe.h"
#include "dtrain/engine/step_update.h"
#include "dtrain/model/bf16_gemm.h"
#include "dtrain/model/moe_dispatch.h"
#include "dtrain/model/tp_shard.h"

namespace dtrain::train {
namespace {

using parallel::Axis;

parallel::PipelineExecutorConfig executor_config(const EngineConfig& c) {
  parallel::PipelineExecutorConfig e;
  e.schedule = plan::make_schedule(c.schedule, c.pp, c.microbatches, c.partition.chunks());
  e.partition = c.partition;
  e.micro_batch = c.micro_batch();
  e.seq = c.step.seq / c.cp;  // a CP rank's tokens of each sequence
  e.bf16_activations = c.step.precision == model::Precision::bf16;
  return e;
}

// The bytes a group's communicator moved (comm::Traffic::bytes_moved: sent, or read in place).
double sent(const comm::Communicator* c) {
  return c == nullptr ? 0.0 : static_cast<double>(c->traffic().bytes_moved());
}

comm::LinkBytes links(const comm::Communicator* c, const comm::NodeTopology& topology) {
  return c == nullptr ? comm::LinkBytes{} : comm::link_bytes_sent(*c, topology);
}

// The snapshot's sites a step moves (tp_norms and the EP plan bytes are added where they happen).
constexpr double EngineTraffic::*kSnapshotSites[] = {
    &EngineTraffic::tp_block,     &EngineTraffic::tp_vocab, &EngineTraffic::tp_regather,
    &EngineTraffic::tp_recompute, &EngineTraffic::pp,       &EngineTraffic::dp,
    &EngineTraffic::embedding,    &EngineTraffic::other};

double tp_sent(const parallel::SiteCounter& c) {
  return static_cast<double>(c.traffic.bytes_moved());
}

// The DP configuration of this rank's stage: under a pipeline the end stages' tied wte (the
// embeddings unit, last in backward order) waits for its sum with the other end stage.
parallel::DataParallelConfig dp_config(const EngineConfig& c, const parallel::StageUnits& units,
                                       const model::ParamTable& table) {
  parallel::DataParallelConfig d;
  d.zero_stage = c.zero_stage;
  d.bucket_bytes = c.bucket_bytes;
  d.hierarchical = c.hierarchical;
  d.bf16_grad_reduce = c.bf16_grad_reduce;
  d.algorithm = c.dp_algorithm;
  d.mixed_precision = c.step.precision == model::Precision::bf16;
  d.topology = c.topology;
  d.deferred_unit = c.pp > 1 ? units.embeddings() : -1;
  if (c.ep > 1) {
    d.ep = c.ep;
    for (const model::ParamTensor& t : table.tensors()) {
      if (model::is_expert_tensor(t.name)) d.expert_ranges.push_back({t.offset, t.count});
    }
  }
  return d;
}

}  // namespace

Engine::Engine(const EngineConfig& config, comm::Communicator& world)
    : config_(config),
      world_(world),
      mesh_(config.dp, config.cp, config.tp, config.pp, config.rank_order),
      coord_(mesh_.coord_of(world.rank())),
      groups_(parallel::make_process_groups(world, mesh_, config.ep, config.step.model.tied_head(),
                                            config.step.model.kv_head_copies(config.tp))),
      team_(config.step.threads),
      hooks_(
          std::make_unique<parallel::TensorParallelGroup>(*groups_.tp, config.sequence_parallel)),
      cp_hooks_(config.cp > 1 ? std::make_unique<parallel::ContextParallelGroup>(
                                    *groups_.cp, config.cp_algorithm, &tracker_, config.cp_split,
                                    config.cp_wire)
                              : nullptr),
      ep_hooks_(groups_.ep != nullptr ? std::make_unique<parallel::ExpertParallelGroup>(*groups_.ep)
                                      : nullptr),
      model_(config.step.model, parallel::stage_of(config.partition, coord_.pp), &tracker_,
             hooks_.get(), &team_, config.step.recompute, ep_hooks_.get()),
      units_(model_.param_table(), model_.stage()),
      adamw_(0, config.step.adamw, &tracker_) {
  DTRAIN_CHECK(world.size() == mesh_.world_size(), "the mesh DP(", config.dp, ")-CP(", config.cp,
               ")-TP(", config.tp, ")-PP(", config.pp, ") needs ", mesh_.world_size(),
               " ranks, the run has ", world.size());
  model_.set_context_parallel(cp_hooks_.get());
  // Every rank draws its tensors from the whole model's seeds by name and keeps its TP slice:
  // the stages' two wte copies and every DP replica start equal, and equal to the serial run.
  model_.init_params(config.step.init_seed);
  model_.set_precision(config.step.precision);
  hooks_->set_bf16_activations(config.step.precision == model::Precision::bf16, &tracker_);
  if (ep_hooks_ != nullptr) {
    ep_hooks_->set_bf16_dispatch(config.step.precision == model::Precision::bf16);
  }
  dp_ = std::make_unique<parallel::DataParallel>(
      dp_config(config, units_, model_.param_table()), model_, units_, *groups_.data,
      std::move(groups_.data_async), std::move(groups_.expert_data), tracker_);
  // The moments of what this rank updates: sized once the shard is known.
  adamw_ = optim::AdamW(dp_->moment_count(), config.step.adamw, &tracker_);
  executor_ = std::make_unique<parallel::PipelineExecutor>(
      *groups_.pp, model_, executor_config(config), &tracker_, dp_.get());
  tracker_.reset_peaks();  // construction held the whole stage once, to initialise it
}

Engine::~Engine() = default;

std::string Engine::describe() const {
  std::string s = mesh_.describe(world_.rank());
  if (config_.cp > 1) s += str(" CP ", plan::name(config_.cp_algorithm));
  if (config_.ep > 1) {
    s += str(" EP(", config_.ep, ") expert-DP(", config_.dp / config_.ep, ") ",
             config_.step.model.moe.experts / config_.ep, " experts/rank");
  }
  if (config_.zero_stage > 0) s += str(" ZeRO-", config_.zero_stage);
  if (config_.sequence_parallel && config_.tp > 1) s += " SP";
  if (config_.step.recompute != Recompute::none)
    s += str(" recompute ", name(config_.step.recompute));
  if (config_.step.precision == model::Precision::bf16) {
    s += str(" bf16 (", model::bf16_gemm_description(), ")");
  }
  if (config_.bf16_grad_reduce && config_.dp > 1) s += " bf16 grad reduce";
  if (config_.pp > 1) s += str(" ", plan::name(config_.schedule));
  s += str(", ", config_.microbatches, " micro-batch", config_.microbatches > 1 ? "es" : "", " of ",
           config_.micro_batch());
  return s;
}

std::span<const int32_t> Engine::my_rows(const std::vector<int32_t>& ids,
                                         std::vector<int32_t>& store) const {
  const int64_t rows = config_.step.batch / config_.dp, T = config_.step.seq;
  const auto n = static_cast<size_t>(rows * T);
  const std::span<const int32_t> mine =
      std::span<const int32_t>(ids).subspan(static_cast<size_t>(coord_.dp) * n, n);
  if (cp_hooks_ == nullptr) return mine;
  const int64_t T_local = T / config_.cp;
  store.resize(static_cast<size_t>(rows * T_local));
  for (int64_t b = 0; b < rows; ++b) {
    for (int64_t t = 0; t < T_local; ++t) {
      store[static_cast<size_t>(b * T_local + t)] =
          mine[static_cast<size_t>(b * T + cp_hooks_->position(t, T_local))];
    }
  }
  return store;
}

parallel::GradOwnership Engine::grad_ownership() const {
  parallel::GradOwnership owner;
  owner.coord = coord_;
  owner.coord.dp = groups_.data->rank();  // DP x CP: one replica counts each element once
  owner.zero_stage = config_.zero_stage;
  if (!dp_->split_shards()) owner.zero_shard = dp_->owned();
  owner.tied_copy =
      config_.pp > 1 && config_.step.model.tied_head() && parallel::holds_tied_copy(model_.stage());
  owner.ep = config_.ep;
  owner.kv_copy = parallel::kv_copy_rows(config_.step.model, config_.tp);
  owner.counts_kv_copy = coord_.tp % config_.step.model.kv_head_copies(config_.tp) == 0;
  return owner;
}

float Engine::mean_loss(float last_stage_loss) {
  const double mine = coord_.tp == 0 && coord_.pp == config_.pp - 1 ? last_stage_loss : 0.0;
  if (world_.size() == 1) return static_cast<float>(mine);
  const double sum = comm::sum_in_rank_order(world_, std::span<const double>(&mine, 1))[0];
  // Every DP x CP rank's last-stage loss is the mean over its equal share of the tokens.
  return static_cast<float>(sum / (config_.dp * config_.cp));
}

void Engine::gather_routing(StepStats& stats, const model::MoeCounts& mine) {
  const model::MoeConfig& m = config_.step.model.moe;
  if (!m.enabled()) return;
  // Each TP rank of a group routes the same tokens: only tp_rank 0's counts are summed.
  const bool counts = coord_.tp == 0;
  std::vector<double> v(static_cast<size_t>(4 + m.experts), 0.0);
  if (counts) {
    v[0] = mine.aux_loss_sum;
    v[1] = static_cast<double>(mine.microbatches);
    v[2] = static_cast<double>(mine.assignments);
    v[3] = static_cast<double>(mine.dropped);
    for (size_t e = 0; e < mine.expert_tokens.size(); ++e) {
      v[4 + e] = static_cast<double>(mine.expert_tokens[e]);
    }
  }
  if (world_.size() > 1) v = comm::sum_in_rank_order(world_, std::span<const double>(v));
  stats.aux_loss = v[1] > 0 ? v[0] / v[1] : 0.0;
  stats.moe_assignments = static_cast<int64_t>(v[2]);
  stats.moe_dropped = static_cast<int64_t>(v[3]);
  stats.expert_tokens.assign(static_cast<size_t>(m.experts), 0);
  for (size_t e = 0; e < stats.expert_tokens.size(); ++e) {
    stats.expert_tokens[e] = static_cast<int64_t>(v[4 + e]);
  }
}

void Engine::add_ep_plan_bytes(const model::MoeCounts& mine) {
  const int64_t E = config_.step.model.moe.experts;
  const auto row = [&](int rank) { return static_cast<size_t>(rank * E); };
  std::vector<double> v(row(world_.size()), 0.0);
  for (size_t e = 0; e < mine.expert_tokens.size(); ++e) {
    v[row(world_.rank()) + e] = static_cast<double>(mine.expert_tokens[e]);
  }
  v = comm::sum_in_rank_order(world_, std::span<const double>(v));
  std::vector<std::vector<int64_t>> kept;
  for (int member : parallel::ep_group_members(config_.dp, config_.ep, coord_.dp)) {
    parallel::MeshCoord c = coord_;
    c.dp = member;
    const size_t first = row(mesh_.rank_of(c));
    kept.emplace_back(v.begin() + static_cast<std::ptrdiff_t>(first),
                      v.begin() + static_cast<std::ptrdiff_t>(first + static_cast<size_t>(E)));
  }
  const int64_t C = config_.step.model.channels;
  const bool bf16 = config_.step.precision == model::Precision::bf16;
  const int64_t dispatch = plan::ep_row_wire_bytes(plan::EpExchange::dispatch_forward, bf16);
  const int64_t other = plan::ep_row_wire_bytes(plan::EpExchange::combine_forward, bf16);
  traffic_.ep_plan_dispatch_forward +=
      plan::ep_dispatch_bytes(kept, C, dispatch, ep_rank()).sent_total();
  traffic_.ep_plan_dispatch += plan::ep_dispatch_bytes(kept, C, other, ep_rank()).sent_total();
  traffic_.ep_plan_combine += plan::ep_combine_bytes(kept, C, other, ep_rank()).sent_total();
  int64_t routed = 0;  // routed layers of this stage: one counts exchange each per micro-batch
  for (int64_t l = 0; l < config_.step.model.layers; ++l) {
    if (model_.stage().has_layer(l) && model::is_moe_layer(config_.step.model.moe, l)) ++routed;
  }
  traffic_.ep_plan_counts +=
      static_cast<double>(routed * config_.microbatches) * plan::ep_counts_bytes(E, config_.ep);
}

StepStats Engine::train_step(const data::Batch& batch, float lr) {
  DTRAIN_CHECK(batch.batch == config_.step.batch && batch.seq == config_.step.seq,
               "engine: batch (", batch.batch, ", ", batch.seq, ") differs from the configured (",
               config_.step.batch, ", ", config_.step.seq, ")");
  StepStart start;
  begin_step(start);
  StepStats stats;
  const parallel::PipelineStepRecord record = run_schedule(batch, stats);
  finalize_and_update(stats, lr);
  record_step(record, start);
  ++steps_;
  return stats;
}

EngineTraffic Engine::traffic_snapshot() const {
  EngineTraffic t;
  const parallel::TensorParallelCounters& c = hooks_->counters();
  t.tp_block = tp_sent(c.block_forward) + tp_sent(c.block_backward);
  t.tp_vocab = tp_sent(c.vocab);
  t.tp_regather = tp_sent(c.regather);
  t.tp_recompute = tp_sent(c.recompute);
  t.pp = sent(groups_.pp.get());
  t.dp = static_cast<double>(dp_->traffic().bytes_moved());
  t.embedding = sent(groups_.embedding.get());
  t.other = sent(&world_);
  for (const comm::Communicator* g :
       {groups_.tp.get(), groups_.pp.get(), groups_.embedding.get(), groups_.kv_copies.get()}) {
    t.model_links += links(g, config_.topology);
  }
  t.model_links += dp_->link_bytes();
  t.links = t.model_links;
  t.links += links(&world_, config_.topology);
  return t;
}

void Engine::begin_step(StepStart& start) {
  start.traffic = traffic_snapshot();
  if (cp_hooks_ != nullptr) start.cp = cp_hooks_->counters();
  if (ep_hooks_ != nullptr) start.ep = ep_hooks_->counters();
  // Every step's TP collectives are timed: the clock's TP phase (and, kept, the trace's spans).
  hooks_->record_spans(&start.tp_spans);
  // EP's exchanges go to the trace only (the clock counts them inside forward and backward).
  if (ep_hooks_ != nullptr && config_.record_collectives) ep_hooks_->record_spans(&start.ep_spans);
  // CP's exchanges too, on their own track (with the bytes each sent).
  if (cp_hooks_ != nullptr && config_.record_collectives) cp_hooks_->record_spans(&start.cp_spans);
  (void)dp_->take_events();  // drop what evaluations between steps recorded
  (void)dp_->take_waits();
  dp_->begin_step();
}

parallel::PipelineStepRecord Engine::run_schedule(const data::Batch& batch, StepStats& stats) {
  parallel::PipelineStepRecord record =
      executor_->run(my_rows(batch.inputs, cp_inputs_), my_rows(batch.targets, cp_targets_));
  for (const parallel::MeasuredAction& m : record.actions) {
    const double ms = (m.end_us - m.start_us) * 1e-3;
    if (m.action.kind == plan::ActionKind::forward) stats.forward_ms += ms;
    if (plan::is_compute(m.action.kind) && m.action.kind != plan::ActionKind::forward) {
      stats.backward_ms += ms;
    }
  }
  last_ = {};
  last_.actions = record.actions;
  last_.peak_inflight_bytes = record.peak_inflight_bytes;
  stats.loss = record.loss;
  gather_routing(stats, record.moe);
  for (int64_t rows : record.moe.expert_rows) ++traffic_.moe_expert_rows[rows];
  if (ep_hooks_ != nullptr) add_ep_plan_bytes(record.moe);
  return record;
}

void Engine::record_step(const parallel::PipelineStepRecord& record, StepStart& start) {
  hooks_->record_spans(nullptr);
  if (ep_hooks_ != nullptr) ep_hooks_->record_spans(nullptr);
  if (cp_hooks_ != nullptr) cp_hooks_->record_spans(nullptr);
  // Every axis site's spans on the trace: TP's and EP's on the collectives track, CP's on its
  // own (with its pass and the bytes each sent). TP's are timed every step for the clock.
  const std::pair<const std::vector<parallel::SiteSpan>*, trace::SpanKind> sites[] = {
      {config_.record_collectives ? &start.tp_spans : nullptr, trace::SpanKind::collective},
      {&start.ep_spans, trace::SpanKind::collective},
      {&start.cp_spans, trace::SpanKind::context_parallel}};
  for (const auto& [spans, kind] : sites) {
    if (spans == nullptr) continue;
    for (const parallel::SiteSpan& s : *spans) {
      last_.collectives.push_back({*s.pass != '\0' ? str(s.what, " (", s.pass, ")") : s.what, kind,
                                   s.start_us, s.end_us, s.bytes});
    }
  }

  const EngineTraffic end = traffic_snapshot();
  const EngineTraffic& begin = start.traffic;
  // What the step moved, site by site: the snapshot's, then each axis's counters.
  for (double EngineTraffic::*site : kSnapshotSites) traffic_.*site += end.*site - begin.*site;
  traffic_.links += end.links - begin.links;
  traffic_.model_links += end.model_links - begin.model_links;
  if (ep_hooks_ != nullptr) traffic_.ep += ep_hooks_->counters() - start.ep;
  if (cp_hooks_ != nullptr) cp_counters_ += cp_hooks_->counters() - start.cp;
  measure_step(record, start.tp_spans);
  if (config_.step.model.moe.enabled() && config_.cluster &&
      plan::has_measured_rates(*config_.cluster)) {
    gather_block_routings(record.moe);
  }
}

void Engine::gather_block_routings(const model::MoeCounts& mine) {
  const int64_t E = config_.step.model.moe.experts;
  // Each rank's slot: its entry count, then up to every block of every micro-batch and chunk.
  const int64_t most = config_.step.model.layers * config_.microbatches * E;
  const auto slot = [&](int rank) { return static_cast<size_t>(rank * (most + 1)); };
  std::vector<double> v(slot(world_.size()), 0.0);
  const int64_t mine_entries = static_cast<int64_t>(mine.block_kept.size()) / E;
  DTRAIN_CHECK(mine_entries * E <= most, "engine: ", mine_entries, " routed blocks on rank ",
               world_.rank(), " exceed the ", most / E, " a step can hold");
  v[slot(world_.rank())] = static_cast<double>(mine_entries);
  for (size_t i = 0; i < mine.block_kept.size(); ++i) {
    v[slot(world_.rank()) + 1 + i] = static_cast<double>(mine.block_kept[i]);
  }
  if (world_.size() > 1) v = comm::sum_in_rank_order(world_, std::span<const double>(v));
  std::vector<std::vector<double>> step;
  for (int pp = 0; pp < config_.pp; ++pp) {
    for (int cp = 0; cp < config_.cp; ++cp) {
      for (int first = 0; first < config_.dp; first += config_.ep) {
        std::vector<size_t> members;  // the group's slots (TP rank 0 of each)
        for (int d : parallel::ep_group_members(config_.dp, config_.ep, first)) {
          members.push_back(slot(mesh_.rank_of({.dp = d, .tp = 0, .pp = pp, .cp = cp})));
        }
        const auto entries = static_cast<int64_t>(v[members.front()]);
        for (int64_t b = 0; b < entries; ++b) {
          std::vector<double> rows(static_cast<size_t>(E), 0.0);
          for (size_t m : members) {
            for (int64_t e = 0; e < E; ++e) {
              rows[static_cast<size_t>(e)] += v[m + 1 + static_cast<size_t>(b * E + e)];
            }
          }
          step.push_back(std::move(rows));
        }
      }
    }
  }
  block_routings_.push_back(std::move(step));
  // A long run keeps its first step (the report leaves it out, as it does the first step's
  // times) and its latest kRoutingSteps, so the record stays bounded.
  constexpr size_t kRoutingSteps = 32;
  if (block_routings_.size() > kRoutingSteps + 1)
    block_routings_.erase(block_routings_.begin() + 1);
}

// The DP communication thread's tasks of the step: their spans for the trace, and the part of
// them that compute hid (inside the executor's compute actions, less the compute thread's
// waits for them there).
void Engine::measure_step(const parallel::PipelineStepRecord& record,
                          const std::vector<parallel::SiteSpan>& tp_spans) {
  std::vector<parallel::TimeInterval> compute, comm, forward, backward;
  StepTiming timing;
  bool any = false;
  for (const parallel::MeasuredAction& m : record.actions) {
    timing.first_start_us = any ? std::min(timing.first_start_us, m.start_us) : m.start_us;
    timing.last_end_us = any ? std::max(timing.last_end_us, m.end_us) : m.end_us;
    any = true;
    if (!plan::is_compute(m.action.kind)) continue;
    compute.push_back({m.start_us, m.end_us});
    (m.action.kind == plan::ActionKind::forward ? forward : backward)
        .push_back({m.start_us, m.end_us});
    timing.busy_us += m.end_us - m.start_us;
  }
  timings_.push_back(timing);
  for (const parallel::CommThread::Event& e : dp_->take_events()) {
    comm.push_back(e.time);
    dp_comm_us_ += e.time.length_us();
    last_.data_parallel.push_back(
        {e.what, trace::SpanKind::async_collective, e.time.begin_us, e.time.end_us});
  }
  std::vector<parallel::TimeInterval> idle;
  for (const parallel::TimeInterval& w : dp_->take_waits()) {
    for (const parallel::TimeInterval& window : compute) {
      const parallel::TimeInterval both{std::max(w.begin_us, window.begin_us),
                                        std::min(w.end_us, window.end_us)};
      if (both.end_us > both.begin_us) idle.push_back(both);
    }
  }
  dp_hidden_us_ += parallel::hidden_us(comm, compute) - parallel::hidden_us(comm, idle);

  // The clock's phases of this step.
  std::vector<parallel::TimeInterval> tp;
  for (const parallel::SiteSpan& s : tp_spans) tp.push_back({s.start_us, s.end_us});
  auto length = [](const std::vector<parallel::TimeInterval>& v) {
    double us = 0;
    for (const parallel::TimeInterval& i : v) us += i.length_us();
    return us;
  };
  StepPhases p;
  const double tp_forward = parallel::hidden_us(tp, forward);
  const double tp_backward = parallel::hidden_us(tp, backward);
  const double wait_forward = parallel::hidden_us(idle, forward);
  const double wait_backward = parallel::hidden_us(idle, backward);
  p.forward_us = length(forward) - tp_forward - wait_forward;
  p.backward_us = length(backward) - tp_backward - wait_backward;
  p.tp_comm_us = tp_forward + tp_backward;
  p.pipeline_wait_us = any ? timing.last_end_us - timing.first_start_us - timing.busy_us : 0;
  p.exposed_dp_us = wait_forward + wait_backward;
  // After the schedule: the tied wte's sum waits for the other end stage's last backward (the
  // schedule's trailing bubble, the clock's pipeline wait); the buckets' wait, the embeddings'
  // sync and the gather are exposed DP; the norm and AdamW the optimizer's.
  p.optimizer_us += finalize_phases_.optimizer_us;
  p.pipeline_wait_us += finalize_phases_.pipeline_wait_us;
  p.exposed_dp_us += finalize_phases_.exposed_dp_us;
  phases_.push_back(p);
}

float Engine::eval_loss(const data::Batch& batch) {
  return mean_loss(
      executor_->evaluate(my_rows(batch.inputs, cp_inputs_), my_rows(batch.targets, cp_targets_)));
}

std::vector<float> Engine::gather_params() {
  if (dp_->mixed_precision()) {
    // The bf16 weights the forward reads, widened.
    const parallel::ShardLayout& layout = dp_->layout();
    std::vector<bf16> all(static_cast<size_t>(layout.count));
    if (config_.zero_stage < 3) {
      std::copy_n(dp_->params16().begin(), layout.count, all.begin());
    } else {
      DTRAIN_CHECK(!dp_->split_shards(), "gathering the parameters of --ep ", config_.ep,
                   " with --zero 3 is not supported yet (export a checkpoint instead)");
      parallel::gather_from_shards<bf16>(*groups_.data, layout, 0, layout.count,
                                         dp_->params16().data(), all.data());
    }
    std::vector<float> out(all.size());
    to_float(all.data(), out.data(), layout.count);
    return out;
  }
  if (config_.zero_stage < 3) return {model_.params().begin(), model_.params().end()};
  DTRAIN_CHECK(!dp_->split_shards(), "gathering the parameters of --ep ", config_.ep,
               " with --zero 3 is not supported yet (export a checkpoint instead)");
  const parallel::ShardLayout& layout = dp_->layout();
  std::vector<float> out(static_cast<size_t>(layout.count));
  parallel::gather_from_shards(*groups_.data, layout, 0, layout.count, dp_->param_shard().data(),
                               out.data());
  return out;
}

checkpoint::StateLayout Engine::state_layout() const {
  checkpoint::StateLayout l{config_.dp, config_.tp, config_.pp, config_.zero_stage};
  l.cp = config_.cp;
  if (cp_hooks_ != nullptr) {  // the split the group runs (ulysses: contiguous, whatever asked)
    l.cp_algo = std::string(plan::name(cp_hooks_->algorithm()));
    l.cp_split = cp_hooks_->split() == model::CpTokenSplit::balanced ? "balanced" : "contiguous";
  }
  return l;
}

namespace {

// The part of a TP slice's serial ranges (`ranges`, covering the shard's elements in order)
// that holds the shard's elements [begin, end).
std::vector<model::FlatRange> sub_ranges(const std::vector<model::FlatRange>& ranges, int64_t begin,
                                         int64_t end) {
  std::vector<model::FlatRange> out;
  int64_t at = 0;  // shard element where the current range starts
  for (const model::FlatRange& r : ranges) {
    const int64_t lo = std::max(begin, at), hi = std::min(end, at + r.count);
    if (lo < hi) out.push_back({r.offset + (lo - at), hi - lo});
    at += r.count;
  }
  return out;
}

// A run of flat elements [begin, begin + count) whose moments (and, where sharded, parameters)
// this rank holds, at index `at` of its held buffers: one run (owned()) for every layout but EP
// with ZeRO, whose dense and expert shards cover several.
struct HeldRun {
  int64_t begin = 0, count = 0, at = 0;
};
std::vector<HeldRun> held_runs(parallel::DataParallel& dp) {
  std::vector<HeldRun> out;
  for (const parallel::ShardRun& r : dp.shard_runs()) out.push_back({r.flat, r.count, r.moment});
  return out;
}

}  // namespace

checkpoint::RankState Engine::export_state() {
  checkpoint::RankState s;
  const model::GptConfig& g = config_.step.model;
  const model::ParamTable serial = model::gpt_param_table(g);
  const bool tied_copy =
      config_.pp > 1 && config_.step.model.tied_head() && parallel::holds_tied_copy(model_.stage());
  // The flat elements whose moments this rank holds (all at stage 0, the shard otherwise), and
  // at stage 3 whose parameters too; moments[i] and param_shard[i] are flat element first + i.
  const std::vector<HeldRun> runs = held_runs(*dp_);
  // Mixed precision writes the fp32 master weights, which it holds where it holds the moments.
  const bool mixed = dp_->mixed_precision();
  const bool sharded_params = config_.zero_stage == 3 || mixed;
  const std::span<const float> params = mixed                     ? dp_->master()
                                        : config_.zero_stage == 3 ? dp_->param_shard()
                                                                  : model_.params();
  const bool writes_kv_copies = grad_ownership().counts_kv_copy;
  for (const model::ParamTensor& local : model_.param_table().tensors()) {
    if (coord_.tp != 0 && model::tp_split_of(local.name) == model::TpSplit::replicated) continue;
    if (tied_copy && local.name == "wte") continue;
    // More TP ranks than K/V heads: a K/V head's first copy writes its rows, the others only
    // their query rows (the first of the qkv weight's three runs: the K and V rows end it).
    const bool kv_copy = !writes_kv_copies && local.name.ends_with("attn.qkv.w");
    const model::ParamTensor& whole = serial[static_cast<size_t>(serial.index_of(local.name))];
    // EP (ZeRO 0): a rank's experts are one run of the stacked tensor (each expert cut for TP),
    // written by the first expert-DP replica (DP ranks below ep), each its own experts.
    const bool experts = config_.ep > 1 && model::is_expert_tensor(local.name);
    const bool writer = experts ? coord_.dp < config_.ep : groups_.data->rank() == 0;
    std::vector<model::FlatRange> ranges =
        experts ? model::expert_slice_ranges(whole, g, config_.tp, coord_.tp, config_.ep, ep_rank())
                : model::tp_slice_ranges(whole, g, config_.tp, coord_.tp);
    if (kv_copy) ranges.resize(1);
    int64_t real = 0;  // the shard's elements that are serial elements (no vocabulary padding)
    for (const model::FlatRange& r : ranges) real += r.count;
    std::vector<std::pair<checkpoint::StateKind, std::span<const float>>> held_kinds;
    if (config_.zero_stage == 3 && !mixed)
      held_kinds.emplace_back(checkpoint::StateKind::param, params);
    if (config_.zero_stage > 0 || writer) {
      if (mixed) held_kinds.emplace_back(checkpoint::StateKind::param, params);
      held_kinds.emplace_back(checkpoint::StateKind::adam_m, adamw_.m());
      held_kinds.emplace_back(checkpoint::StateKind::adam_v, adamw_.v());
    }
    if (!sharded_params && writer) {
      checkpoint::StatePiece p{local.name, checkpoint::StateKind::param, ranges, {}};
      p.data.assign(params.begin() + local.offset, params.begin() + local.offset + real);
      s.pieces.push_back(std::move(p));
    }
    for (const HeldRun& run : runs) {
      // The tensor's local elements [lo, hi) inside the run, as positions in the tensor.
      const int64_t lo = std::max<int64_t>(0, run.begin - local.offset);
      const int64_t hi = std::min<int64_t>(real, run.begin + run.count - local.offset);
      if (lo >= hi) continue;
      const int64_t at = local.offset + lo - run.begin + run.at;  // index into the held buffers
      const std::vector<model::FlatRange> part = sub_ranges(ranges, lo, hi);
      for (const auto& [kind, values] : held_kinds) {
        checkpoint::StatePiece p{local.name, kind, part, {}};
        p.data.assign(values.begin() + at, values.begin() + at + (hi - lo));
        s.pieces.push_back(std::move(p));
      }
    }
  }
  s.adam_step = adamw_.step_count();
  return s;
}

void Engine::import_state(const checkpoint::SerialState& state) {
  const model::GptConfig& g = config_.step.model;
  const std::vector<HeldRun> runs = held_runs(*dp_);
  const bool mixed = dp_->mixed_precision();
  const bool sharded_params = config_.zero_stage == 3 || mixed;
  for (const model::ParamTensor& local : model_.param_table().tensors()) {
    const int index = state.table.index_of(local.name);
    const model::ParamTensor& whole = state.table[static_cast<size_t>(index)];
    for (checkpoint::StateKind kind : {checkpoint::StateKind::param, checkpoint::StateKind::adam_m,
                                       checkpoint::StateKind::adam_v}) {
      std::vector<float> slice;
      if (config_.ep > 1 && model::is_expert_tensor(local.name)) {
        // EP: this rank's experts, one run of the stacked tensor (each cut for TP).
        slice = model::expert_slice(whole, state.tensor(whole, kind), g, config_.tp, coord_.tp,
                                    config_.ep, ep_rank());
      } else {
        slice = model::tp_slice(whole, state.tensor(whole, kind), g, config_.tp, coord_.tp);
      }
      DTRAIN_CHECK(static_cast<int64_t>(slice.size()) == local.count, "checkpoint: tensor ",
                   local.name, " slices to ", slice.size(), " elements, the rank holds ",
                   local.count);
      if (kind == checkpoint::StateKind::param && !sharded_params) {
        std::copy(slice.begin(), slice.end(), model_.params().begin() + local.offset);
        continue;
      }
      if (kind == checkpoint::StateKind::param && mixed && config_.zero_stage < 3) {
        // Every rank's bf16 weights are whole at stages 0-2: rounded from the checkpoint's.
        to_bf16(slice.data(), dp_->params16().data() + local.offset, local.count);
      }
      if (kind == checkpoint::StateKind::param && mixed && config_.zero_stage == 3) {
        for (const HeldRun& run : runs) {
          const int64_t lo = std::max(local.offset, run.begin);
          const int64_t hi = std::min(local.offset + local.count, run.begin + run.count);
          for (int64_t e = lo; e < hi; ++e) {
            dp_->params16()[static_cast<size_t>(e - run.begin + run.at)] =
                to_bf16(slice[static_cast<size_t>(e - local.offset)]);
          }
        }
      }
      std::span<float> dst = kind == checkpoint::StateKind::param
                                 ? (mixed ? dp_->master() : dp_->param_shard())
                             : kind == checkpoint::StateKind::adam_m ? adamw_.m()
                                                                     : adamw_.v();
      for (const HeldRun& run : runs) {
        const int64_t lo = std::max(local.offset, run.begin);
        const int64_t hi = std::min(local.offset + local.count, run.begin + run.count);
        for (int64_t e = lo; e < hi; ++e) {
          dst[static_cast<size_t>(e - run.begin + run.at)] =
              slice[static_cast<size_t>(e - local.offset)];
        }
      }
    }
  }
  adamw_.set_step_count(state.adam_step);
}

}  // namespace dtrain::train
