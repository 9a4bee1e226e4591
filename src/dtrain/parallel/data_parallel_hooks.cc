// DataParallel: the hooks of each ZeRO stage (stage 3's gather / free per unit, the bucket syncs
// submitted as units finish), the deferred tied unit, and the views the optimizer updates. (The
// syncs' collectives: data_parallel_syncs.cc.)
#include "dtrain/parallel/data_parallel_hooks.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/collectives_v.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/parallel/expert_parallel.h"

namespace dtrain::parallel {
namespace {

// EP with ZeRO: the runs of the flat buffer (`psi` elements) this rank's two shards cover, in
// flat order, with their index in the shard buffer (the dense shard, then the expert shard).
std::vector<ShardRun> split_runs(const SplitShards& s, int64_t psi, int dense_rank,
                                 int expert_rank) {
  std::vector<ShardRun> out;
  for (const BucketPiece& p : split_at_experts({0, psi}, s.expert_ranges)) {
    const ShardLayout& layout = p.expert ? s.expert : s.dense;
    const int r = p.expert ? expert_rank : dense_rank;
    const comm::Chunk mine = layout.pieces(p.packed, p.count)[static_cast<size_t>(r)];
    if (mine.count == 0) continue;
    const int64_t base = p.expert ? s.dense.shard : 0;
    out.push_back({p.offset + mine.offset,
                   base + p.packed + mine.offset - static_cast<int64_t>(r) * layout.shard,
                   mine.count});
  }
  return out;
}

}  // namespace

DataParallel::DataParallel(const DataParallelConfig& config, model::GptModel& model,
                           const StageUnits& units, comm::Communicator& dp,
                           std::unique_ptr<comm::Communicator> dp_async,
                           std::unique_ptr<comm::Communicator> expert_dp, MemoryTracker& tracker)
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
  if (config.ep > 1) {
    DTRAIN_CHECK(!config.hierarchical, "--ep ", config.ep,
                 " with --dp-all-reduce hierarchical is not supported yet");
    DTRAIN_CHECK(expert_dp != nullptr, "DataParallel: --ep ", config.ep,
                 " needs the expert-DP group (make_process_groups forms it)");
    expert_dp_ = std::move(expert_dp);
    expert_dp_->set_memory_tracker(&tracker);
    if (config.zero_stage > 0) {
      int64_t experts = 0;
      for (const comm::Chunk& r : config.expert_ranges) experts += r.count;
      split_ = std::make_unique<SplitShards>(SplitShards{
          shard_layout(model.param_count() - experts, dp.size()),
          shard_layout(experts, expert_dp_->size()), expert_dp_.get(), config.expert_ranges});
    }
  }
  if (config.mixed_precision) {
    // The optimizer's fp32 master of the owned range (EP with ZeRO: of the owned runs, packed as
    // the moments are), the bf16 weights and gradients at rest; the model's fp32 buffers go (its
    // kernels run on the units' working copies).
    const int64_t psi = model.param_count();
    const float* initial = model.params().data();
    const int64_t held = moment_count();
    master_ = Buffer<float>(held, MemoryTag::optimizer, &tracker);
    const std::vector<ShardRun> runs = shard_runs();
    for (const ShardRun& r : runs) {
      std::memcpy(master_.data() + r.moment, initial + r.flat,
                  static_cast<size_t>(r.count) * sizeof(float));
    }
    if (config.zero_stage == 3) {
      param16_ = Buffer<bf16>(held, MemoryTag::params, &tracker);
      for (const ShardRun& r : runs) to_bf16(initial + r.flat, param16_.data() + r.moment, r.count);
    } else {
      param16_ = Buffer<bf16>(psi, MemoryTag::params, &tracker);
      to_bf16(initial, param16_.data(), psi);
    }
    grad16_ = Buffer<bf16>(config.zero_stage >= 2 ? held : psi, MemoryTag::grads, &tracker);
    work_params_.resize(static_cast<size_t>(n));
    work_grads_.resize(static_cast<size_t>(n));
    model.release_params();
    model.release_grads();
  }
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

