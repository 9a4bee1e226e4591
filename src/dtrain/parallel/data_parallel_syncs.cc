// DataParallel's gradient syncs: the collective each bucket's gradient goes through on the
// communication thread, by ZeRO stage (all-reduce, reduce-scatter in place or into the shard),
// with EP's dense and expert pieces over their own groups, and mixed precision's bf16 buffers.
#include "dtrain/parallel/data_parallel_hooks.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/collectives_v.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"
#include "dtrain/parallel/expert_parallel.h"

namespace dtrain::parallel {
namespace {

// EP: a piece's average over `comm`, on a bf16 copy with `bf16_wire` (every ring hop rounds)
// widened back, as the syncs without EP do.
void all_reduce_piece(comm::Communicator& comm, float* g, int64_t n, bool bf16_wire,
                      comm::Algorithm algo) {
  if (!bf16_wire) {
    comm::all_reduce<float>(comm, g, n, comm::ReduceOp::avg, algo);
    return;
  }
  thread_local std::vector<bf16> wire;  // the communication thread's
  wire.resize(static_cast<size_t>(n));
  to_bf16(g, wire.data(), n);
  comm::all_reduce<bf16>(comm, wire.data(), n, comm::ReduceOp::avg, algo);
  to_float(wire.data(), g, n);
}

// EP with ZeRO-1: reduce_scatter_in_place over a bf16 wire (the range rounded to bf16, this
// rank's piece widened back in place).
void reduce_scatter_in_place_bf16(comm::Communicator& comm, const ShardLayout& layout,
                                  int64_t offset, int64_t n, float* range, comm::Algorithm algo) {
  const std::vector<comm::Chunk> pieces = layout.pieces(offset, n);
  const comm::Chunk mine = pieces[static_cast<size_t>(comm.rank())];
  thread_local std::vector<bf16> wire, piece;
  wire.resize(static_cast<size_t>(n));
  piece.resize(static_cast<size_t>(mine.count));
  to_bf16(range, wire.data(), n);
  comm::reduce_scatter_v<bf16>(comm, wire.data(), piece.data(), pieces, comm::ReduceOp::avg, algo);
  to_float(piece.data(), range + mine.offset, mine.count);
}

}  // namespace

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
  const comm::Algorithm algo = config_.algorithm;
  if (config_.mixed_precision) {
    submit_mixed_sync(b, accumulate, span);
    return;
  }
  if (config_.zero_stage == 0 && config_.ep > 1) {
    submit_expert_split_sync(b);
    return;
  }
  if (split_ != nullptr) {
    submit_split_shard_sync(b, accumulate);
    return;
  }
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
        comm::all_reduce<bf16>(c, wire.data(), bucket.count, comm::ReduceOp::avg, algo);
        to_float(wire.data(), grads, bucket.count);
      });
      return;
    }
    comm_->submit("all_reduce " + span, [=](comm::Communicator& c) {
      comm::all_reduce<float>(c, grads, bucket.count, comm::ReduceOp::avg, algo);
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
                              false, *scratch, bf16_wire, algo);
    });
    return;
  }
  std::shared_ptr<Buffer<float>> owned = std::move(bucket_grads_[static_cast<size_t>(b)]);
  DTRAIN_CHECK(owned != nullptr, "DataParallel: bucket ", span, " synced without a backward");
  float* shard = grad_shard_.data();
  comm_->submit("reduce_scatter " + span, [=](comm::Communicator& c) {
    reduce_scatter_to_shard(c, layout, bucket.offset, bucket.count, owned->data(), shard,
                            accumulate, *scratch, bf16_wire, algo);
  });
}

void DataParallel::submit_expert_split_sync(int b) {
  const Bucket bucket = buckets_[static_cast<size_t>(b)];
  const std::vector<BucketPiece> pieces =
      split_at_experts({bucket.offset, bucket.count}, config_.expert_ranges);
  float* grads = model_.grads().data();
  comm::Communicator* expert_dp = expert_dp_.get();
  const comm::Algorithm algo = config_.algorithm;
  const float inv_ep = 1.0f / static_cast<float>(config_.ep);
  const bool bf16_wire = config_.bf16_grad_reduce;
  comm_->submit((bf16_wire ? "all_reduce bf16 " : "all_reduce ") + bucket_name(b),
                [=](comm::Communicator& c) {
                  for (const BucketPiece& p : pieces) {
                    float* g = grads + p.offset;
                    if (!p.expert) {
                      all_reduce_piece(c, g, p.count, bf16_wire, algo);
                      continue;
                    }
                    // avg over dp/ep holders, times 1/ep: the sum over them divided by dp.
                    if (expert_dp->size() > 1) {
                      all_reduce_piece(*expert_dp, g, p.count, bf16_wire, comm::Algorithm::ring);
                    }
                    for (int64_t i = 0; i < p.count; ++i) g[i] *= inv_ep;
                  }
                });
}

