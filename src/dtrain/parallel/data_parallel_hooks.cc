// DataParallel: the hooks of each ZeRO stage (bucket syncs, stage 3's gather / free per unit),
// the deferred tied unit, and the views the optimizer updates.
#include "dtrain/parallel/data_parallel_hooks.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "dtrain/comm/collectives.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"

namespace dtrain::parallel {
namespace {

std::unique_ptr<comm::Communicator> async_group(comm::Communicator& dp) {
  std::vector<int> all(static_cast<size_t>(dp.size()));
  for (int r = 0; r < dp.size(); ++r) all[static_cast<size_t>(r)] = r;
  return dp.subgroup(all, "dp-async");
}

}  // namespace

DataParallel::DataParallel(const DataParallelConfig& config, model::GptModel& model,
                           const StageUnits& units, comm::Communicator& dp, MemoryTracker& tracker)
    : config_(config),
      model_(model),
      units_(units),
      rank_(dp.rank()),
      tracker_(tracker),
      layout_(shard_layout(model.param_count(), dp.size())),
      scratch_(0, MemoryTag::communication, &tracker),
      unit_state_(static_cast<size_t>(units.size())) {
  DTRAIN_CHECK(config.zero_stage >= 0 && config.zero_stage <= 3,
               "--zero must be 0, 1, 2 or 3 (got ", config.zero_stage, ")");
  DTRAIN_CHECK(!config.hierarchical || config.zero_stage == 0,
               "--dp-all-reduce hierarchical needs --zero 0 (got --zero ", config.zero_stage, ")");
  const int n = units.size();
  DTRAIN_CHECK(
      config.deferred_unit < 0 || config.deferred_unit == n - 1,
      "DataParallel: only the last unit in backward order (the embeddings) can be deferred");
  if (dp.size() == 1 && config.zero_stage == 0) return;  // nothing to average or shard

  // Stage 3 reduces and gathers unit by unit; the others by buckets of units. The deferred unit
  // is a bucket of its own, after the others.
  const int bucketed = config.deferred_unit >= 0 ? n - 1 : n;
  buckets_ =
      make_buckets(std::span<const GradUnit>(units.units()).first(static_cast<size_t>(bucketed)),
                   config.zero_stage == 3 ? 1 : config.bucket_bytes);
  if (config.deferred_unit >= 0) {
    const GradUnit& u = units[config.deferred_unit];
    deferred_bucket_ = static_cast<int>(buckets_.size());
    buckets_.push_back({config.deferred_unit, config.deferred_unit, u.offset, u.count});
  }
  bucket_of_unit_.resize(static_cast<size_t>(n));
  for (int u = 0; u < n; ++u) bucket_of_unit_[static_cast<size_t>(u)] = bucket_of(buckets_, u);
  bucket_grads_.resize(buckets_.size());
  syncs_.assign(buckets_.size(), 0);

  if (config.zero_stage >= 2) {
    grad_shard_ = Buffer<float>(layout_.shard, MemoryTag::grads, &tracker);
    model.release_grads();
  }
  if (config.zero_stage == 3) {
    param_shard_ = Buffer<float>(layout_.shard, MemoryTag::params, &tracker);
    const comm::Chunk own = layout_.owned(rank_);
    std::memcpy(param_shard_.data(), model.params().data() + own.offset,
                static_cast<size_t>(own.count) * sizeof(float));
    model.release_params();
  }
  std::unique_ptr<comm::Communicator> async = async_group(dp);
  async->set_memory_tracker(&tracker);  // the collectives' scratch, charged as communication
  if (config.hierarchical) {
    node_groups_ =
        std::make_unique<comm::NodeGroups>(comm::make_node_groups(*async, config.topology));
  }
  comm_ = std::make_unique<CommThread>(std::move(async));
  if (config.zero_stage == 3) {
    gathered_ = std::make_unique<GatheredUnits>(layout_, units.units(), param_shard_.data(), *comm_,
                                                tracker);
  }
}

DataParallel::~DataParallel() = default;

comm::Chunk DataParallel::owned() const {
  if (config_.zero_stage == 0) return {0, layout_.count};
  return layout_.owned(rank_);
}

void DataParallel::begin_step() {
  if (config_.zero_stage <= 1) model_.zero_grads();
  std::fill(syncs_.begin(), syncs_.end(), 0);
}

void DataParallel::prefetch(int unit) {
  if (gathered_ == nullptr || gathered_->gathered(unit)) return;
  gathered_->gather(unit);
}

void DataParallel::acquire(int unit) {
  if (gathered_ == nullptr) return;
  UnitState& s = unit_state_[static_cast<size_t>(unit)];
  if (s.holds++ > 0) return;
  if (!gathered_->gathered(unit)) gathered_->gather(unit);
  wait_for(gathered_->ticket(unit));
  const GradUnit& u = units_[unit];
  model_.bind_params(u.offset, u.count, gathered_->data(unit));
}

void DataParallel::release(int unit) {
  if (gathered_ == nullptr) return;
  UnitState& s = unit_state_[static_cast<size_t>(unit)];
  DTRAIN_CHECK(s.holds > 0, "ZeRO-3: unit ", units_[unit].name, " released more than acquired");
  if (--s.holds == 0) gathered_->free(unit);
}

void DataParallel::begin_backward(int unit) {
  if (config_.zero_stage < 2) return;
  const int b = bucket_of_unit_[static_cast<size_t>(unit)];
  std::shared_ptr<Buffer<float>>& buffer = bucket_grads_[static_cast<size_t>(b)];
  if (buffer != nullptr) return;
  const Bucket& bucket = buckets_[static_cast<size_t>(b)];
  buffer = std::make_shared<Buffer<float>>(bucket.count, MemoryTag::grads, &tracker_);
  model_.bind_grads(bucket.offset, bucket.count, buffer->data());
}

void DataParallel::end_backward(int unit, bool last) {
  if (!active()) return;
  const int b = bucket_of_unit_[static_cast<size_t>(unit)];
  if (b == deferred_bucket_ || buckets_[static_cast<size_t>(b)].last_unit != unit) return;
  if (config_.zero_stage <= 1 && !last) return;  // accumulate locally, sync once a step
  submit_sync(b);
}

std::string DataParallel::bucket_name(int b) const {
  const Bucket& bucket = buckets_[static_cast<size_t>(b)];
  return units_[bucket.first_unit].name +
         (bucket.first_unit == bucket.last_unit ? "" : ".." + units_[bucket.last_unit].name);
}

// Queues the sync of bucket b. Stages 2 and 3 hand the bucket's gradient buffer to the task,
// which frees it once it is reduced; the next backward into the bucket binds a fresh one.
void DataParallel::submit_sync(int b) {
  const Bucket bucket = buckets_[static_cast<size_t>(b)];
  const bool accumulate = syncs_[static_cast<size_t>(b)]++ > 0;
  const std::string span = bucket_name(b);
  if (config_.zero_stage == 0) {
    float* grads = model_.grads().data() + bucket.offset;
    if (node_groups_ != nullptr) {
      comm::NodeGroups* groups = node_groups_.get();
      comm_->submit("hierarchical all_reduce " + span, [=](comm::Communicator&) {
        comm::hierarchical_all_reduce<float>(*groups, grads, bucket.count, comm::ReduceOp::avg);
      });
      return;
    }
    if (config_.bf16_grad_reduce) {
      comm_->submit("all_reduce bf16 " + span, [=](comm::Communicator& c) {
        thread_local std::vector<bf16> wire;  // the communication thread's
        wire.resize(static_cast<size_t>(bucket.count));
        to_bf16(grads, wire.data(), bucket.count);
        comm::all_reduce<bf16>(c, wire.data(), bucket.count, comm::ReduceOp::avg,
                               comm::Algorithm::ring);
        to_float(wire.data(), grads, bucket.count);
      });
      return;
    }
    comm_->submit("all_reduce " + span, [=](comm::Communicator& c) {
      comm::all_reduce<float>(c, grads, bucket.count, comm::ReduceOp::avg, comm::Algorithm::ring);
    });
    return;
  }
  const ShardLayout layout = layout_;
  Buffer<float>* scratch = &scratch_;
  const bool bf16_wire = config_.bf16_grad_reduce;
  if (config_.zero_stage == 1) {
    // In place: this rank's piece lands where it lies in the full gradient buffer.
    float* grads = model_.grads().data();
    float* shard = grads + std::min(layout.count, rank_ * layout.shard);
    comm_->submit("reduce_scatter " + span, [=](comm::Communicator& c) {
      reduce_scatter_to_shard(c, layout, bucket.offset, bucket.count, grads + bucket.offset, shard,
                              false, *scratch, bf16_wire);
    });
    return;
  }
  std::shared_ptr<Buffer<float>> owned = std::move(bucket_grads_[static_cast<size_t>(b)]);
  DTRAIN_CHECK(owned != nullptr, "DataParallel: bucket ", span, " synced without a backward");
  float* shard = grad_shard_.data();
  comm_->submit("reduce_scatter " + span, [=](comm::Communicator& c) {
    reduce_scatter_to_shard(c, layout, bucket.offset, bucket.count, owned->data(), shard,
                            accumulate, *scratch, bf16_wire);
  });
}

void DataParallel::wait_for(int64_t ticket) {
  const double begin = now_us();
  comm_->wait(ticket);
  waits_.push_back({begin, now_us()});
}

void DataParallel::wait_for_syncs() {
  if (!active()) return;
  const double begin = now_us();
  comm_->wait_all();
  waits_.push_back({begin, now_us()});
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (static_cast<int>(b) == deferred_bucket_) continue;
    // A bucket that syncs once a step must have synced exactly once; stages 2-3 leave no
    // gradient behind in a bucket buffer (every contribution went into some reduce-scatter).
    DTRAIN_CHECK(config_.zero_stage >= 2 ? bucket_grads_[b] == nullptr : syncs_[b] == 1,
                 "DataParallel: bucket ", bucket_name(static_cast<int>(b)),
                 " did not complete its sync this step (", syncs_[b], " syncs)");
  }
}