  if (config.zero_stage >= 2 && !config.mixed_precision) {
    grad_shard_ = Buffer<float>(moment_count(), MemoryTag::grads, &tracker);
    model.release_grads();
  }
  if (config.zero_stage == 3 && !config.mixed_precision) {
    param_shard_ = Buffer<float>(moment_count(), MemoryTag::params, &tracker);
    for (const UpdatePiece& p : update_pieces()) {
      std::memcpy(param_shard_.data() + p.moment, model.params().data() + p.flat,
                  p.params.size() * sizeof(float));
    }
    model.release_params();
  }
  DTRAIN_CHECK(dp_async != nullptr && dp_async->size() == dp.size(),
               "DataParallel: the communication thread's group must be a copy of the DP group");
  std::unique_ptr<comm::Communicator> async = std::move(dp_async);
  async->set_memory_tracker(&tracker);  // the collectives' scratch, charged as communication
  if (config.hierarchical) {
    node_groups_ =
        std::make_unique<comm::NodeGroups>(comm::make_node_groups(*async, config.topology));
  }
  if (config_.algorithm != comm::Algorithm::ring && async->size() > 1) {
    // Asked for here, before any sync (under MPI every member makes the window together).
    const comm::SharedMemoryGroup* shm = async->shared_memory();
    if (config_.algorithm == comm::Algorithm::automatic) {
      config_.algorithm = shm != nullptr ? comm::Algorithm::direct : comm::Algorithm::ring;
    }
    DTRAIN_CHECK(shm != nullptr || config_.algorithm != comm::Algorithm::direct,
                 "--dp-algo direct: the DP group's ranks do not share memory (direct needs the "
                 "threads backend, or MPI ranks all on one node)");
    if (shm != nullptr) direct_slot_bytes_ = shm->shares_address_space() ? 0 : shm->slot_bytes();
  }
  if (config_.algorithm == comm::Algorithm::automatic) config_.algorithm = comm::Algorithm::ring;
  comm_ = std::make_unique<CommThread>(std::move(async));
  if (config.zero_stage == 3 && split_ != nullptr) {
    gathered_ = config.mixed_precision
                    ? std::make_unique<GatheredUnits>(*split_, units.units(),
                                                      static_cast<const bf16*>(param16_.data()),
                                                      *comm_, tracker, config_.algorithm)
                    : std::make_unique<GatheredUnits>(
                          *split_, units.units(), static_cast<const float*>(param_shard_.data()),
                          *comm_, tracker, config_.algorithm);
  } else if (config.zero_stage == 3) {
    gathered_ = config.mixed_precision
                    ? std::make_unique<GatheredUnits>(layout_, units.units(),
                                                      static_cast<const bf16*>(param16_.data()),
                                                      *comm_, tracker, config_.algorithm)
                    : std::make_unique<GatheredUnits>(
                          layout_, units.units(), static_cast<const float*>(param_shard_.data()),
                          *comm_, tracker, config_.algorithm);
  }
}

DataParallel::~DataParallel() = default;

comm::Chunk DataParallel::owned() const {
  DTRAIN_CHECK(split_ == nullptr, "DataParallel: EP with ZeRO owns several runs (update_pieces)");
  if (config_.zero_stage == 0) return {0, layout_.count};
  return layout_.owned(rank_);
}

int64_t DataParallel::moment_count() const {
  if (config_.zero_stage == 0) return layout_.count;
  if (split_ != nullptr) return split_->dense.shard + split_->expert.shard;
  return layout_.shard;
}

std::vector<UpdatePiece> DataParallel::update_pieces() {
  DTRAIN_CHECK(!config_.mixed_precision, "DataParallel: mixed precision updates mixed_update()");
  if (split_ == nullptr) return {{owned().offset, 0, update_params(), update_grads()}};
  // The parameters and gradients are flat (stage 1), the gradients packed in the shard (2), or
  // both (3): the shard buffers index as the moments do.
  std::vector<UpdatePiece> out;
  const int expert_rank = expert_dp_->rank();
  for (const ShardRun& r : split_runs(*split_, layout_.count, rank_, expert_rank)) {
    float* params = config_.zero_stage == 3 && !param_shard_.empty()
                        ? param_shard_.data() + r.moment
                        : model_.params().data() + r.flat;
    float* grads = config_.zero_stage >= 2 && !grad_shard_.empty() ? grad_shard_.data() + r.moment
                                                                   : model_.grads().data() + r.flat;
    const auto n = static_cast<size_t>(r.count);
    out.push_back({r.flat, r.moment, {params, n}, {grads, n}});
  }
  return out;
}

