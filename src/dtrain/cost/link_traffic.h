// Bytes one rank sends over each link class (inside its node, across nodes) for an all-reduce
// on `nodes` x `ranks_per_node` ranks placed node-major (global rank = node * G + local rank):
// the flat ring over all N ranks against the hierarchical all-reduce (comm/hierarchical.h).
// Exact per element count: the engine's per-peer counters are tested for equality with these.
#pragma once

#include <cstdint>

namespace dtrain::plan {

struct LinkTraffic {
  int64_t steps = 0;
  int64_t intra_node_bytes = 0;
  int64_t inter_node_bytes = 0;
  int64_t total_bytes() const { return intra_node_bytes + inter_node_bytes; }
};

// Flat ring: rank r sends every chunk but its own in the reduce-scatter and every chunk but
// rank r+1's in the all-gather (2(N-1)/N S), all of it to r+1, which sits on the next node
// only for the last local rank of each node (when there is more than one node).
LinkTraffic flat_ring_all_reduce_link_traffic(int64_t count, int64_t element_bytes,
                                              int ranks_per_node, int nodes, int rank);

// Hierarchical: inside the node a ring reduce-scatter and all-gather over G ranks
// (2(G-1)/G S), across nodes a ring all-reduce of the rank's S/G shard over M nodes
// (2(M-1)/M S/G): the inter-node bytes of one node sum to 2(M-1)/M S, not G times that.
LinkTraffic hierarchical_all_reduce_link_traffic(int64_t count, int64_t element_bytes,
                                                 int ranks_per_node, int nodes, int rank);

// The bandwidth one flow gets across nodes when `flows` flows leave its node at once through
// an uplink that G ranks share: a calibrated per-rank figure (measured with all G ranks of a
// node sending across at once) times G, split over the flows. One flow alone gets the whole
// uplink; G flows get the per-rank figure. (With one NIC per rank, pass ranks_per_node = 1.)
double shared_uplink_bandwidth(double per_rank_bytes_per_s, int ranks_per_node, int flows);

}  // namespace dtrain::plan