// The expert pieces are scaled by 1/ep before their average over the expert-DP group: the sum
// over it divided by the DP size, as at stage 0 (exactly so for ep a power of two).
void DataParallel::submit_split_shard_sync(int b, bool accumulate) {
  const Bucket bucket = buckets_[static_cast<size_t>(b)];
  const SplitShards* split = split_.get();
  const std::vector<BucketPiece> pieces =
      split_at_experts({bucket.offset, bucket.count}, split->expert_ranges);
  const comm::Algorithm algo = config_.algorithm;
  const float inv_ep = 1.0f / static_cast<float>(config_.ep);
  auto scale = [inv_ep](float* g, int64_t n) {
    for (int64_t i = 0; i < n; ++i) g[i] *= inv_ep;
  };
  const bool bf16_wire = config_.bf16_grad_reduce;
  if (config_.zero_stage == 1) {
    float* grads = model_.grads().data();
    comm_->submit("reduce_scatter " + bucket_name(b), [=](comm::Communicator& c) {
      for (const BucketPiece& p : pieces) {
        float* g = grads + p.offset;
        if (p.expert) scale(g, p.count);
        comm::Communicator& group = p.expert ? *split->expert_comm : c;
        const ShardLayout& layout = p.expert ? split->expert : split->dense;
        const comm::Algorithm a = p.expert ? comm::Algorithm::ring : algo;
        if (bf16_wire) {
          reduce_scatter_in_place_bf16(group, layout, p.packed, p.count, g, a);
        } else {
          reduce_scatter_in_place(group, layout, p.packed, p.count, g, a);
        }
      }
    });
    return;
  }
  std::shared_ptr<Buffer<float>> owned = std::move(bucket_grads_[static_cast<size_t>(b)]);
  DTRAIN_CHECK(owned != nullptr, "DataParallel: bucket ", bucket_name(b),
               " synced without a backward");
  float* shard = grad_shard_.data();
  Buffer<float>* scratch = &scratch_;
  comm_->submit("reduce_scatter " + bucket_name(b), [=](comm::Communicator& c) {
    for (const BucketPiece& p : pieces) {
      float* g = owned->data() + (p.offset - bucket.offset);
      if (!p.expert) {
        reduce_scatter_to_shard(c, split->dense, p.packed, p.count, g, shard, accumulate, *scratch,
                                bf16_wire, algo);
        continue;
      }
      scale(g, p.count);
      reduce_scatter_to_shard(*split->expert_comm, split->expert, p.packed, p.count, g,
                              shard + split->dense.shard, accumulate, *scratch, bf16_wire,
                              comm::Algorithm::ring);
    }
  });
}

// Mixed precision's syncs: stage 0 averages the bucket's bf16 gradient in place (over an fp32
// wire unless --grad-reduce bf16: widened, reduced, rounded once), stage 1 reduce-scatters it
// into the owner's piece where it lies, stages 2-3 reduce-scatter the fp32 bucket buffer into
// the bf16 shard.
void DataParallel::submit_mixed_sync(int b, bool accumulate, const std::string& span) {
  const Bucket bucket = buckets_[static_cast<size_t>(b)];
  const ShardLayout layout = layout_;
  const bool bf16_wire = config_.bf16_grad_reduce;
  const comm::Algorithm algo = config_.algorithm;
  MemoryTracker* tracker = &tracker_;
  bf16* grads = grad16_.data();
  if (config_.zero_stage == 0) {
    bf16* g = grads + bucket.offset;
    comm::NodeGroups* groups = node_groups_.get();
    comm::Communicator* expert_dp = expert_dp_.get();
    const std::vector<BucketPiece> pieces =
        expert_dp != nullptr
            ? split_at_experts({bucket.offset, bucket.count}, config_.expert_ranges)
            : std::vector<BucketPiece>{};
    const float inv_ep = 1.0f / static_cast<float>(config_.ep);
    comm_->submit(
        (bf16_wire ? "all_reduce bf16 " : "all_reduce ") + span, [=](comm::Communicator& c) {
          if (bf16_wire && expert_dp != nullptr) {
            // EP on the bf16 wire: each piece averaged in place over its group (every hop
            // rounds), the expert pieces then scaled by 1/ep (exact for ep a power of two).
            for (const BucketPiece& p : pieces) {
              bf16* w = g + (p.offset - bucket.offset);
              if (!p.expert) {
                comm::all_reduce<bf16>(c, w, p.count, comm::ReduceOp::avg, algo);
                continue;
              }
              if (expert_dp->size() > 1) {
                comm::all_reduce<bf16>(*expert_dp, w, p.count, comm::ReduceOp::avg,
                                       comm::Algorithm::ring);
              }
              for (int64_t i = 0; i < p.count; ++i) w[i] = to_bf16(to_float(w[i]) * inv_ep);
            }
            return;
          }
          if (bf16_wire) {
            comm::all_reduce<bf16>(c, g, bucket.count, comm::ReduceOp::avg, algo);
            return;
          }
          Buffer<float> wire(bucket.count, MemoryTag::communication, tracker);
          to_float(g, wire.data(), bucket.count);
          if (expert_dp != nullptr) {
            // EP: the fp32 wire's dense pieces averaged over DP, expert pieces over the
            // expert-DP group (as submit_expert_split_sync), then rounded once.
            for (const BucketPiece& p : pieces) {
              float* w = wire.data() + (p.offset - bucket.offset);
              if (!p.expert) {
                comm::all_reduce<float>(c, w, p.count, comm::ReduceOp::avg, algo);
                continue;
              }
              if (expert_dp->size() > 1) {
                comm::all_reduce<float>(*expert_dp, w, p.count, comm::ReduceOp::avg,
                                        comm::Algorithm::ring);
              }
              for (int64_t i = 0; i < p.count; ++i) w[i] *= inv_ep;
            }
          } else if (groups != nullptr) {
            comm::hierarchical_all_reduce<float>(*groups, wire.data(), bucket.count,
                                                 comm::ReduceOp::avg);
          } else {
            comm::all_reduce<float>(c, wire.data(), bucket.count, comm::ReduceOp::avg, algo);
          }
          to_bf16(wire.data(), g, bucket.count);
        });
    return;
  }
  if (split_ != nullptr) {
    submit_mixed_split_shard_sync(b, accumulate, span);
    return;
  }
  if (config_.zero_stage == 1) {
    bf16* shard = grads + std::min(layout.count, rank_ * layout.shard);
    comm_->submit("reduce_scatter " + span, [=](comm::Communicator& c) {
      reduce_scatter_to_bf16_shard(c, layout, bucket.offset, bucket.count,
                                   static_cast<const bf16*>(grads + bucket.offset), shard, false,
                                   bf16_wire, tracker, algo);
    });
    return;
  }
  std::shared_ptr<Buffer<float>> owned = std::move(bucket_grads_[static_cast<size_t>(b)]);
  DTRAIN_CHECK(owned != nullptr, "DataParallel: bucket ", span, " synced without a backward");
  comm_->submit("reduce_scatter " + span, [=](comm::Communicator& c) {
    reduce_scatter_to_bf16_shard(c, layout, bucket.offset, bucket.count,
                                 static_cast<const float*>(owned->data()), grads, accumulate,
                                 bf16_wire, tracker, algo);
  });
}