std::vector<ShardRun> DataParallel::shard_runs() const {
  if (split_ == nullptr) return {{owned().offset, 0, owned().count}};
  return split_runs(*split_, layout_.count, rank_, expert_dp_->rank());
}

std::vector<comm::Chunk> DataParallel::owned_runs() const {
  if (split_ == nullptr) return {owned()};
  std::vector<comm::Chunk> out;
  for (const ShardRun& r : split_runs(*split_, layout_.count, rank_, expert_dp_->rank())) {
    out.push_back({r.flat, r.count});
  }
  return out;
}

void DataParallel::begin_step() {
  if (config_.zero_stage <= 1) {
    model_.zero_grads();
    grad16_.zero();
  }
  std::fill(syncs_.begin(), syncs_.end(), 0);
}

void DataParallel::prefetch(int unit) {
  if (gathered_ == nullptr || gathered_->gathered(unit)) return;
  if (config_.mixed_precision && unit_state_[static_cast<size_t>(unit)].holds > 0) return;
  gathered_->gather(unit);
}

void DataParallel::acquire(int unit) {
  if (gathered_ == nullptr && !config_.mixed_precision) return;
  UnitState& s = unit_state_[static_cast<size_t>(unit)];
  if (s.holds++ > 0) return;
  const GradUnit& u = units_[unit];
  if (gathered_ != nullptr) {
    if (!gathered_->gathered(unit)) gathered_->gather(unit);
    wait_for(gathered_->ticket(unit));
  }
  if (!config_.mixed_precision) {
    model_.bind_params(u.offset, u.count, gathered_->data(unit));
    return;
  }
  // The fp32 working copy of the unit's bf16 weights (gathered ones at stage 3, freed at once).
  Buffer<float>& work = work_params_[static_cast<size_t>(unit)];
  work = Buffer<float>(u.count, MemoryTag::params, &tracker_);
  if (gathered_ != nullptr) {
    to_float(gathered_->data16(unit), work.data(), u.count);
    gathered_->free(unit);
  } else {
    to_float(param16_.data() + u.offset, work.data(), u.count);
  }
  model_.bind_params(u.offset, u.count, work.data());
}

void DataParallel::release(int unit) {
  if (gathered_ == nullptr && !config_.mixed_precision) return;
  UnitState& s = unit_state_[static_cast<size_t>(unit)];
  DTRAIN_CHECK(s.holds > 0, "DataParallel: unit ", units_[unit].name,
               " released more than acquired");
  if (--s.holds > 0) return;
  if (config_.mixed_precision) {
    work_params_[static_cast<size_t>(unit)].release();
  } else {
    gathered_->free(unit);
  }
}

void DataParallel::begin_backward(int unit) {
  if (config_.zero_stage < 2) {
    if (!config_.mixed_precision) return;
    Buffer<float>& work = work_grads_[static_cast<size_t>(unit)];
    if (!work.empty()) return;
    const GradUnit& u = units_[unit];
    work = Buffer<float>(u.count, MemoryTag::grads, &tracker_);
    model_.bind_grads(u.offset, u.count, work.data());
    return;
  }
  const int b = bucket_of_unit_[static_cast<size_t>(unit)];
  std::shared_ptr<Buffer<float>>& buffer = bucket_grads_[static_cast<size_t>(b)];
  if (buffer != nullptr) return;
  const Bucket& bucket = buckets_[static_cast<size_t>(b)];
  buffer = std::make_shared<Buffer<float>>(bucket.count, MemoryTag::grads, &tracker_);
  model_.bind_grads(bucket.offset, bucket.count, buffer->data());
}

