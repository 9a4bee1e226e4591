// ZeRO's shard ranges and the collectives that move state between full ranges and shards
// (Rajbhandari et al. 2020). Each of N data-parallel ranks owns one contiguous range of the flat
// parameter buffer, and the same range of the gradient and optimizer-state buffers.
// shard_layout is the one function that computes the ranges, for every stage (and checkpoints):
// ceil(Psi/N) elements per rank, the last range padded, as plan::shard_count (so each rank's
// measured shard bytes equal plan::model_state_bytes for any Psi, divisible by N or not).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dtrain/comm/chunks.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/buffer.h"
#include "dtrain/parallel/comm_thread.h"
#include "dtrain/parallel/data_parallel.h"

namespace dtrain::parallel {

// Example: Psi = 10, N = 4: shard = 3; rank 0 owns [0, 3), 1 [3, 6), 2 [6, 9), 3 [9, 10) and
// holds two padding elements. A bucket [4, 8) splits into the pieces {0,0} {0,2} {2,2} {4,0}.
struct ShardLayout {
  int64_t count = 0;  // Psi: real elements
  int ranks = 1;      // N
  int64_t shard = 0;  // ceil(Psi / N): elements every rank holds, padding included

  int64_t padded_count() const { return shard * ranks; }
  // The real elements rank `rank` owns: {rank * shard, up to shard}, shorter or empty at the end.
  comm::Chunk owned(int rank) const;
  // The owners' pieces of the flat range [offset, offset + n), relative to `offset`: piece i is
  // owned(i) clipped to the range. They tile [0, n) in rank order: a layout for
  // comm::reduce_scatter_v and comm::all_gather_v.
  std::vector<comm::Chunk> pieces(int64_t offset, int64_t n) const;
};

// The shard ranges of `count` elements over `ranks` data-parallel ranks.
ShardLayout shard_layout(int64_t count, int ranks);

// Averages the gradient of the flat range [offset, offset + n) over the group (`grads` holds
// this rank's n elements) into this rank's shard: `shard` is the rank's whole shard (element 0
// is flat element rank * shard). With `accumulate` the result is added to what the shard holds
// (gradient accumulation; `scratch` receives first and grows to the largest piece). `shard` may
// alias the range's own piece of `grads` when not accumulating (ZeRO-1 reduces in place).
// `bf16_wire`: the range is rounded to bf16 and reduced as bf16 (half the bytes; every ring hop
// rounds its partial sum), then widened into the fp32 shard.
comm::Traffic reduce_scatter_to_shard(comm::Communicator& comm, const ShardLayout& layout,
                                      int64_t offset, int64_t n, const float* grads, float* shard,
                                      bool accumulate, Buffer<float>& scratch,
                                      bool bf16_wire = false,
                                      comm::Algorithm algo = comm::Algorithm::ring);

// Mixed precision: the same average of the range into a bf16 shard. `grads` is the range's
// fp32 gradient (stages 2-3's bucket buffers) or its bf16 gradient (stages 0-1 keep the full
// gradient in bf16); the wire is bf16 (`bf16_wire`: every ring hop rounds) or fp32 (bf16
// gradients widened into a communication-tagged copy first). The rank's piece is summed in fp32
// (with what the shard holds when `accumulate`) and rounded once into `shard`. `shard` may lie
// inside `grads` (stage 1): the piece is reduced into a separate buffer first.
comm::Traffic reduce_scatter_to_bf16_shard(comm::Communicator& comm, const ShardLayout& layout,
                                           int64_t offset, int64_t n, const float* grads,
                                           bf16* shard, bool accumulate, bool bf16_wire,
                                           MemoryTracker* tracker,
                                           comm::Algorithm algo = comm::Algorithm::ring);
comm::Traffic reduce_scatter_to_bf16_shard(comm::Communicator& comm, const ShardLayout& layout,
                                           int64_t offset, int64_t n, const bf16* grads,
                                           bf16* shard, bool accumulate, bool bf16_wire,
                                           MemoryTracker* tracker,
                                           comm::Algorithm algo = comm::Algorithm::ring);

// Gathers the flat range [offset, offset + n) from every rank's shard into `out` (n elements).
// `shard` may alias out's own piece (stages 1 and 2 gather the parameters in place). T is float,
// or bf16 for mixed precision's parameters (half the bytes). `algo` (here and in the
// reduce-scatters above): ring or direct (comm/collectives_v.h).
template <typename T>
comm::Traffic gather_from_shards(comm::Communicator& comm, const ShardLayout& layout,
                                 int64_t offset, int64_t n, const T* shard, T* out,
                                 comm::Algorithm algo = comm::Algorithm::ring);
extern template comm::Traffic gather_from_shards<float>(comm::Communicator&, const ShardLayout&,
                                                        int64_t, int64_t, const float*, float*,
                                                        comm::Algorithm);
extern template comm::Traffic gather_from_shards<bf16>(comm::Communicator&, const ShardLayout&,
                                                       int64_t, int64_t, const bf16*, bf16*,
                                                       comm::Algorithm);

// ZeRO-1 and the parameter gathers under expert parallelism, where a rank's shard is not one
// run of the flat buffer: `range` holds the layout's elements [offset, offset + n) (this rank's
// n gradients, or the parameters), and this rank's piece of them is reduced (averaged over the
// group) or gathered from in place, at its own position in `range`.
comm::Traffic reduce_scatter_in_place(comm::Communicator& comm, const ShardLayout& layout,
                                      int64_t offset, int64_t n, float* range,
                                      comm::Algorithm algo = comm::Algorithm::ring);
// T is float, or bf16 for mixed precision's parameters.
template <typename T>
comm::Traffic gather_in_place(comm::Communicator& comm, const ShardLayout& layout, int64_t offset,
                              int64_t n, T* range, comm::Algorithm algo = comm::Algorithm::ring);
extern template comm::Traffic gather_in_place<float>(comm::Communicator&, const ShardLayout&,
                                                     int64_t, int64_t, float*, comm::Algorithm);
extern template comm::Traffic gather_in_place<bf16>(comm::Communicator&, const ShardLayout&,
                                                    int64_t, int64_t, bf16*, comm::Algorithm);
// Mixed precision's ZeRO-1 under expert parallelism: `range` holds the layout's elements
// [offset, offset + n) as bf16 gradients; this rank's piece of their average (over a bf16 wire,
// or an fp32 one widened first) is rounded once into its own position in `range`.
comm::Traffic reduce_scatter_in_place_to_bf16(comm::Communicator& comm, const ShardLayout& layout,
                                              int64_t offset, int64_t n, bf16* range,
                                              bool bf16_wire, MemoryTracker* tracker,
                                              comm::Algorithm algo = comm::Algorithm::ring);

// Expert parallelism with ZeRO (fp32 or mixed precision's bf16 shards): the flat buffer's dense
// elements sharded over the DP group (`dense`, on the communication thread's communicator), its
// expert elements over the expert-DP group (`expert`, on `expert_comm`, ring), each in its packed
// index space (parallel/expert_parallel.h's BucketPiece::packed). A rank's shard buffer is its
// dense shard then its expert shard (`dense.shard + expert.shard` elements).
struct SplitShards {
  ShardLayout dense, expert;
  comm::Communicator* expert_comm = nullptr;
  std::vector<comm::Chunk> expert_ranges;  // the flat ranges of the expert tensors, ascending
};

// ZeRO-3's gathered units: gather(u) allocates a temporary buffer for unit u's weights (charged
// as params) and queues their all-gather from the shards on the communication thread; the
// caller waits for ticket(u) before using data(u) (data16(u) for a bf16 shard), and free(u)
// releases the buffer.
class GatheredUnits {
 public:
  // `shard` is this rank's parameter shard; it must not change while gathers are queued.
  GatheredUnits(const ShardLayout& layout, std::span<const GradUnit> units, const float* shard,
                CommThread& comm, MemoryTracker& tracker,
                comm::Algorithm algo = comm::Algorithm::ring);
  // Mixed precision: the shard and the gathered weights are bf16.
  GatheredUnits(const ShardLayout& layout, std::span<const GradUnit> units, const bf16* shard,
                CommThread& comm, MemoryTracker& tracker,
                comm::Algorithm algo = comm::Algorithm::ring);
  // Expert parallelism: each unit's dense pieces gathered over the DP group, its expert pieces
  // over the expert-DP group, from the two parts of `shard`.
  GatheredUnits(const SplitShards& split, std::span<const GradUnit> units, const float* shard,
                CommThread& comm, MemoryTracker& tracker, comm::Algorithm algo);
  GatheredUnits(const SplitShards& split, std::span<const GradUnit> units, const bf16* shard,
                CommThread& comm, MemoryTracker& tracker, comm::Algorithm algo);
  void gather(int unit);
  bool gathered(int unit) const;  // gather()ed and not freed since
  int64_t ticket(int unit) const;
  float* data(int unit);
  bf16* data16(int unit);
  void free(int unit);

 private:
  struct Gathered {
    std::unique_ptr<Buffer<float>> buffer;
    std::unique_ptr<Buffer<bf16>> buffer16;
    int64_t ticket = -1;
  };
  const Gathered& held(int unit) const;
  ShardLayout layout_;
  std::unique_ptr<SplitShards> split_;
  std::vector<GradUnit> units_;
  const float* shard_ = nullptr;
  const bf16* shard16_ = nullptr;
  CommThread& comm_;
  MemoryTracker& tracker_;
  comm::Algorithm algo_;
  std::vector<Gathered> gathered_;
};

}  // namespace dtrain::parallel
