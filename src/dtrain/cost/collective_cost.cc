// collective_traffic: one case per (collective, algorithm), each a few lines of closed form.
// The shapes of the algorithms are described in comm/collectives.cc and docs/algorithms.md.
#include "dtrain/cost/collective_cost.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "dtrain/core/check.h"

namespace dtrain::plan {
namespace {

using comm::Algorithm;
using comm::CollectiveOp;

int floor_log2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}
int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// Binomial tree rooted at relative rank 0 (MPICH's shape): rank r receives from
// r - lowbit(r) and sends to r + 2^j for every 2^j < lowbit(r) (any j for r = 0) below N.
int binomial_children(int r, int world) {
  int limit = 1;
  while (limit < world) limit <<= 1;
  const int low = r == 0 ? limit : (r & -r);
  int children = 0;
  for (int mask = 1; mask < low; mask <<= 1) {
    if (r + mask < world) ++children;
  }
  return children;
}

// Recursive doubling over N ranks: with p the largest power of two <= N and rem = N - p, the
// ranks below 2*rem pair up first (even sends its data to odd, then waits for the result).
CollectiveTraffic recursive_doubling_all_reduce(double s, int world, int rank) {
  const int p = 1 << floor_log2(world);
  const int rem = world - p;
  const int rounds = floor_log2(world);
  if (rank < 2 * rem) {
    if (rank % 2 == 0) return {2, s, s};  // hands its data over, gets the result back
    return {rounds + 2, s * (rounds + 1), s * (rounds + 1)};
  }
  return {rounds, s * rounds, s * rounds};
}

}  // namespace

CollectiveTraffic collective_traffic(CollectiveOp op, Algorithm algo, double s, int world, int rank,
                                     int root) {
  DTRAIN_CHECK(world >= 1, "collective_traffic: world must be >= 1, got ", world);
  DTRAIN_CHECK(rank >= 0 && rank < world && root >= 0 && root < world, "collective_traffic: rank ",
               rank, " / root ", root, " outside world ", world);
  DTRAIN_CHECK(algo != Algorithm::automatic,
               "collective_traffic: resolve Algorithm::automatic with comm::choose_algorithm");
  DTRAIN_CHECK(algo != Algorithm::native,
               "collective_traffic: Algorithm::native is the backend's own (MPI's) algorithm, "
               "whose traffic is not modeled");
  if (op == CollectiveOp::all_to_all) return all_to_all_traffic(algo, s, world);
  DTRAIN_CHECK(algo != Algorithm::pairwise,
               "collective_traffic: pairwise is the all-to-all's algorithm, not ", comm::name(op),
               "'s");
  if (world == 1 || s <= 0) return {};
  const double n = world;
  const double chunk = s / n;
  const bool is_root = rank == root;
  const int rel = (rank - root + world) % world;

  switch (algo) {
    case Algorithm::ring:
      switch (op) {
        case CollectiveOp::reduce_scatter:
        case CollectiveOp::all_gather:
          return {world - 1, (n - 1) * chunk, (n - 1) * chunk};
        case CollectiveOp::all_reduce:
          return {2 * (world - 1), 2 * (n - 1) * chunk, 2 * (n - 1) * chunk};
        case CollectiveOp::broadcast:
          // The root scatters one chunk to each rank, then a ring all-gather.
          if (is_root) return {2 * (world - 1), 2 * (n - 1) * chunk, (n - 1) * chunk};
          return {world, (n - 1) * chunk, s};
        case CollectiveOp::reduce:
          // A ring reduce-scatter, then every rank sends its reduced chunk to the root.
          if (is_root) return {2 * (world - 1), (n - 1) * chunk, 2 * (n - 1) * chunk};
          return {world, s, (n - 1) * chunk};
        case CollectiveOp::all_to_all:  // all_to_all_traffic, above
          break;
      }
      break;
    case Algorithm::naive:
      switch (op) {
        case CollectiveOp::broadcast:
          return is_root ? CollectiveTraffic{world - 1, (n - 1) * s, 0}
                         : CollectiveTraffic{1, 0, s};
        case CollectiveOp::reduce:
          return is_root ? CollectiveTraffic{world - 1, 0, (n - 1) * s}
                         : CollectiveTraffic{1, s, 0};
        case CollectiveOp::all_reduce:  // reduce to the root, then broadcast from it
          return is_root ? CollectiveTraffic{2 * (world - 1), (n - 1) * s, (n - 1) * s}
                         : CollectiveTraffic{2, s, s};
        case CollectiveOp::reduce_scatter:  // reduce to the root, which sends each its chunk
          return is_root ? CollectiveTraffic{2 * (world - 1), (n - 1) * chunk, (n - 1) * s}
                         : CollectiveTraffic{2, s, chunk};
        case CollectiveOp::all_gather:  // gather chunks at the root, then broadcast the whole
          return is_root ? CollectiveTraffic{2 * (world - 1), (n - 1) * s, (n - 1) * chunk}
                         : CollectiveTraffic{2, chunk, s};
        case CollectiveOp::all_to_all:
          break;
      }
      break;
    case Algorithm::tree:
      switch (op) {
        case CollectiveOp::broadcast: {
          const int children = binomial_children(rel, world);
          const int parent = rel == 0 ? 0 : 1;
          return {children + parent, children * s, parent * s};
        }
        case CollectiveOp::reduce: {
          const int children = binomial_children(rel, world);
          const int parent = rel == 0 ? 0 : 1;
          return {children + parent, parent * s, children * s};
        }
        case CollectiveOp::all_reduce:
        case CollectiveOp::reduce_scatter:  // recursive-doubling all-reduce, keep own chunk
          return recursive_doubling_all_reduce(s, world, rank);
        case CollectiveOp::all_gather:  // Bruck: ceil(log2 N) rounds, N-1 chunks in all
          return {ceil_log2(world), (n - 1) * chunk, (n - 1) * chunk};
        case CollectiveOp::all_to_all:
          break;
      }
      break;
    case Algorithm::direct:
      return direct_traffic(op, s, world, rank, root);
    case Algorithm::automatic:
    case Algorithm::native:
    case Algorithm::pairwise:
      break;
  }
  throw Error("collective_traffic: unknown collective or algorithm");
}