void DataParallel::fold_unit_grads(int unit) {
  Buffer<float>& work = work_grads_[static_cast<size_t>(unit)];
  DTRAIN_CHECK(!work.empty(), "DataParallel: unit ", units_[unit].name,
               " ended a backward it did not begin");
  bf16* g = grad16_.data() + units_[unit].offset;
  for (int64_t i = 0; i < work.size(); ++i) g[i] = to_bf16(to_float(g[i]) + work[i]);
  work.release();
}

void DataParallel::end_backward(int unit, bool last) {
  if (config_.mixed_precision && config_.zero_stage < 2 && unit != config_.deferred_unit) {
    fold_unit_grads(unit);
  }
  if (!active()) return;
  const int b = bucket_of_unit_[static_cast<size_t>(unit)];
  if (b == deferred_bucket_ || buckets_[static_cast<size_t>(b)].last_unit != unit) return;
  if (config_.zero_stage <= 1 && !last) return;  // accumulate locally, sync once a step
  submit_sync(b);
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
  if (config_.mixed_precision && config_.zero_stage < 2) {
    Buffer<float>& work = work_grads_[static_cast<size_t>(config_.deferred_unit)];
    DTRAIN_CHECK(!work.empty(), "DataParallel: the deferred unit ", u.name, " has no gradient");
    return work.span();
  }
  if (config_.zero_stage < 2 || !active()) {
    return model_.grads().subspan(static_cast<size_t>(u.offset), static_cast<size_t>(u.count));
  }
  const std::shared_ptr<Buffer<float>>& b = bucket_grads_[static_cast<size_t>(deferred_bucket_)];
  DTRAIN_CHECK(b != nullptr, "DataParallel: the deferred unit ", u.name, " has no gradient");
  return b->span();
}

void DataParallel::sync_deferred() {
  if (config_.mixed_precision && config_.zero_stage < 2 && config_.deferred_unit >= 0) {
    fold_unit_grads(config_.deferred_unit);
  }
  if (!active() || deferred_bucket_ < 0) return;
  submit_sync(deferred_bucket_);
  const double begin = now_us();
  comm_->wait_all();
  waits_.push_back({begin, now_us()});
}

HeldGrads DataParallel::held_grads() {
  DTRAIN_CHECK(split_ == nullptr, "DataParallel: EP with ZeRO holds several runs (update_pieces)");
  if (config_.mixed_precision) {
    if (config_.zero_stage == 0) return {{}, 0, grad16_.span()};
    const comm::Chunk own = layout_.owned(rank_);
    const size_t at = config_.zero_stage == 1 ? static_cast<size_t>(own.offset) : 0;
    return {{}, own.offset, grad16_.span().subspan(at, static_cast<size_t>(own.count))};
  }
  if (config_.zero_stage == 0 || !active()) return {model_.grads(), 0};
  const comm::Chunk own = layout_.owned(rank_);
  if (config_.zero_stage == 1) {
    return {model_.grads().subspan(static_cast<size_t>(own.offset), static_cast<size_t>(own.count)),
            own.offset};
  }
  return {grad_shard_.span().first(static_cast<size_t>(own.count)), own.offset};
}

std::span<float> DataParallel::update_params() {
  DTRAIN_CHECK(!config_.mixed_precision, "DataParallel: mixed precision updates mixed_update()");
  DTRAIN_CHECK(split_ == nullptr, "DataParallel: EP with ZeRO updates update_pieces()");
  if (config_.zero_stage == 0) return model_.params();
  const comm::Chunk own = layout_.owned(rank_);
  if (config_.zero_stage == 3) return param_shard_.span().first(static_cast<size_t>(own.count));
  return model_.params().subspan(static_cast<size_t>(own.offset), static_cast<size_t>(own.count));
}

std::span<float> DataParallel::update_grads() {
  return held_grads().grads;
}

MixedUpdate DataParallel::mixed_update() {
  DTRAIN_CHECK(config_.mixed_precision, "DataParallel: mixed_update() without mixed precision");
  const comm::Chunk own = owned();
  const auto count = static_cast<size_t>(own.count);
  const size_t at = config_.zero_stage == 3 ? 0 : static_cast<size_t>(own.offset);
  return {master_.span().first(count), held_grads().grads16, param16_.span().subspan(at, count)};
}

