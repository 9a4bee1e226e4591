// Closed-form traffic of one collective call on one rank: how many communication rounds
// (steps) it runs and how many bytes it sends and receives. These are the formulas of
// docs/algorithms.md; the engine's tests compare its measured counters with them, and the
// planner's time model (comm_model.h) is built on them.
//
// `bytes` is S as nccl-tests defines it: the buffer size for broadcast, reduce and all_reduce;
// the input per rank for reduce_scatter (each rank keeps S/N); the output per rank for
// all_gather (each rank contributes S/N). Ring and tree chunk S into N pieces; when S/N is not
// a whole number of elements the engine's chunks differ by one element, so its bytes differ
// from these by less than one element per step.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "dtrain/comm/collective_kind.h"

namespace dtrain::plan {

// Bytes moved: what every report gives per rank (docs/algorithms.md, "Bytes moved"), the bytes
// a rank sends (as messages, or written into a peer's memory) plus those it reads in place from
// a peer's memory. Each byte that passes between two ranks counts once, on the rank that moves
// it, so the sum over ranks is the traffic between them whatever the algorithm; a message-passing
// algorithm moves what it sends. comm::Traffic::bytes_moved() is the engine's counter of it.
struct CollectiveTraffic {
  int64_t steps = 0;
  double bytes_sent = 0;
  double bytes_received = 0;
  double bytes_read = 0;  // of bytes_received: read in place (the direct algorithm)
  double bytes_moved() const { return bytes_sent + bytes_read; }
};

// Per-rank traffic of `op` run with `algo` (not automatic: resolve it first with
// comm::choose_algorithm) over `world` ranks; `rank` and `root` matter for rooted algorithms.
CollectiveTraffic collective_traffic(comm::CollectiveOp op, comm::Algorithm algo, double bytes,
                                     int world, int rank = 0, int root = 0);

// The direct algorithm (comm/algorithms/direct.cc) on ranks that share memory: bytes_received
// (and bytes_read) is what this rank reads from other ranks' memory, bytes_sent what it writes
// into it, so it moves their sum: (N-1)/N x S for reduce_scatter and all_gather and
// 2(N-1)/N x S for a large all_reduce, as a ring sends. Each
// of the 2 x `segments` steps is a barrier. An all_reduce of up to comm::kDirectExchangeMaxBytes
// takes the latency path instead: one step, (N-1) x S read, nothing written. Larger all_reduce:
// (N-1)/N x S each way (a rank reduces
// its 1/N slice from the N-1 peers and writes the result back into them), reduce_scatter and
// all_gather: (N-1)/N x S read, nothing written; broadcast: S read by every rank but the root;
// reduce: (N-1)/N x S read, S/N written into the root's output by every other rank.
// A shared address space runs the call as one segment (collective_traffic's figure); a shared
// window of slot_elements per rank runs direct_segments of them.
CollectiveTraffic direct_traffic(comm::CollectiveOp op, double bytes, int world, int rank = 0,
                                 int root = 0, int64_t segments = 1);
// Segments of a direct call of `count` elements through slots of `slot_elements` (0: a shared
// address space, one segment).
int64_t direct_segments(comm::CollectiveOp op, int64_t count, int world, int64_t slot_elements);

// The all-to-all (comm/all_to_all.h) on one rank. S is nccl-tests' alltoall size: the input per
// rank, N blocks of S/N bytes. pairwise: N-1 steps, every block but the rank's own sent and
// received, (N-1)/N x S each way. direct: 2 x `segments` steps (barriers), (N-1)/N x S read from
// the peers (received), nothing written into them (sent 0). collective_traffic(all_to_all, ...)
// gives the same for one segment.
CollectiveTraffic all_to_all_traffic(comm::Algorithm algo, double bytes, int world,
                                     int64_t segments = 1);
// The same with per-peer counts (all_to_all_v): `sent_bytes[j]` is what this rank sends to rank j,
// `received_bytes[q]` what it receives from rank q (the entry at `rank` is its own part, copied
// locally, counted neither way). pairwise: N-1 steps whatever the counts (empty parts travel as
// empty messages), the sums over the other ranks each way. direct: 2 x `segments` steps, the sum
// received, nothing sent. One rank: nothing. Its time: comm_model.h's all_to_all_v_cost.
CollectiveTraffic all_to_all_v_traffic(comm::Algorithm algo, std::span<const double> sent_bytes,
                                       std::span<const double> received_bytes, int rank,
                                       int64_t segments = 1);
// Segments of a direct all-to-all through slots of `slot_bytes` (0: a shared address space, one
// segment) when the longest part any rank sends to another is `longest_part` elements of
// `element_bytes`: the slot holds a header and one piece per peer
// (comm::direct_all_to_all_piece); at least one segment, even when every part is empty.
int64_t direct_all_to_all_segments(int64_t longest_part, int world, int64_t slot_bytes,
                                   int64_t element_bytes);

// nccl-tests' bus-bandwidth factor: busbw = algbw * factor. 2(N-1)/N for all_reduce,
// (N-1)/N for reduce_scatter, all_gather and all_to_all, 1 for broadcast and reduce.
double bus_bandwidth_factor(comm::CollectiveOp op, int world);

// The collectives nccl-tests reports, under its names (alltoall: comm::CollectiveOp::all_to_all).
enum class NcclTestOp { all_reduce, reduce_scatter, all_gather, broadcast, reduce, alltoall };
std::optional<NcclTestOp> parse_nccl_test_op(std::string_view name);
std::string_view name(NcclTestOp op);
inline constexpr std::string_view kNcclTestOpNames =
    "all_reduce, reduce_scatter, all_gather, broadcast, reduce, alltoall";

// nccl-tests' PERFORMANCE.md: algbw = S / t; busbw = algbw x factor, the factor being
// 2(n-1)/n for all_reduce, (n-1)/n for reduce_scatter, all_gather and alltoall, 1 for
// broadcast and reduce, so busbw reads against the link's bandwidth whatever the rank count.
double bus_bandwidth_factor(NcclTestOp op, int world);

// NCCL's algorithms, as NCCL_ALGO names them (case-insensitive, as NCCL reads it).
enum class NcclAlgo { ring, tree, collnet_direct, collnet_chain, nvls, nvls_tree, pat };
std::optional<NcclAlgo> parse_nccl_algo(std::string_view name);  // "NVLSTree", "nvls_tree", ...
std::string_view name(NcclAlgo algo);
inline constexpr std::string_view kNcclAlgoNames =
    "ring, tree, collnetdirect, collnetchain, nvls, nvlstree, pat";

// The bus factor of `op` when NCCL ran `algo`. nccl-tests' master uses 2(n-1)/n for every
// all-reduce whatever the algorithm (src/all_reduce.cu, AllReduceGetBw). Its pull request #239
// ("fix: nvls all reduce correction factor", commit 4ec7c79, July 2024; not merged) makes the
// all-reduce factor (n-1)/(n+1) when NCCL_ALGO is exactly "NVLS" or "NVLSTREE":
//     if (nccl_algo != nullptr && (strcmp(nccl_algo, "NVLS") == 0 ||
//                                  strcmp(nccl_algo, "NVLSTREE") == 0)) {
//       factor = ((double)(nranks - 1)) / ((double)(nranks + 1));
// and adds "AllReduce (In-Network Reduction): (n-1)/(n+1)" to doc/PERFORMANCE.md. That factor
// is what this returns for all_reduce under nvls and nvls_tree; every other op and algorithm
// keeps bus_bandwidth_factor(op, world).
double bus_bandwidth_factor(NcclTestOp op, int world, NcclAlgo algo);

struct CollectiveBandwidth {
  double algbw = 0;  // bytes/s: S / t
  double busbw = 0;  // bytes/s: algbw x factor
};
// From a measured time: `bytes` is S as nccl-tests defines it (collective_traffic above).
CollectiveBandwidth measured_bandwidth(NcclTestOp op, double bytes, int world, double seconds,
                                       NcclAlgo algo = NcclAlgo::ring);

// The ideal time of `op` on a ring whose every link carries `link_bytes_per_s` per direction
// with `latency_s` per step: busbw equals the link's bandwidth, so t = S x factor / bandwidth,
// plus the ring's steps x latency (2(n-1) for all_reduce, n-1 for the others).
double ideal_ring_seconds(NcclTestOp op, double bytes, int world, double link_bytes_per_s,
                          double latency_s);

// An all-to-all of S bytes per rank (nccl-tests' alltoall size: N blocks of S/N) on `world` ranks
// placed node-major on nodes of `gpus_per_node` (node k holds ranks k x g, ..., the last node
// perhaps fewer): what `rank` sends over each link class. It sends every block but its own,
// (N-1)/N x S: the blocks of the n-1 other ranks on its node, (n-1)/N x S, inside the node, and
// those of the N-n ranks on other nodes, (N-n)/N x S, across nodes. It receives as much.
struct AllToAllLinkTraffic {
  double intra_node_bytes = 0;
  double inter_node_bytes = 0;
  int intra_node_peers = 0;  // n - 1
  int inter_node_peers = 0;  // N - n
};
AllToAllLinkTraffic all_to_all_link_traffic(double bytes, int world, int gpus_per_node, int rank);

// The ideal time of that all-to-all: every rank exchanges with each peer directly, so the two link
// classes carry their shares at once, each block paying its link's latency: for a rank,
// max(intra peers x intra latency + intra bytes / intra bandwidth, the same across nodes). The
// slowest rank sets the time (on the node with the fewest ranks, which sends the most across).
// Inside one node it is the ring's: (N-1)/N x S / bandwidth + (N-1) x latency. An all-to-all
// reduces nothing, so no in-network reduction shortens it.
struct IdealAllToAll {
  double seconds = 0;
  AllToAllLinkTraffic slowest;    // the traffic of the rank that sets the time
  bool inter_node_bound = false;  // the inter-node share sets it
};
IdealAllToAll ideal_all_to_all(double bytes, int world, int gpus_per_node, double intra_bytes_per_s,
                               double intra_latency_s, double inter_bytes_per_s,
                               double inter_latency_s);

}  // namespace dtrain::plan
