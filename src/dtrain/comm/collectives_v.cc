// reduce_scatter_v and all_gather_v: check the chunks, short-circuit one rank and empty buffers,
// open the OperationScope, and run the ring over the caller's chunks.
#include "dtrain/comm/collectives_v.h"

#include <cstring>
#include <type_traits>

#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/collectives.h"

namespace dtrain::comm {
namespace {

// Returns the number of elements the chunks tile.
int64_t check_chunks(const Communicator& comm, std::span<const Chunk> chunks, CollectiveOp what) {
  DTRAIN_CHECK(static_cast<int>(chunks.size()) == comm.size(), name(what), "_v: ", chunks.size(),
               " chunks for a group of ", comm.size(), " ranks");
  int64_t next = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    DTRAIN_CHECK(chunks[i].offset == next && chunks[i].count >= 0, name(what), "_v: chunk ", i,
                 " is [", chunks[i].offset, ", +", chunks[i].count,
                 ") but the chunks must tile the buffer in rank order from 0 (expected offset ",
                 next, ")");
    next += chunks[i].count;
  }
  return next;
}

// Automatic, ring or direct (checked against the group: collectives.cc's resolve_algorithm).
Algorithm resolve_v(Communicator& comm, Algorithm algo, CollectiveOp what) {
  algo = resolve_algorithm(comm, algo, 0);
  if (algo == Algorithm::tree)
    algo = Algorithm::ring;  // automatic on a group without shared memory
  DTRAIN_CHECK(algo == Algorithm::ring || algo == Algorithm::direct, name(what), "_v: algorithm ",
               name(algo), " is not offered (ring or direct)");
  return algo;
}

}  // namespace

template <typename T>
Traffic reduce_scatter_v(Communicator& comm, const T* input, T* output,
                         std::span<const Chunk> chunks, ReduceOp op, Algorithm algo) {
  const int64_t count = check_chunks(comm, chunks, CollectiveOp::reduce_scatter);
  if constexpr (std::is_integral_v<T>) {
    DTRAIN_CHECK(op != ReduceOp::avg, "reduce_scatter_v: avg is defined for float32 only");
  }
  algo = resolve_v(comm, algo, CollectiveOp::reduce_scatter);
  OperationScope scope(comm,
                       str("reduce_scatter_v #", comm.next_sequence(), " (", name(algo), ")"));
  const int n = comm.size();
  const Chunk mine = chunks[static_cast<size_t>(comm.rank())];
  if (count == 0) return scope.traffic();
  if (n == 1) {
    if (output != input) std::memmove(output, input, count * sizeof(T));
    return scope.traffic();
  }
  if (algo == Algorithm::direct) {
    detail::direct_reduce_scatter_chunks(comm, scope, input, output, chunks, op);
    return scope.traffic();  // averaged already
  }
  detail::ring_reduce_scatter_chunks(comm, scope, input, output, chunks, op,
                                     detail::kTagReduceScatterV);
  // bf16 is not a std floating-point type: its average scales by a float factor, as
  // all_reduce's does (before, a ring reduce_scatter_v<bf16> with avg returned the sum).
  if (op == ReduceOp::avg) {
    if constexpr (std::is_same_v<T, bf16>) {
      detail::scale(output, mine.count, 1.0f / static_cast<float>(n));
    } else if constexpr (std::is_floating_point_v<T>) {
      detail::scale(output, mine.count, static_cast<T>(1) / static_cast<T>(n));
    }
  }
  return scope.traffic();
}

template <typename T>
Traffic all_gather_v(Communicator& comm, const T* input, T* output, std::span<const Chunk> chunks,
                     Algorithm algo) {
  const int64_t count = check_chunks(comm, chunks, CollectiveOp::all_gather);
  algo = resolve_v(comm, algo, CollectiveOp::all_gather);
  OperationScope scope(comm, str("all_gather_v #", comm.next_sequence(), " (", name(algo), ")"));
  const Chunk mine = chunks[static_cast<size_t>(comm.rank())];
  if (output + mine.offset != input && mine.count > 0) {
    std::memmove(output + mine.offset, input, mine.count * sizeof(T));
  }
  if (count == 0 || comm.size() == 1) return scope.traffic();
  if (algo == Algorithm::direct) {
    detail::direct_all_gather_chunks(comm, scope, output + mine.offset, output, chunks);
    return scope.traffic();
  }
  detail::ring_all_gather_chunks_in_place(comm, scope, output, chunks, detail::kTagAllGatherV);
  return scope.traffic();
}

#define DTRAIN_INSTANTIATE_COLLECTIVES_V(T)                                                 \
  template Traffic reduce_scatter_v<T>(Communicator&, const T*, T*, std::span<const Chunk>, \
                                       ReduceOp, Algorithm);                                \
  template Traffic all_gather_v<T>(Communicator&, const T*, T*, std::span<const Chunk>, Algorithm);
DTRAIN_INSTANTIATE_COLLECTIVES_V(float)
DTRAIN_INSTANTIATE_COLLECTIVES_V(int64_t)
DTRAIN_INSTANTIATE_COLLECTIVES_V(bf16)

}  // namespace dtrain::comm