int64_t direct_segments(CollectiveOp op, int64_t count, int world, int64_t slot_elements) {
  if (count <= 0 || world <= 1) return 0;
  if (slot_elements <= 0) return 1;
  const int64_t longest_chunk = (count + world - 1) / world;
  switch (op) {
    case CollectiveOp::reduce_scatter: {
      // A segment holds one piece of every rank's chunk.
      const int64_t piece = slot_elements / world;
      DTRAIN_CHECK(piece > 0, "direct_segments: a slot of ", slot_elements,
                   " elements holds no piece for each of ", world, " ranks");
      return (longest_chunk + piece - 1) / piece;
    }
    case CollectiveOp::all_gather:  // a segment is a piece of each chunk, in its owner's slot
      return (longest_chunk + slot_elements - 1) / slot_elements;
    case CollectiveOp::all_to_all:
      throw Error(
          "direct_segments: the all-to-all's slots hold a header; use "
          "direct_all_to_all_segments");
    default:
      return (count + slot_elements - 1) / slot_elements;
  }
}

namespace {

// direct_traffic's figures before bytes_read is filled in.
CollectiveTraffic direct_sent_received(CollectiveOp op, double s, int world, int rank, int root,
                                       int64_t segments) {
  const double n = world;
  const double peers_share = (n - 1) / n * s;  // every peer's part of the slice this rank owns
  const int64_t steps = 2 * segments;
  switch (op) {
    case CollectiveOp::all_reduce:
      // The latency path: one exchange; every rank reads each peer's whole buffer.
      if (s <= static_cast<double>(comm::kDirectExchangeMaxBytes)) return {1, 0, (n - 1) * s};
      // Otherwise: read the slice from each peer, write the result back into it.
      return {steps, peers_share, peers_share};
    case CollectiveOp::reduce_scatter:  // read the slice from each peer, keep the result
    case CollectiveOp::all_gather:      // read each peer's chunk
      return {steps, 0, peers_share};
    case CollectiveOp::broadcast:  // every other rank reads the root's buffer
      return {steps, 0, rank == root ? 0 : s};
    case CollectiveOp::reduce:  // read the slice from each peer, write it into the root's output
      return {steps, rank == root ? 0 : s / n, peers_share};
    case CollectiveOp::all_to_all:  // read this rank's block from each peer
      return {steps, 0, peers_share};
  }
  throw Error("direct_traffic: unknown collective");
}

// Everything the direct algorithm receives it reads in place.
CollectiveTraffic read_in_place(CollectiveTraffic t) {
  t.bytes_read = t.bytes_received;
  return t;
}

}  // namespace

CollectiveTraffic direct_traffic(CollectiveOp op, double s, int world, int rank, int root,
                                 int64_t segments) {
  if (world == 1 || s <= 0) return {};
  return read_in_place(direct_sent_received(op, s, world, rank, root, segments));
}