std::span<float> DataParallel::deferred_grads() {
  DTRAIN_CHECK(config_.deferred_unit >= 0, "DataParallel: no deferred unit");
  const GradUnit& u = units_[config_.deferred_unit];
  if (config_.zero_stage < 2 || !active()) {
    return model_.grads().subspan(static_cast<size_t>(u.offset), static_cast<size_t>(u.count));
  }
  const std::shared_ptr<Buffer<float>>& b = bucket_grads_[static_cast<size_t>(deferred_bucket_)];
  DTRAIN_CHECK(b != nullptr, "DataParallel: the deferred unit ", u.name, " has no gradient");
  return b->span();
}

void DataParallel::sync_deferred() {
  if (!active() || deferred_bucket_ < 0) return;
  submit_sync(deferred_bucket_);
  const double begin = now_us();
  comm_->wait_all();
  waits_.push_back({begin, now_us()});
}

HeldGrads DataParallel::held_grads() {
  if (config_.zero_stage == 0 || !active()) return {model_.grads(), 0};
  const comm::Chunk own = layout_.owned(rank_);
  if (config_.zero_stage == 1) {
    return {model_.grads().subspan(static_cast<size_t>(own.offset), static_cast<size_t>(own.count)),
            own.offset};
  }
  return {grad_shard_.span().first(static_cast<size_t>(own.count)), own.offset};
}

