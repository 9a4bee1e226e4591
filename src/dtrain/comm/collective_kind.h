// The names shared by the engine's collectives and the planner's cost model: which collective,
// which algorithm, which reduction. Header-only, so plan/ can use it without a backend.
#pragma once

#include <optional>
#include <string_view>

namespace dtrain::comm {

// all_to_all: rank r sends block j of its input to rank j and receives rank q's block r into
// block q of its output (comm/all_to_all.h; all_to_all_v there too, with per-peer counts).
enum class CollectiveOp { broadcast, reduce, all_reduce, reduce_scatter, all_gather, all_to_all };

// ring: bandwidth-optimal, 2(N-1) steps for all-reduce (reduce-scatter + all-gather).
// naive: everything through one root (reduce to the root, then broadcast).
// tree: latency-optimal, O(log N) steps: recursive doubling for all-reduce, Bruck for
//   all-gather, binomial trees for broadcast / reduce / reduce-scatter (reduce, then scatter).
// automatic: tree for small messages, ring for large ones (see choose_algorithm).
// direct: ranks that share memory read their peers' buffers in place (comm/shared_memory.h):
//   each reduces its slice straight from every input and writes the result once into every
//   output; two flag barriers, no messages. Only where the backend has a shared-memory group
//   (threads; MPI ranks all on one node, through a shared window).
// pairwise: the all-to-all's exchange over send/recv: N-1 steps, at step s rank r sends its
//   block for r+s and receives the block of r-s (the all-to-all offers pairwise and direct).
// native: the backend's own implementation (MPI_Allreduce, ...); only the MPI backend has one,
//   and its bytes are MPI's business: the communicator does not see (or count) them.
enum class Algorithm { automatic, ring, naive, tree, direct, native, pairwise };

enum class ReduceOp { sum, avg, max };

constexpr std::string_view name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::broadcast:
      return "broadcast";
    case CollectiveOp::reduce:
      return "reduce";
    case CollectiveOp::all_reduce:
      return "all_reduce";
    case CollectiveOp::reduce_scatter:
      return "reduce_scatter";
    case CollectiveOp::all_gather:
      return "all_gather";
    case CollectiveOp::all_to_all:
      return "all_to_all";
  }
  return "?";
}

constexpr std::string_view name(Algorithm algo) {
  switch (algo) {
    case Algorithm::automatic:
      return "auto";
    case Algorithm::ring:
      return "ring";
    case Algorithm::naive:
      return "naive";
    case Algorithm::tree:
      return "tree";
    case Algorithm::direct:
      return "direct";
    case Algorithm::native:
      return "native";
    case Algorithm::pairwise:
      return "pairwise";
  }
  return "?";
}

constexpr std::string_view name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

inline std::optional<CollectiveOp> parse_collective_op(std::string_view s) {
  for (CollectiveOp op :
       {CollectiveOp::broadcast, CollectiveOp::reduce, CollectiveOp::all_reduce,
        CollectiveOp::reduce_scatter, CollectiveOp::all_gather, CollectiveOp::all_to_all}) {
    if (s == name(op)) return op;
  }
  return std::nullopt;
}

inline std::optional<Algorithm> parse_algorithm(std::string_view s) {
  for (Algorithm a : {Algorithm::automatic, Algorithm::ring, Algorithm::naive, Algorithm::tree,
                      Algorithm::direct, Algorithm::native, Algorithm::pairwise}) {
    if (s == name(a)) return a;
  }
  return std::nullopt;
}

inline std::optional<ReduceOp> parse_reduce_op(std::string_view s) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
    if (s == name(op)) return op;
  }
  return std::nullopt;
}

// A direct all_reduce of up to this many bytes takes the latency path: every rank copies its
// data into its small slot, posts a flag, waits for everyone's, and reduces all of it itself
// (one synchronisation instead of two barriers; N - 1 peers' whole buffers read instead of
// 1/N of each). Backends' small slots hold at least this much. Measured on 2 threads of a
// 2-core VM: the two paths cross between 8 and 16 KiB (1.5 us each at 8 KiB; 0.6 against
// 1.1 us at 64 bytes, 1.2 against 1.3 us at 4 KiB).
inline constexpr long long kDirectExchangeMaxBytes = 8 * 1024;

// The direct all-to-all through a shared window (MPI ranks on one node): a rank's slot starts
// with a header of its send count to each peer (8 bytes each, whole cache lines), and the rest
// holds one piece per peer of this many elements in each segment. Shared by the engine
// (algorithms/direct_all_to_all.cc) and the planner's segment count (cost/collective_cost.h).
constexpr long long direct_all_to_all_header_bytes(int world) {
  return (8LL * world + 63) / 64 * 64;
}
constexpr long long direct_all_to_all_piece(long long slot_bytes, int world,
                                            long long element_bytes) {
  return (slot_bytes - direct_all_to_all_header_bytes(world)) / world / element_bytes;
}

// Messages up to this size per rank use the latency-optimal tree under Algorithm::automatic.
inline constexpr long long kTreeMaxBytes = 64 * 1024;

constexpr Algorithm choose_algorithm(Algorithm requested, long long bytes, int world) {
  if (requested != Algorithm::automatic) return requested;
  (void)world;
  return bytes <= kTreeMaxBytes ? Algorithm::tree : Algorithm::ring;
}

}  // namespace dtrain::comm
