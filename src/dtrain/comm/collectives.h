// Collectives over any Communicator, written once over send/recv (see docs/algorithms.md for
// each algorithm's steps and bytes on the wire). Every call runs inside an OperationScope, so
// a failure names the collective and its sequence number, and returns the Traffic this rank
// measured for the call: the steps it ran and the bytes it sent and received.
//
// Element types: float (sum, avg, max), bf16 (sum, avg, max: each hop adds in fp32 and rounds
// to bf16; half float's bytes on the wire) and int64_t (sum, max; for counters).
// Buffers: all_reduce and broadcast work in place. reduce_scatter reads `count` elements and
// writes this rank's chunk (chunk_of(count, size, rank), see chunks.h); all_gather reads this
// rank's chunk and writes all `count` elements. `output` may alias the matching part of `input`.
#pragma once

#include <cstdint>

#include "dtrain/comm/chunks.h"
#include "dtrain/comm/collective_kind.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/core/bf16.h"

namespace dtrain::comm {

// The algorithm a call of `bytes` per rank runs on `comm` when `requested`: automatic resolves
// to direct where the group shares memory (comm/shared_memory.h), else to choose_algorithm's
// tree or ring by size; direct on a group without shared memory is an error naming the flag.
Algorithm resolve_algorithm(Communicator& comm, Algorithm requested, long long bytes);

template <typename T>
Traffic broadcast(Communicator& comm, T* data, int64_t count, int root,
                  Algorithm algo = Algorithm::automatic);

// The result lands in `output` on the root only (other ranks may pass nullptr).
template <typename T>
Traffic reduce(Communicator& comm, const T* input, T* output, int64_t count, ReduceOp op, int root,
               Algorithm algo = Algorithm::automatic);

template <typename T>
Traffic all_reduce(Communicator& comm, T* data, int64_t count, ReduceOp op,
                   Algorithm algo = Algorithm::automatic);

template <typename T>
Traffic reduce_scatter(Communicator& comm, const T* input, T* output, int64_t count, ReduceOp op,
                       Algorithm algo = Algorithm::automatic);

template <typename T>
Traffic all_gather(Communicator& comm, const T* input, T* output, int64_t count,
                   Algorithm algo = Algorithm::automatic);

#define DTRAIN_DECLARE_COLLECTIVES(T)                                                       \
  extern template Traffic broadcast<T>(Communicator&, T*, int64_t, int, Algorithm);         \
  extern template Traffic reduce<T>(Communicator&, const T*, T*, int64_t, ReduceOp, int,    \
                                    Algorithm);                                             \
  extern template Traffic all_reduce<T>(Communicator&, T*, int64_t, ReduceOp, Algorithm);   \
  extern template Traffic reduce_scatter<T>(Communicator&, const T*, T*, int64_t, ReduceOp, \
                                            Algorithm);                                     \
  extern template Traffic all_gather<T>(Communicator&, const T*, T*, int64_t, Algorithm);
DTRAIN_DECLARE_COLLECTIVES(float)
DTRAIN_DECLARE_COLLECTIVES(int64_t)
DTRAIN_DECLARE_COLLECTIVES(bf16)
#undef DTRAIN_DECLARE_COLLECTIVES

}  // namespace dtrain::comm