std::span<float> DataParallel::update_params() {
  if (config_.zero_stage == 0) return model_.params();
  const comm::Chunk own = layout_.owned(rank_);
  if (config_.zero_stage == 3) return param_shard_.span().first(static_cast<size_t>(own.count));
  return model_.params().subspan(static_cast<size_t>(own.offset), static_cast<size_t>(own.count));
}

std::span<float> DataParallel::update_grads() {
  return held_grads().grads;
}

void DataParallel::gather_updated_params() {
  if (config_.zero_stage != 1 && config_.zero_stage != 2) return;
  float* all = model_.params().data();
  const float* shard = all + std::min(layout_.count, rank_ * layout_.shard);
  const ShardLayout layout = layout_;
  wait_for(comm_->submit("all_gather params", [=](comm::Communicator& c) {
    gather_from_shards(c, layout, 0, layout.count, shard, all);
  }));
}

comm::Traffic DataParallel::traffic() const {
  if (!active()) return {};
  comm::Traffic t = comm_->communicator().traffic();
  if (node_groups_ != nullptr) {
    t += node_groups_->node->traffic();
    t += node_groups_->across->traffic();
  }
  return t;
}

comm::LinkBytes DataParallel::link_bytes() const {
  if (!active()) return {};
  comm::LinkBytes out = comm::link_bytes_sent(comm_->communicator(), config_.topology);
  if (node_groups_ != nullptr) out += node_groups_->link_bytes_sent(config_.topology);
  return out;
}

std::vector<CommThread::Event> DataParallel::take_events() {
  return comm_ != nullptr ? comm_->take_events() : std::vector<CommThread::Event>{};
}

std::vector<TimeInterval> DataParallel::take_waits() {
  std::vector<TimeInterval> out;
  out.swap(waits_);
  return out;
}

}  // namespace dtrain::parallel
