// Link-class traffic of the flat and hierarchical all-reduce, from the same chunking the ring
// uses (comm/chunks.h), so uneven chunks are counted element for element.
#include "dtrain/cost/link_traffic.h"

#include "dtrain/comm/chunks.h"
#include "dtrain/core/check.h"

namespace dtrain::plan {
namespace {

// Elements a ring all-reduce of `count` over `n` ranks makes rank `r` send.
int64_t ring_all_reduce_elements(int64_t count, int n, int r) {
  if (n <= 1 || count == 0) return 0;
  return 2 * count - comm::chunk_of(count, n, r).count -
         comm::chunk_of(count, n, (r + 1) % n).count;
}

void check_shape(int ranks_per_node, int nodes, int rank) {
  DTRAIN_CHECK(ranks_per_node >= 1 && nodes >= 1, "link traffic: ranks_per_node ", ranks_per_node,
               " and nodes ", nodes, " must be >= 1");
  DTRAIN_CHECK(rank >= 0 && rank < ranks_per_node * nodes, "link traffic: rank ", rank, " outside ",
               nodes, " x ", ranks_per_node, " ranks");
}

}  // namespace

LinkTraffic flat_ring_all_reduce_link_traffic(int64_t count, int64_t element_bytes,
                                              int ranks_per_node, int nodes, int rank) {
  check_shape(ranks_per_node, nodes, rank);
  const int n = ranks_per_node * nodes;
  LinkTraffic out;
  if (n == 1 || count == 0) return out;
  out.steps = 2 * (n - 1);
  const int64_t bytes = ring_all_reduce_elements(count, n, rank) * element_bytes;
  const bool next_on_other_node = nodes > 1 && rank % ranks_per_node == ranks_per_node - 1;
  (next_on_other_node ? out.inter_node_bytes : out.intra_node_bytes) = bytes;
  return out;
}

LinkTraffic hierarchical_all_reduce_link_traffic(int64_t count, int64_t element_bytes,
                                                 int ranks_per_node, int nodes, int rank) {
  check_shape(ranks_per_node, nodes, rank);
  LinkTraffic out;
  if (count == 0) return out;
  const int g = ranks_per_node, local = rank % g, node = rank / g;
  if (g > 1) {
    out.steps += 2 * (g - 1);
    out.intra_node_bytes = ring_all_reduce_elements(count, g, local) * element_bytes;
  }
  const int64_t shard = comm::chunk_of(count, g, local).count;
  if (nodes > 1 && shard > 0) {
    out.steps += 2 * (nodes - 1);
    out.inter_node_bytes = ring_all_reduce_elements(shard, nodes, node) * element_bytes;
  }
  return out;
}

double shared_uplink_bandwidth(double per_rank_bytes_per_s, int ranks_per_node, int flows) {
  return per_rank_bytes_per_s * ranks_per_node / (flows > 0 ? flows : 1);
}

}  // namespace dtrain::plan