double bus_bandwidth_factor(CollectiveOp op, int world) {
  switch (op) {
    case CollectiveOp::all_reduce:
      return bus_bandwidth_factor(NcclTestOp::all_reduce, world);
    case CollectiveOp::reduce_scatter:
      return bus_bandwidth_factor(NcclTestOp::reduce_scatter, world);
    case CollectiveOp::all_gather:
      return bus_bandwidth_factor(NcclTestOp::all_gather, world);
    case CollectiveOp::broadcast:
      return bus_bandwidth_factor(NcclTestOp::broadcast, world);
    case CollectiveOp::reduce:
      return bus_bandwidth_factor(NcclTestOp::reduce, world);
    case CollectiveOp::all_to_all:
      return bus_bandwidth_factor(NcclTestOp::alltoall, world);
  }
  return 1;
}

CollectiveTraffic all_to_all_traffic(Algorithm algo, double s, int world, int64_t segments) {
  DTRAIN_CHECK(world >= 1, "all_to_all_traffic: world must be >= 1, got ", world);
  if (world == 1 || s <= 0) return {};
  const double others = (world - 1.0) / world * s;  // every block but this rank's own
  switch (algo) {
    case Algorithm::pairwise:
      return {world - 1, others, others};
    case Algorithm::direct:
      return read_in_place({2 * std::max<int64_t>(1, segments), 0, others});
    default:
      throw Error(str("all_to_all_traffic: the all-to-all runs pairwise or direct, not ",
                      comm::name(algo), " (resolve automatic first; native is not modeled)"));
  }
}

CollectiveTraffic all_to_all_v_traffic(Algorithm algo, std::span<const double> sent_bytes,
                                       std::span<const double> received_bytes, int rank,
                                       int64_t segments) {
  const int world = static_cast<int>(sent_bytes.size());
  DTRAIN_CHECK(world >= 1 && received_bytes.size() == sent_bytes.size(),
               "all_to_all_v_traffic: ", sent_bytes.size(), " send and ", received_bytes.size(),
               " receive sizes (one per rank each)");
  DTRAIN_CHECK(rank >= 0 && rank < world, "all_to_all_v_traffic: rank ", rank, " outside world ",
               world);
  if (world == 1) return {};
  double sent = 0, received = 0;
  for (int q = 0; q < world; ++q) {
    if (q == rank) continue;
    sent += sent_bytes[q];
    received += received_bytes[q];
  }
  switch (algo) {
    case Algorithm::pairwise:
      return {world - 1, sent, received};
    case Algorithm::direct:
      return read_in_place({2 * std::max<int64_t>(1, segments), 0, received});
    default:
      throw Error(str("all_to_all_v_traffic: all_to_all_v runs pairwise or direct, not ",
                      comm::name(algo), " (resolve automatic first)"));
  }
}

int64_t direct_all_to_all_segments(int64_t longest_part, int world, int64_t slot_bytes,
                                   int64_t element_bytes) {
  DTRAIN_CHECK(world >= 1 && element_bytes >= 1 && longest_part >= 0,
               "direct_all_to_all_segments: world ", world, ", element bytes ", element_bytes,
               ", longest part ", longest_part);
  if (world == 1) return 0;
  if (slot_bytes <= 0) return 1;
  const int64_t piece = comm::direct_all_to_all_piece(slot_bytes, world, element_bytes);
  DTRAIN_CHECK(piece > 0, "direct_all_to_all_segments: a ", slot_bytes,
               "-byte slot holds no piece for each of ", world, " ranks");
  return std::max<int64_t>(1, (longest_part + piece - 1) / piece);
}

std::optional<NcclTestOp> parse_nccl_test_op(std::string_view name) {
  for (NcclTestOp op : {NcclTestOp::all_reduce, NcclTestOp::reduce_scatter, NcclTestOp::all_gather,
                        NcclTestOp::broadcast, NcclTestOp::reduce, NcclTestOp::alltoall}) {
    if (plan::name(op) == name) return op;
  }
  return std::nullopt;
}

std::string_view name(NcclTestOp op) {
  switch (op) {
    case NcclTestOp::all_reduce:
      return "all_reduce";
    case NcclTestOp::reduce_scatter:
      return "reduce_scatter";
    case NcclTestOp::all_gather:
      return "all_gather";
    case NcclTestOp::broadcast:
      return "broadcast";
    case NcclTestOp::reduce:
      return "reduce";
    case NcclTestOp::alltoall:
      return "alltoall";
  }
  return "?";
}

double bus_bandwidth_factor(NcclTestOp op, int world) {
  DTRAIN_CHECK(world >= 1, "--ranks must be >= 1, got ", world);
  const double n = world;
  switch (op) {
    case NcclTestOp::all_reduce:
      return 2 * (n - 1) / n;
    case NcclTestOp::reduce_scatter:
    case NcclTestOp::all_gather:
    case NcclTestOp::alltoall:
      return (n - 1) / n;
    case NcclTestOp::broadcast:
    case NcclTestOp::reduce:
      return 1;
  }
  return 1;
}

