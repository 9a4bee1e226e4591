// DataParallelModel: the forward and backward passes with the sync hooks of each ZeRO stage,
// the sharded optimizer step, and stage 3's gather / free per unit.
#include "dtrain/parallel/data_parallel_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "dtrain/comm/collectives.h"
#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"

namespace dtrain::parallel {
namespace {

std::unique_ptr<comm::Communicator> async_group(comm::Communicator& dp) {
  std::vector<int> all(static_cast<size_t>(dp.size()));
  for (int r = 0; r < dp.size(); ++r) all[static_cast<size_t>(r)] = r;
  return dp.subgroup(all, "dp-async");
}

// Runs `fn` and appends its [begin, end) to `out`.
template <typename Fn>
auto timed(std::vector<TimeInterval>& out, Fn&& fn) {
  const double begin = now_us();
  if constexpr (std::is_void_v<decltype(fn())>) {
    fn();
    out.push_back({begin, now_us()});
  } else {
    auto result = fn();
    out.push_back({begin, now_us()});
    return result;
  }
}

}  // namespace

std::vector<TimeInterval> StepTimeline::comm_intervals() const {
  std::vector<TimeInterval> out;
  for (const CommThread::Event& e : comm) out.push_back(e.time);
  return out;
}

double StepTimeline::hidden_us() const {
  std::vector<TimeInterval> windows = forward;
  windows.insert(windows.end(), backward.begin(), backward.end());
  // The waits inside the windows (those after the last backward are outside anyway).
  std::vector<TimeInterval> idle;
  for (const TimeInterval& w : waits) {
    for (const TimeInterval& window : windows) {
      const TimeInterval both{std::max(w.begin_us, window.begin_us),
                              std::min(w.end_us, window.end_us)};
      if (both.end_us > both.begin_us) idle.push_back(both);
    }
  }
  const std::vector<TimeInterval> c = comm_intervals();
  return parallel::hidden_us(c, windows) - parallel::hidden_us(c, idle);
}

double StepTimeline::comm_us() const {
  double total = 0;
  for (const CommThread::Event& e : comm) total += e.time.length_us();
  return total;
}

DataParallelModel::DataParallelModel(const DataParallelConfig& config, comm::Communicator& dp,
                                     MemoryTracker& tracker)
    : config_(config),
      dp_(dp),
      tracker_(tracker),
      team_(config.threads > 1 ? std::make_unique<model::ThreadTeam>(config.threads) : nullptr),
      model_(config.model, &tracker, nullptr, team_.get(), config.recompute),
      layout_(shard_layout(model_.param_count(), dp.size())),
      units_(gpt_grad_units(model_.param_table(), config.model.layers)),
      adamw_(config.zero_stage >= 1 ? layout_.shard : layout_.count, config.adamw, &tracker),
      scratch_(0, MemoryTag::communication, &tracker) {
  DTRAIN_CHECK(config.zero_stage >= 0 && config.zero_stage <= 3,
               "--zero must be 0, 1, 2 or 3 (got ", config.zero_stage, ")");
  // Stage 3 reduces and gathers unit by unit; the others by buckets of units.
  buckets_ = make_buckets(units_, config.zero_stage == 3 ? 1 : config.bucket_bytes);
  bucket_grads_.resize(buckets_.size());
  model_.init_params(config.init_seed);  // the same on every rank: no broadcast needed
  model_.set_batch_shape(config.micro_batch, config.seq);
  if (config.zero_stage >= 2) {
    grad_shard_ = Buffer<float>(layout_.shard, MemoryTag::grads, &tracker);
    model_.release_grads();
  }
  if (config.zero_stage == 3) {
    param_shard_ = Buffer<float>(layout_.shard, MemoryTag::params, &tracker);
    const comm::Chunk own = layout_.owned(dp.rank());
    std::memcpy(param_shard_.data(), model_.params().data() + own.offset,
                static_cast<size_t>(own.count) * sizeof(float));
    model_.release_params();
  }
  std::unique_ptr<comm::Communicator> async = async_group(dp);
  async->set_memory_tracker(&tracker);  // the collectives' scratch, charged as communication
  if (config.hierarchical) {
    DTRAIN_CHECK(config.zero_stage == 0, "--dp-all-reduce hierarchical needs --zero 0 (got --zero ",
                 config.zero_stage, ")");
    node_groups_ =
        std::make_unique<comm::NodeGroups>(comm::make_node_groups(*async, config.topology));
  }
  comm_ = std::make_unique<CommThread>(std::move(async));
  if (config.zero_stage == 3) {
    gathered_ =
        std::make_unique<GatheredUnits>(layout_, units_, param_shard_.data(), *comm_, tracker);
  }
}

DataParallelModel::~DataParallelModel() = default;

int DataParallelModel::block_unit(int64_t l) const {
  return static_cast<int>(config_.model.layers - l);  // units: lnf, h.(L-1), ..., h.0, embeddings
}

void DataParallelModel::begin_step() {
  if (config_.zero_stage <= 1) model_.zero_grads();
  microbatch_ = 0;
  take_timeline();  // drop what evaluations between steps recorded
}

float DataParallelModel::forward_backward(std::span<const int32_t> tokens,
                                          std::span<const int32_t> targets, float dloss,
                                          bool last_microbatch) {
  const float loss = timed(timeline_.forward, [&] { return run_forward(tokens, targets); });
  timed(timeline_.backward, [&] { run_backward(dloss, last_microbatch); });
  ++microbatch_;
  return loss;
}

float DataParallelModel::forward_loss(std::span<const int32_t> tokens,
                                      std::span<const int32_t> targets) {
  return run_forward(tokens, targets);
}

float DataParallelModel::run_forward(std::span<const int32_t> tokens,
                                     std::span<const int32_t> targets) {
  model::GptActivations& acts = model_.activations();
  model::GptWorkspace& ws = model_.workspace();
  if (config_.zero_stage < 3) return model_.forward(acts, ws, tokens, targets);
  // Stage 3: the embeddings stay gathered through the forward (the LM head is tied to wte);
  // each block's weights arrive while the previous block runs.
  const int emb = static_cast<int>(units_.size()) - 1, lnf = 0;
  const int64_t L = config_.model.layers;
  gathered_->gather(emb);
  gathered_->gather(block_unit(0));
  use_unit(emb);
  model_.embedding_forward(acts, tokens);
  for (int64_t l = 0; l < L; ++l) {
    use_unit(block_unit(l));
    gathered_->gather(l + 1 < L ? block_unit(l + 1) : lnf);
    model_.block_forward(acts, ws, l);
    gathered_->free(block_unit(l));
  }
  use_unit(lnf);
  const float loss = model_.head_forward(acts, targets);
  gathered_->free(lnf);
  gathered_->free(emb);
  return loss;
}

void DataParallelModel::run_backward(float dloss, bool last_microbatch) {
  model::GptActivations& acts = model_.activations();
  model::GptWorkspace& ws = model_.workspace();
  const int emb = static_cast<int>(units_.size()) - 1, lnf = 0;
  const int64_t L = config_.model.layers;
  const bool sharded_params = config_.zero_stage == 3;
  if (sharded_params) {
    gathered_->gather(lnf);
    gathered_->gather(emb);
    gathered_->gather(block_unit(L - 1));
    use_unit(lnf);
    use_unit(emb);
  }
  ensure_bucket_grads(lnf);
  ensure_bucket_grads(emb);  // wte collects the LM head's gradient first, the embedding's last
  model_.head_backward(acts, ws, dloss);
  if (sharded_params) {
    gathered_->free(lnf);
    gathered_->free(emb);
  }
  unit_done(lnf, last_microbatch);
  for (int64_t l = L - 1; l >= 0; --l) {
    const int u = block_unit(l);
    if (sharded_params) {
      use_unit(u);
      if (l > 0) gathered_->gather(block_unit(l - 1));
    }
    ensure_bucket_grads(u);
    model_.block_backward(acts, ws, l);
    if (sharded_params) gathered_->free(u);
    unit_done(u, last_microbatch);
  }
  model_.embedding_backward(acts, ws);
  unit_done(emb, last_microbatch);
}

// Stages 2 and 3: the bucket holding `unit` gets a fresh zeroed gradient buffer (charged as
// grads) the first time one of its units runs backward in this micro-batch.
void DataParallelModel::ensure_bucket_grads(int unit) {
  if (config_.zero_stage < 2) return;
  const int b = bucket_of(buckets_, unit);
  if (bucket_grads_[static_cast<size_t>(b)] != nullptr) return;
  const Bucket& bucket = buckets_[static_cast<size_t>(b)];
  auto buffer = std::make_shared<Buffer<float>>(bucket.count, MemoryTag::grads, &tracker_);
  model_.bind_grads(bucket.offset, bucket.count, buffer->data());
  bucket_grads_[static_cast<size_t>(b)] = std::move(buffer);
}

void DataParallelModel::unit_done(int unit, bool last_microbatch) {
  const int b = bucket_of(buckets_, unit);
  if (buckets_[static_cast<size_t>(b)].last_unit != unit) return;
  if (config_.zero_stage <= 1 && !last_microbatch) return;  // accumulate locally, sync once
  submit_sync(b, std::move(bucket_grads_[static_cast<size_t>(b)]));
}

// Queues the sync of bucket b; `owned` (stages 2, 3) holds its gradients and is freed by the
// communication thread once they are reduced.
void DataParallelModel::submit_sync(int b, std::shared_ptr<Buffer<float>> owned) {
  const Bucket bucket = buckets_[static_cast<size_t>(b)];
  const std::string span = units_[static_cast<size_t>(bucket.first_unit)].name +
                           (bucket.first_unit == bucket.last_unit
                                ? ""
                                : ".." + units_[static_cast<size_t>(bucket.last_unit)].name);
  if (config_.zero_stage == 0 && node_groups_ != nullptr) {
    float* grads = model_.grads().data() + bucket.offset;
    comm::NodeGroups* groups = node_groups_.get();
    comm_->submit("hierarchical all_reduce " + span, [=](comm::Communicator&) {
      comm::hierarchical_all_reduce<float>(*groups, grads, bucket.count, comm::ReduceOp::avg);
    });
    return;
  }
  if (config_.zero_stage == 0) {
    float* grads = model_.grads().data() + bucket.offset;
    comm_->submit("all_reduce " + span, [=](comm::Communicator& c) {
      comm::all_reduce<float>(c, grads, bucket.count, comm::ReduceOp::avg, comm::Algorithm::ring);
    });
    return;
  }
  const ShardLayout layout = layout_;
  const int rank = dp_.rank();
  Buffer<float>* scratch = &scratch_;
  if (config_.zero_stage == 1) {
    // In place: this rank's piece lands where it lies in the full gradient buffer.
    float* grads = model_.grads().data();
    float* shard = grads + std::min(layout.count, rank * layout.shard);
    comm_->submit("reduce_scatter " + span, [=](comm::Communicator& c) {
      reduce_scatter_to_shard(c, layout, bucket.offset, bucket.count, grads + bucket.offset, shard,
                              false, *scratch);
    });
    return;
  }
  const bool accumulate = microbatch_ > 0;
  float* shard = grad_shard_.data();
  comm_->submit("reduce_scatter " + span, [=](comm::Communicator& c) {
    reduce_scatter_to_shard(c, layout, bucket.offset, bucket.count, owned->data(), shard,
                            accumulate, *scratch);
  });
}

comm::Traffic DataParallelModel::dp_traffic() const {
  comm::Traffic t = comm_->communicator().traffic();
  if (node_groups_ != nullptr) {
    t += node_groups_->node->traffic();
    t += node_groups_->across->traffic();
  }
  return t;
}

comm::LinkBytes DataParallelModel::dp_link_bytes() const {
  comm::LinkBytes out = comm::link_bytes_sent(comm_->communicator(), config_.topology);
  if (node_groups_ != nullptr) out += node_groups_->link_bytes_sent(config_.topology);
  return out;
}

void DataParallelModel::use_unit(int u) {
  const GradUnit& unit = units_[static_cast<size_t>(u)];
  wait_for(gathered_->ticket(u));
  model_.bind_params(unit.offset, unit.count, gathered_->data(u));
}

void DataParallelModel::wait_for(int64_t ticket) {
  timed(timeline_.waits, [&] { comm_->wait(ticket); });
}

std::span<float> DataParallelModel::owned_params() {
  const comm::Chunk own = layout_.owned(dp_.rank());
  if (config_.zero_stage == 3) return param_shard_.span().first(static_cast<size_t>(own.count));
  return model_.params().subspan(static_cast<size_t>(own.offset), static_cast<size_t>(own.count));
}

std::span<float> DataParallelModel::owned_grads() {
  const comm::Chunk own = layout_.owned(dp_.rank());
  if (config_.zero_stage >= 2) return grad_shard_.span().first(static_cast<size_t>(own.count));
  return model_.grads().subspan(static_cast<size_t>(own.offset), static_cast<size_t>(own.count));
}

// The ownership rule of finalize_grads.h over the DP group: at stage 0 DP rank 0 counts the
// averaged gradient (the other ranks bring 0), otherwise each rank its owned range; the sums are
// added in rank order, so every rank gets the same norm.
GradNorm DataParallelModel::global_grad_norm() {
  GradOwnership owner;
  owner.coord.dp = dp_.rank();
  owner.zero_stage = config_.zero_stage;
  owner.zero_shard = layout_.owned(dp_.rank());
  const bool in_shard = config_.zero_stage >= 2;
  const double squares = owned_sum_of_squares(model_.param_table(), owner,
                                              in_shard ? grad_shard_.span() : model_.grads(),
                                              in_shard ? owner.zero_shard.offset : 0);
  return parallel::global_grad_norm(squares, &dp_, config_.grad_clip);
}

double DataParallelModel::finish_step(float lr) {
  timed(timeline_.waits, [&] { comm_->wait_all(); });
  const GradNorm norm = global_grad_norm();
  DTRAIN_CHECK(std::isfinite(norm.norm), "training diverged: gradient norm ", norm.norm,
               " (try a smaller --lr)");
  const bool whole = config_.zero_stage == 0;
  const std::span<float> params = whole ? model_.params() : owned_params();
  const std::span<float> grads = whole ? model_.grads() : owned_grads();
  adamw_.advance();
  model::parallel_ranges(
      team_.get(), static_cast<int64_t>(params.size()), 1024, [&](model::Range r) {
        const auto at = static_cast<size_t>(r.begin);
        const auto n = static_cast<size_t>(r.end - r.begin);
        adamw_.update(params.subspan(at, n), grads.subspan(at, n), r.begin, lr, norm.clip_scale);
      });
  if (config_.zero_stage == 1 || config_.zero_stage == 2) {
    // Every rank updated its range; gather the whole parameter buffer in place.
    float* all = model_.params().data();
    const float* shard = all + std::min(layout_.count, dp_.rank() * layout_.shard);
    const ShardLayout layout = layout_;
    const int64_t ticket = comm_->submit("all_gather params", [=](comm::Communicator& c) {
      gather_from_shards(c, layout, 0, layout.count, shard, all);
    });
    wait_for(ticket);
  }
  return norm.norm;
}

std::vector<float> DataParallelModel::gather_params() {
  std::vector<float> out(static_cast<size_t>(layout_.count));
  if (config_.zero_stage < 3) {
    const std::span<const float> p = model_.params();
    std::copy(p.begin(), p.end(), out.begin());
    return out;
  }
  const ShardLayout layout = layout_;
  const float* shard = param_shard_.data();
  float* dst = out.data();
  comm_->wait(comm_->submit("all_gather params", [=](comm::Communicator& c) {
    gather_from_shards(c, layout, 0, layout.count, shard, dst);
  }));
  return out;
}

StepTimeline DataParallelModel::take_timeline() {
  StepTimeline t = std::move(timeline_);
  timeline_ = {};
  t.comm = comm_->take_events();
  return t;
}

}  // namespace dtrain::parallel