// EP with ZeRO 1-3 under mixed precision: each piece of bucket b reduce-scattered over its own
// group into that group's bf16 shard (stage 1: the bf16 gradient, each rank's piece where it lies
// in the flat buffer; stages 2-3: the fp32 bucket buffer into the packed dense / expert shard).
// The expert pieces are scaled by 1/ep first, as submit_split_shard_sync does.
void DataParallel::submit_mixed_split_shard_sync(int b, bool accumulate, const std::string& span) {
  const Bucket bucket = buckets_[static_cast<size_t>(b)];
  const SplitShards* split = split_.get();
  const std::vector<BucketPiece> pieces =
      split_at_experts({bucket.offset, bucket.count}, split->expert_ranges);
  const comm::Algorithm algo = config_.algorithm;
  const float inv_ep = 1.0f / static_cast<float>(config_.ep);
  const bool bf16_wire = config_.bf16_grad_reduce;
  MemoryTracker* tracker = &tracker_;
  bf16* grads = grad16_.data();
  if (config_.zero_stage == 1) {
    comm_->submit("reduce_scatter " + span, [=](comm::Communicator& c) {
      for (const BucketPiece& p : pieces) {
        bf16* g = grads + p.offset;
        if (p.expert) {
          for (int64_t i = 0; i < p.count; ++i) g[i] = to_bf16(to_float(g[i]) * inv_ep);
        }
        comm::Communicator& group = p.expert ? *split->expert_comm : c;
        const ShardLayout& layout = p.expert ? split->expert : split->dense;
        // The rank's piece of the packed range lies at its own position in g.
        reduce_scatter_in_place_to_bf16(group, layout, p.packed, p.count, g, bf16_wire, tracker,
                                        p.expert ? comm::Algorithm::ring : algo);
      }
    });
    return;
  }
  std::shared_ptr<Buffer<float>> owned = std::move(bucket_grads_[static_cast<size_t>(b)]);
  DTRAIN_CHECK(owned != nullptr, "DataParallel: bucket ", span, " synced without a backward");
  comm_->submit("reduce_scatter " + span, [=](comm::Communicator& c) {
    for (const BucketPiece& p : pieces) {
      float* g = owned->data() + (p.offset - bucket.offset);
      if (!p.expert) {
        reduce_scatter_to_bf16_shard(c, split->dense, p.packed, p.count,
                                     static_cast<const float*>(g), grads, accumulate, bf16_wire,
                                     tracker, algo);
        continue;
      }
      for (int64_t i = 0; i < p.count; ++i) g[i] *= inv_ep;
      reduce_scatter_to_bf16_shard(*split->expert_comm, split->expert, p.packed, p.count,
                                   static_cast<const float*>(g), grads + split->dense.shard,
                                   accumulate, bf16_wire, tracker, comm::Algorithm::ring);
    }
  });
}

}  // namespace dtrain::parallel