std::optional<NcclAlgo> parse_nccl_algo(std::string_view text) {
  std::string key;
  for (char c : text) {
    if (c != '_' && c != '-') key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  for (NcclAlgo a : {NcclAlgo::ring, NcclAlgo::tree, NcclAlgo::collnet_direct,
                     NcclAlgo::collnet_chain, NcclAlgo::nvls, NcclAlgo::nvls_tree, NcclAlgo::pat}) {
    if (name(a) == key) return a;
  }
  return std::nullopt;
}

std::string_view name(NcclAlgo algo) {
  switch (algo) {
    case NcclAlgo::ring:
      return "ring";
    case NcclAlgo::tree:
      return "tree";
    case NcclAlgo::collnet_direct:
      return "collnetdirect";
    case NcclAlgo::collnet_chain:
      return "collnetchain";
    case NcclAlgo::nvls:
      return "nvls";
    case NcclAlgo::nvls_tree:
      return "nvlstree";
    case NcclAlgo::pat:
      return "pat";
  }
  return "?";
}

double bus_bandwidth_factor(NcclTestOp op, int world, NcclAlgo algo) {
  const bool in_network = algo == NcclAlgo::nvls || algo == NcclAlgo::nvls_tree;
  if (op != NcclTestOp::all_reduce || !in_network) return bus_bandwidth_factor(op, world);
  DTRAIN_CHECK(world >= 1, "--ranks must be >= 1, got ", world);
  const double n = world;
  return (n - 1) / (n + 1);
}

CollectiveBandwidth measured_bandwidth(NcclTestOp op, double bytes, int world, double seconds,
                                       NcclAlgo algo) {
  DTRAIN_CHECK(std::isfinite(bytes) && bytes > 0, "--size must be positive, got ", bytes);
  DTRAIN_CHECK(std::isfinite(seconds) && seconds > 0, "--time must be positive, got ", seconds);
  CollectiveBandwidth b;
  b.algbw = bytes / seconds;
  b.busbw = b.algbw * bus_bandwidth_factor(op, world, algo);
  return b;
}

double ideal_ring_seconds(NcclTestOp op, double bytes, int world, double link_bytes_per_s,
                          double latency_s) {
  DTRAIN_CHECK(link_bytes_per_s > 0, "link bandwidth must be positive, got ", link_bytes_per_s);
  if (world == 1) return 0;
  const double steps = op == NcclTestOp::all_reduce ? 2.0 * (world - 1) : world - 1.0;
  return bytes * bus_bandwidth_factor(op, world) / link_bytes_per_s + steps * latency_s;
}

AllToAllLinkTraffic all_to_all_link_traffic(double bytes, int world, int gpus_per_node, int rank) {
  DTRAIN_CHECK(world >= 1 && gpus_per_node >= 1 && rank >= 0 && rank < world,
               "all_to_all_link_traffic: rank ", rank, " of ", world, " on nodes of ",
               gpus_per_node);
  const int node = rank / gpus_per_node;
  const int on_node = std::min(gpus_per_node, world - node * gpus_per_node);
  const double block = bytes / world;
  AllToAllLinkTraffic t;
  t.intra_node_peers = on_node - 1;
  t.inter_node_peers = world - on_node;
  t.intra_node_bytes = block * t.intra_node_peers;
  t.inter_node_bytes = block * t.inter_node_peers;
  return t;
}

IdealAllToAll ideal_all_to_all(double bytes, int world, int gpus_per_node, double intra_bytes_per_s,
                               double intra_latency_s, double inter_bytes_per_s,
                               double inter_latency_s) {
  DTRAIN_CHECK(intra_bytes_per_s > 0 && inter_bytes_per_s > 0,
               "ideal_all_to_all: link bandwidths must be positive, got ", intra_bytes_per_s,
               " and ", inter_bytes_per_s);
  IdealAllToAll best;
  if (world <= 1) return best;
  // Every node but perhaps the last is full: its first rank and the last node's first rank are
  // the two kinds of rank there are.
  for (int rank : {0, (world - 1) / gpus_per_node * gpus_per_node}) {
    const AllToAllLinkTraffic t = all_to_all_link_traffic(bytes, world, gpus_per_node, rank);
    const double intra =
        t.intra_node_peers * intra_latency_s + t.intra_node_bytes / intra_bytes_per_s;
    const double inter =
        t.inter_node_peers * inter_latency_s + t.inter_node_bytes / inter_bytes_per_s;
    const double seconds = std::max(intra, inter);
    if (seconds > best.seconds) best = {seconds, t, inter > intra};
  }
  return best;
}

}  // namespace dtrain::plan