std::vector<MixedUpdate> DataParallel::mixed_pieces() {
  DTRAIN_CHECK(config_.mixed_precision, "DataParallel: mixed_pieces() without mixed precision");
  std::vector<MixedUpdate> out;
  for (const ShardRun& r : shard_runs()) {
    const auto n = static_cast<size_t>(r.count);
    const int64_t grad_at = config_.zero_stage >= 2 ? r.moment : r.flat;
    const int64_t param_at = config_.zero_stage == 3 ? r.moment : r.flat;
    out.push_back({master_.span().subspan(static_cast<size_t>(r.moment), n),
                   grad16_.span().subspan(static_cast<size_t>(grad_at), n),
                   param16_.span().subspan(static_cast<size_t>(param_at), n), r.flat, r.moment});
  }
  return out;
}

void DataParallel::gather_updated_params() {
  if (config_.zero_stage != 1 && config_.zero_stage != 2) return;
  if (config_.mixed_precision && split_ != nullptr) {
    // Each piece of the bf16 buffer from its own group's shards, in place: the rank's piece of
    // the packed range lies at its flat position.
    bf16* all16 = param16_.data();
    const SplitShards* split = split_.get();
    const std::vector<BucketPiece> pieces =
        split_at_experts({0, layout_.count}, split->expert_ranges);
    const comm::Algorithm algo = config_.algorithm;
    wait_for(comm_->submit("all_gather params", [=](comm::Communicator& c) {
      for (const BucketPiece& p : pieces) {
        comm::Communicator& group = p.expert ? *split->expert_comm : c;
        const ShardLayout& layout = p.expert ? split->expert : split->dense;
        gather_in_place<bf16>(group, layout, p.packed, p.count, all16 + p.offset,
                              p.expert ? comm::Algorithm::ring : algo);
      }
    }));
    return;
  }
  if (config_.mixed_precision) {
    bf16* all16 = param16_.data();
    const bf16* shard16 = all16 + std::min(layout_.count, rank_ * layout_.shard);
    const ShardLayout layout = layout_;
    const comm::Algorithm algo = config_.algorithm;
    wait_for(comm_->submit("all_gather params", [=](comm::Communicator& c) {
      gather_from_shards<bf16>(c, layout, 0, layout.count, shard16, all16, algo);
    }));
    return;
  }
  float* all = model_.params().data();
  if (split_ != nullptr) {
    // Each piece of the buffer from its own group's shards, in place.
    const SplitShards* split = split_.get();
    const std::vector<BucketPiece> pieces =
        split_at_experts({0, layout_.count}, split->expert_ranges);
    const comm::Algorithm algo = config_.algorithm;
    wait_for(comm_->submit("all_gather params", [=](comm::Communicator& c) {
      for (const BucketPiece& p : pieces) {
        if (p.expert) {
          gather_in_place(*split->expert_comm, split->expert, p.packed, p.count, all + p.offset,
                          comm::Algorithm::ring);
        } else {
          gather_in_place(c, split->dense, p.packed, p.count, all + p.offset, algo);
        }
      }
    }));
    return;
  }
  const float* shard = all + std::min(layout_.count, rank_ * layout_.shard);
  const ShardLayout layout = layout_;
  const comm::Algorithm algo = config_.algorithm;
  wait_for(comm_->submit("all_gather params", [=](comm::Communicator& c) {
    gather_from_shards(c, layout, 0, layout.count, shard, all, algo);
  }));
}

comm::Traffic DataParallel::traffic() const {
  if (!active()) return {};
  comm::Traffic t = comm_->communicator().traffic();
  if (node_groups_ != nullptr) {
    t += node_groups_->node->traffic();
    t += node_groups_->across->traffic();
  }
  if (expert_dp_ != nullptr) t += expert_dp_->traffic();
  return t;
}

comm::LinkBytes DataParallel::link_bytes() const {
  if (!active()) return {};
  comm::LinkBytes out = comm::link_bytes_sent(comm_->communicator(), config_.topology);
  if (node_groups_ != nullptr) out += node_groups_->link_bytes_sent(config_.topology);
  if (expert_dp_ != nullptr) out += comm::link_bytes_sent(*expert_dp_, config_.topology);
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
