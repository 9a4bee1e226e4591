// Collectives over caller-chosen chunks, as MPI's Reduce_scatter (with counts) and Allgatherv:
// rank i's chunk is chunks[i] instead of chunk_of's balanced one. ZeRO needs them: each rank owns
// one contiguous range of the flat buffer, so a gradient bucket or a layer's weights split into
// the owners' pieces, which may be unequal or empty. Both run the ring of algorithms/ring.cc or
// the direct algorithm of algorithms/direct.cc (Algorithm::automatic: direct where the group
// shares memory, else ring; tree and naive are not offered here) and return the Traffic this
// rank measured, like collectives.h.
//
// Traffic: a ring reduce-scatter sends every chunk but this rank's own once; a ring all-gather
// every chunk but rank (r+1) mod N's. Over a buffer tiled by equal chunks that is (N-1)/N of it.
#pragma once

#include <cstdint>
#include <span>

#include "dtrain/comm/chunks.h"
#include "dtrain/comm/collective_kind.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/core/bf16.h"

namespace dtrain::comm {

// `chunks` has one entry per rank; they tile the buffer in rank order: chunks[0].offset == 0 and
// chunks[i+1].offset == chunks[i].offset + chunks[i].count (empty chunks allowed).
// reduce_scatter_v reads the whole tiled input and writes this rank's chunk to `output`, which
// may alias input + chunks[rank].offset. avg divides by the group size.
template <typename T>
Traffic reduce_scatter_v(Communicator& comm, const T* input, T* output,
                         std::span<const Chunk> chunks, ReduceOp op,
                         Algorithm algo = Algorithm::ring);

// Reads this rank's chunk from `input` (which may alias output + chunks[rank].offset) and writes
// every chunk to `output`.
template <typename T>
Traffic all_gather_v(Communicator& comm, const T* input, T* output, std::span<const Chunk> chunks,
                     Algorithm algo = Algorithm::ring);

#define DTRAIN_DECLARE_COLLECTIVES_V(T)                                                            \
  extern template Traffic reduce_scatter_v<T>(Communicator&, const T*, T*, std::span<const Chunk>, \
                                              ReduceOp, Algorithm);                                \
  extern template Traffic all_gather_v<T>(Communicator&, const T*, T*, std::span<const Chunk>,     \
                                          Algorithm);
DTRAIN_DECLARE_COLLECTIVES_V(float)
DTRAIN_DECLARE_COLLECTIVES_V(int64_t)
DTRAIN_DECLARE_COLLECTIVES_V(bf16)
#undef DTRAIN_DECLARE_COLLECTIVES_V

}  // namespace dtrain::comm
