// shard_layout, the moves between full ranges and shards over comm's _v collectives, and
// ZeRO-3's gathered units.
#include "dtrain/parallel/zero.h"

#include <algorithm>
#include <vector>

#include "dtrain/comm/collectives_v.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"

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
                                      bool accumulate, Buffer<float>& scratch, bool bf16_wire) {
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
    const comm::Traffic t =
        comm::reduce_scatter_v<bf16>(comm, wire.data(), piece.data(), pieces, comm::ReduceOp::avg);
    for (int64_t i = 0; i < mine.count; ++i) {
      const float g = to_float(piece[static_cast<size_t>(i)]);
      dst[i] = accumulate ? dst[i] + g : g;
    }
    return t;
  }
  if (!accumulate) {
    return comm::reduce_scatter_v<float>(comm, grads, dst, pieces, comm::ReduceOp::avg);
  }
  if (scratch.size() < mine.count) scratch.resize(mine.count);
  const comm::Traffic t =
      comm::reduce_scatter_v<float>(comm, grads, scratch.data(), pieces, comm::ReduceOp::avg);
  for (int64_t i = 0; i < mine.count; ++i) dst[i] += scratch[i];
  return t;
}

comm::Traffic gather_from_shards(comm::Communicator& comm, const ShardLayout& layout,
                                 int64_t offset, int64_t n, const float* shard, float* out) {
  const std::vector<comm::Chunk> pieces = layout.pieces(offset, n);
  const int r = comm.rank();
  const comm::Chunk mine = pieces[static_cast<size_t>(r)];
  const float* src = shard + (mine.count > 0 ? shard_position(layout, r, offset, mine) : 0);
  return comm::all_gather_v<float>(comm, src, out, pieces);
}

GatheredUnits::GatheredUnits(const ShardLayout& layout, std::span<const GradUnit> units,
                             const float* shard, CommThread& comm, MemoryTracker& tracker)
    : layout_(layout),
      units_(units.begin(), units.end()),
      shard_(shard),
      comm_(comm),
      tracker_(tracker),
      gathered_(units.size()) {}

void GatheredUnits::gather(int u) {
  const GradUnit& unit = units_[static_cast<size_t>(u)];
  Gathered& g = gathered_[static_cast<size_t>(u)];
  DTRAIN_CHECK(g.buffer == nullptr, "ZeRO-3: unit ", unit.name, " is already gathered");
  g.buffer = std::make_unique<Buffer<float>>(unit.count, MemoryTag::params, &tracker_);
  float* out = g.buffer->data();
  const float* shard = shard_;
  const ShardLayout layout = layout_;
  const int64_t offset = unit.offset, count = unit.count;
  g.ticket = comm_.submit("all_gather " + unit.name, [=](comm::Communicator& c) {
    gather_from_shards(c, layout, offset, count, shard, out);
  });
}

bool GatheredUnits::gathered(int u) const {
  return gathered_[static_cast<size_t>(u)].buffer != nullptr;
}

int64_t GatheredUnits::ticket(int u) const {
  return gathered_[static_cast<size_t>(u)].ticket;
}

float* GatheredUnits::data(int u) {
  const Gathered& g = gathered_[static_cast<size_t>(u)];
  DTRAIN_CHECK(g.buffer != nullptr, "ZeRO-3: unit ", units_[static_cast<size_t>(u)].name,
               " is used but not gathered");
  return g.buffer->data();
}

void GatheredUnits::free(int u) {
  gathered_[static_cast<size_t>(u)].buffer.reset();
}

}  // namespace dtrain::parallel
