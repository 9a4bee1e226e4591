// shard_layout, the moves between full ranges and shards over comm's _v collectives, and
// ZeRO-3's gathered units.
#include "dtrain/parallel/zero.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "dtrain/comm/collectives_v.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"
#include "dtrain/parallel/expert_parallel.h"

namespace dtrain::parallel {

ShardLayout shard_layout(int64_t count, int ranks) {
  DTRAIN_CHECK(ranks >= 1, "shard_layout: ranks must be >= 1, got ", ranks);
  DTRAIN_CHECK(count >= 0, "shard_layout: count must be >= 0, got ", count);
  return {count, ranks, (count + ranks - 1) / ranks};
}

comm::Chunk ShardLayout::owned(int rank) const {
  const int64_t begin = static_cast<int64_t>(rank) * shard;
  return {begin, std::clamp<int64_t>(count - begin, 0, shard)};
}

std::vector<comm::Chunk> ShardLayout::pieces(int64_t offset, int64_t n) const {
  DTRAIN_CHECK(offset >= 0 && n >= 0 && offset + n <= count, "ShardLayout: range [", offset, ", ",
               offset + n, ") is outside the ", count, " elements");
  std::vector<comm::Chunk> out;
  out.reserve(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const comm::Chunk own = owned(r);
    const int64_t begin = std::clamp(own.offset, offset, offset + n);
    const int64_t end = std::clamp(own.offset + own.count, offset, offset + n);
    out.push_back({begin - offset, end - begin});
  }
  return out;
}

namespace {

// Where piece `rank` of the range [offset, ...) lies in that rank's shard.
int64_t shard_position(const ShardLayout& layout, int rank, int64_t offset,
                       const comm::Chunk& piece) {
  return offset + piece.offset - static_cast<int64_t>(rank) * layout.shard;
}

}  // namespace

comm::Traffic reduce_scatter_to_shard(comm::Communicator& comm, const ShardLayout& layout,
                                      int64_t offset, int64_t n, const float* grads, float* shard,
                                      bool accumulate, Buffer<float>& scratch, bool bf16_wire,
                                      comm::Algorithm algo) {
  const std::vector<comm::Chunk> pieces = layout.pieces(offset, n);
  const int r = comm.rank();
  const comm::Chunk mine = pieces[static_cast<size_t>(r)];
  float* dst = shard + (mine.count > 0 ? shard_position(layout, r, offset, mine) : 0);
  if (bf16_wire) {
    // The bucket rounded to bf16, reduced in bf16 (every hop rounds), widened into the shard.
    thread_local std::vector<bf16> wire, piece;
    wire.resize(static_cast<size_t>(n));
    piece.resize(static_cast<size_t>(mine.count));
    to_bf16(grads, wire.data(), n);
    const comm::Traffic t = comm::reduce_scatter_v<bf16>(comm, wire.data(), piece.data(), pieces,
                                                         comm::ReduceOp::avg, algo);
    for (int64_t i = 0; i < mine.count; ++i) {
      const float g = to_float(piece[static_cast<size_t>(i)]);
      dst[i] = accumulate ? dst[i] + g : g;
    }
    return t;
  }
  if (!accumulate) {
    return comm::reduce_scatter_v<float>(comm, grads, dst, pieces, comm::ReduceOp::avg, algo);
  }
  if (scratch.size() < mine.count) scratch.resize(mine.count);
  const comm::Traffic t =
      comm::reduce_scatter_v<float>(comm, grads, scratch.data(), pieces, comm::ReduceOp::avg, algo);
  for (int64_t i = 0; i < mine.count; ++i) dst[i] += scratch[i];
  return t;
}

namespace {

// The average of the range, this rank's piece in fp32, over a wire of element W.
template <typename W, typename Src>
comm::Traffic reduce_piece(comm::Communicator& comm, std::span<const comm::Chunk> pieces, int64_t n,
                           const Src* grads, float* piece, MemoryTracker* tracker,
                           comm::Algorithm algo) {
  const comm::Chunk mine = pieces[static_cast<size_t>(comm.rank())];
  const W* wire = nullptr;
  Buffer<W> converted;  // the range in the wire's element type, when it is not already
  if constexpr (std::is_same_v<W, Src>) {
    wire = grads;
  } else {
    converted = Buffer<W>(n, MemoryTag::communication, tracker);
    if constexpr (std::is_same_v<W, bf16>) {
      to_bf16(grads, converted.data(), n);
    } else {
      to_float(grads, converted.data(), n);
    }
    wire = converted.data();
  }
  if constexpr (std::is_same_v<W, float>) {
    return comm::reduce_scatter_v<float>(comm, wire, piece, pieces, comm::ReduceOp::avg, algo);
  } else {
    Buffer<bf16> out(mine.count, MemoryTag::communication, tracker);
    const comm::Traffic t =
        comm::reduce_scatter_v<bf16>(comm, wire, out.data(), pieces, comm::ReduceOp::avg, algo);
    to_float(out.data(), piece, mine.count);
    return t;
  }
}

// The average of the range rounded once into `dst` (this rank's piece: pieces[rank].count
// elements; read first when `accumulate`). The range is reduced into a separate buffer first, so
// dst may lie inside grads.
template <typename Src>
comm::Traffic reduce_into_bf16(comm::Communicator& comm, std::span<const comm::Chunk> pieces,
                               int64_t n, const Src* grads, bf16* dst, bool accumulate,
                               bool bf16_wire, MemoryTracker* tracker, comm::Algorithm algo) {
  const comm::Chunk mine = pieces[static_cast<size_t>(comm.rank())];
  Buffer<float> piece(mine.count, MemoryTag::communication, tracker);
  const comm::Traffic t =
      bf16_wire ? reduce_piece<bf16>(comm, pieces, n, grads, piece.data(), tracker, algo)
                : reduce_piece<float>(comm, pieces, n, grads, piece.data(), tracker, algo);
  for (int64_t i = 0; i < mine.count; ++i) {
    dst[i] = to_bf16(accumulate ? to_float(dst[i]) + piece[i] : piece[i]);
  }
  return t;
}

template <typename Src>
comm::Traffic reduce_scatter_to_bf16(comm::Communicator& comm, const ShardLayout& layout,
                                     int64_t offset, int64_t n, const Src* grads, bf16* shard,
                                     bool accumulate, bool bf16_wire, MemoryTracker* tracker,
                                     comm::Algorithm algo) {
  const std::vector<comm::Chunk> pieces = layout.pieces(offset, n);
  const int r = comm.rank();
  const comm::Chunk mine = pieces[static_cast<size_t>(r)];
  bf16* dst = shard + (mine.count > 0 ? shard_position(layout, r, offset, mine) : 0);
  return reduce_into_bf16(comm, pieces, n, grads, dst, accumulate, bf16_wire, tracker, algo);
}

}  // namespace

comm::Traffic reduce_scatter_to_bf16_shard(comm::Communicator& comm, const ShardLayout& layout,
                                           int64_t offset, int64_t n, const float* grads,
                                           bf16* shard, bool accumulate, bool bf16_wire,
                                           MemoryTracker* tracker, comm::Algorithm algo) {
  return reduce_scatter_to_bf16(comm, layout, offset, n, grads, shard, accumulate, bf16_wire,
                                tracker, algo);
}

comm::Traffic reduce_scatter_to_bf16_shard(comm::Communicator& comm, const ShardLayout& layout,
                                           int64_t offset, int64_t n, const bf16* grads,
                                           bf16* shard, bool accumulate, bool bf16_wire,
                                           MemoryTracker* tracker, comm::Algorithm algo) {
  return reduce_scatter_to_bf16(comm, layout, offset, n, grads, shard, accumulate, bf16_wire,
                                tracker, algo);
}

comm::Traffic reduce_scatter_in_place(comm::Communicator& comm, const ShardLayout& layout,
                                      int64_t offset, int64_t n, float* range,
                                      comm::Algorithm algo) {
  const std::vector<comm::Chunk> pieces = layout.pieces(offset, n);
  const comm::Chunk mine = pieces[static_cast<size_t>(comm.rank())];
  return comm::reduce_scatter_v<float>(comm, range, range + mine.offset, pieces,
                                       comm::ReduceOp::avg, algo);
}

template <typename T>
comm::Traffic gather_in_place(comm::Communicator& comm, const ShardLayout& layout, int64_t offset,
                              int64_t n, T* range, comm::Algorithm algo) {
  const std::vector<comm::Chunk> pieces = layout.pieces(offset, n);
  const comm::Chunk mine = pieces[static_cast<size_t>(comm.rank())];
  return comm::all_gather_v<T>(comm, range + mine.offset, range, pieces, algo);
}
template comm::Traffic gather_in_place<float>(comm::Communicator&, const ShardLayout&, int64_t,
                                              int64_t, float*, comm::Algorithm);
template comm::Traffic gather_in_place<bf16>(comm::Communicator&, const ShardLayout&, int64_t,
                                             int64_t, bf16*, comm::Algorithm);

comm::Traffic reduce_scatter_in_place_to_bf16(comm::Communicator& comm, const ShardLayout& layout,
                                              int64_t offset, int64_t n, bf16* range,
                                              bool bf16_wire, MemoryTracker* tracker,
                                              comm::Algorithm algo) {
  const std::vector<comm::Chunk> pieces = layout.pieces(offset, n);
  const comm::Chunk mine = pieces[static_cast<size_t>(comm.rank())];
  return reduce_into_bf16(comm, pieces, n, static_cast<const bf16*>(range), range + mine.offset,
                          false, bf16_wire, tracker, algo);
}

template <typename T>
comm::Traffic gather_from_shards(comm::Communicator& comm, const ShardLayout& layout,
                                 int64_t offset, int64_t n, const T* shard, T* out,
                                 comm::Algorithm algo) {
  const std::vector<comm::Chunk> pieces = layout.pieces(offset, n);
  const int r = comm.rank();
  const comm::Chunk mine = pieces[static_cast<size_t>(r)];
  const T* src = shard + (mine.count > 0 ? shard_position(layout, r, offset, mine) : 0);
  return comm::all_gather_v<T>(comm, src, out, pieces, algo);
}
template comm::Traffic gather_from_shards<float>(comm::Communicator&, const ShardLayout&, int64_t,
                                                 int64_t, const float*, float*, comm::Algorithm);
template comm::Traffic gather_from_shards<bf16>(comm::Communicator&, const ShardLayout&, int64_t,
                                                int64_t, const bf16*, bf16*, comm::Algorithm);

GatheredUnits::GatheredUnits(const ShardLayout& layout, std::span<const GradUnit> units,
                             const float* shard, CommThread& comm, MemoryTracker& tracker,
                             comm::Algorithm algo)
    : layout_(layout),
      units_(units.begin(), units.end()),
      shard_(shard),
      comm_(comm),
      tracker_(tracker),
      algo_(algo),
      gathered_(units.size()) {}

GatheredUnits::GatheredUnits(const ShardLayout& layout, std::span<const GradUnit> units,
                             const bf16* shard, CommThread& comm, MemoryTracker& tracker,
                             comm::Algorithm algo)
    : layout_(layout),
      units_(units.begin(), units.end()),
      shard16_(shard),
      comm_(comm),
      tracker_(tracker),
      algo_(algo),
      gathered_(units.size()) {}

GatheredUnits::GatheredUnits(const SplitShards& split, std::span<const GradUnit> units,
                             const float* shard, CommThread& comm, MemoryTracker& tracker,
                             comm::Algorithm algo)
    : GatheredUnits(split.dense, units, shard, comm, tracker, algo) {
  split_ = std::make_unique<SplitShards>(split);
}

GatheredUnits::GatheredUnits(const SplitShards& split, std::span<const GradUnit> units,
                             const bf16* shard, CommThread& comm, MemoryTracker& tracker,
                             comm::Algorithm algo)
    : GatheredUnits(split.dense, units, shard, comm, tracker, algo) {
  split_ = std::make_unique<SplitShards>(split);
}

void GatheredUnits::gather(int u) {
  const GradUnit& unit = units_[static_cast<size_t>(u)];
  Gathered& g = gathered_[static_cast<size_t>(u)];
  DTRAIN_CHECK(!gathered(u), "ZeRO-3: unit ", unit.name, " is already gathered");
  const ShardLayout layout = layout_;
  const int64_t offset = unit.offset, count = unit.count;
  const comm::Algorithm algo = algo_;
  if (shard16_ != nullptr) {
    g.buffer16 = std::make_unique<Buffer<bf16>>(unit.count, MemoryTag::params, &tracker_);
    bf16* out = g.buffer16->data();
    const bf16* shard = shard16_;
    if (split_ != nullptr) {
      const SplitShards* split = split_.get();
      const std::vector<BucketPiece> pieces =
          split_at_experts({offset, count}, split->expert_ranges);
      g.ticket = comm_.submit("all_gather " + unit.name, [=](comm::Communicator& c) {
        for (const BucketPiece& p : pieces) {
          bf16* dst = out + (p.offset - offset);
          if (p.expert) {
            gather_from_shards<bf16>(*split->expert_comm, split->expert, p.packed, p.count,
                                     shard + split->dense.shard, dst, comm::Algorithm::ring);
          } else {
            gather_from_shards<bf16>(c, split->dense, p.packed, p.count, shard, dst, algo);
          }
        }
      });
      return;
    }
    g.ticket = comm_.submit("all_gather " + unit.name, [=](comm::Communicator& c) {
      gather_from_shards<bf16>(c, layout, offset, count, shard, out, algo);
    });
    return;
  }
  g.buffer = std::make_unique<Buffer<float>>(unit.count, MemoryTag::params, &tracker_);
  float* out = g.buffer->data();
  const float* shard = shard_;
  if (split_ != nullptr) {
    const SplitShards* split = split_.get();
    const std::vector<BucketPiece> pieces = split_at_experts({offset, count}, split->expert_ranges);
    g.ticket = comm_.submit("all_gather " + unit.name, [=](comm::Communicator& c) {
      for (const BucketPiece& p : pieces) {
        float* dst = out + (p.offset - offset);
        if (p.expert) {
          gather_from_shards<float>(*split->expert_comm, split->expert, p.packed, p.count,
                                    shard + split->dense.shard, dst, comm::Algorithm::ring);
        } else {
          gather_from_shards<float>(c, split->dense, p.packed, p.count, shard, dst, algo);
        }
      }
    });
    return;
  }
  g.ticket = comm_.submit("all_gather " + unit.name, [=](comm::Communicator& c) {
    gather_from_shards<float>(c, layout, offset, count, shard, out, algo);
  });
}

bool GatheredUnits::gathered(int u) const {
  const Gathered& g = gathered_[static_cast<size_t>(u)];
  return g.buffer != nullptr || g.buffer16 != nullptr;
}

int64_t GatheredUnits::ticket(int u) const {
  return gathered_[static_cast<size_t>(u)].ticket;
}

const GatheredUnits::Gathered& GatheredUnits::held(int u) const {
  DTRAIN_CHECK(gathered(u), "ZeRO-3: unit ", units_[static_cast<size_t>(u)].name,
               " is used but not gathered");
  return gathered_[static_cast<size_t>(u)];
}

float* GatheredUnits::data(int u) {
  const Gathered& g = held(u);
  DTRAIN_CHECK(g.buffer != nullptr, "ZeRO-3: unit ", units_[static_cast<size_t>(u)].name,
               " is gathered in bf16");
  return g.buffer->data();
}

bf16* GatheredUnits::data16(int u) {
  const Gathered& g = held(u);
  DTRAIN_CHECK(g.buffer16 != nullptr, "ZeRO-3: unit ", units_[static_cast<size_t>(u)].name,
               " is gathered in fp32");
  return g.buffer16->data();
}

void GatheredUnits::free(int u) {
  gathered_[static_cast<size_t>(u)].buffer.reset();
  gathered_[static_cast<size_t>(u)].buffer16.reset();
}

}  // namespace dtrain::parallel
