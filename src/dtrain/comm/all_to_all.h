// The all-to-all exchange, written once over the Communicator contract like the other
// collectives: every rank sends a different part of its input to every rank. all_to_all moves
// equal blocks (context parallelism's Ulysses switch from sequence- to head-split); all_to_all_v
// moves per-peer counts, any of them zero (mixture-of-experts dispatch and combine).
//
// Algorithms (docs/algorithms.md, "All-to-all"; formulas: plan::all_to_all_traffic and
// plan::all_to_all_v_traffic):
//   pairwise  N-1 steps over send/recv: at step s rank r sends its block for r+s and receives the
//             block of r-s. Every step exchanges a message, empty ones included, so a count that
//             differs between sender and receiver is an error naming both.
//   direct    ranks that share memory (comm/shared_memory.h) read their blocks from the peers'
//             buffers in place between two barriers (a shared window: staged through the slots,
//             segment by segment). Counted as direct.cc counts: bytes read from a peer's memory
//             are received from it; nothing is written into a peer's memory, so nothing is sent.
//   automatic direct where the group shares memory, else pairwise.
//   native    all_to_all only, on MPI (MPI_Ialltoall); not counted, like the other native calls.
// The block a rank keeps for itself is copied locally and counted neither sent nor received.
#pragma once

#include <cstdint>
#include <span>

#include "dtrain/comm/chunks.h"
#include "dtrain/comm/collective_kind.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/core/bf16.h"

namespace dtrain::comm {

// The algorithm an all-to-all runs on `comm` when `requested`: automatic is direct where the group
// shares memory, else pairwise; ring, tree and naive are refused naming the flag, as is direct on a
// group without shared memory.
Algorithm resolve_all_to_all_algorithm(Communicator& comm, Algorithm requested);

// Equal blocks of `block_count` elements: `input` and `output` hold size() blocks each, rank r's
// input block j goes to rank j's output block r. The buffers must not overlap.
template <typename T>
Traffic all_to_all(Communicator& comm, const T* input, T* output, int64_t block_count,
                   Algorithm algo = Algorithm::automatic);

// Per-peer parts: `send[j]` is the part of `input` for rank j, `recv[q]` the part of `output`
// where rank q's part for this rank lands (one entry per rank each; offsets are free, parts may be
// empty, and a rank may send or receive nothing at all). send[j].count on rank r must equal
// recv[r].count on rank j; a mismatch is an error naming both ranks. Output parts must not overlap
// each other or the input.
template <typename T>
Traffic all_to_all_v(Communicator& comm, const T* input, std::span<const Chunk> send, T* output,
                     std::span<const Chunk> recv, Algorithm algo = Algorithm::automatic);

#define DTRAIN_DECLARE_ALL_TO_ALL(T)                                                           \
  extern template Traffic all_to_all<T>(Communicator&, const T*, T*, int64_t, Algorithm);      \
  extern template Traffic all_to_all_v<T>(Communicator&, const T*, std::span<const Chunk>, T*, \
                                          std::span<const Chunk>, Algorithm);
DTRAIN_DECLARE_ALL_TO_ALL(float)
DTRAIN_DECLARE_ALL_TO_ALL(int64_t)
DTRAIN_DECLARE_ALL_TO_ALL(bf16)
#undef DTRAIN_DECLARE_ALL_TO_ALL

}  // namespace dtrain::comm
