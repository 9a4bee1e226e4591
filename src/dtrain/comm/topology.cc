// NodeTopology: contiguous blocks of global ranks per node, and the per-peer byte split.
#include "dtrain/comm/topology.h"

#include <algorithm>

#include "dtrain/core/check.h"

namespace dtrain::comm {

NodeTopology::NodeTopology(int world, int ranks_per_node)
    : world_(world), ranks_per_node_(ranks_per_node) {
  DTRAIN_CHECK(world >= 1, "topology: world of ", world, " ranks");
  DTRAIN_CHECK(ranks_per_node >= 1, "--ranks-per-node must be >= 1, got ", ranks_per_node);
  DTRAIN_CHECK(world % ranks_per_node == 0, "--ranks-per-node ", ranks_per_node,
               " does not divide the ", world, " ranks into whole nodes");
}

int NodeTopology::node_of(int global_rank) const {
  if (ranks_per_node_ == 0) return 0;  // the default: one node, whatever the world
  DTRAIN_CHECK(global_rank >= 0 && global_rank < world_, "topology: rank ", global_rank,
               " outside a world of ", world_);
  return global_rank / ranks_per_node_;
}

std::vector<int> NodeTopology::nodes_of(std::span<const int> global_ranks) const {
  std::vector<int> out;
  for (int r : global_ranks) out.push_back(node_of(r));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

LinkBytes link_bytes(std::span<const int64_t> bytes_sent_per_peer, const NodeTopology& topology,
                     int global_rank) {
  LinkBytes out;
  for (size_t peer = 0; peer < bytes_sent_per_peer.size(); ++peer) {
    const int64_t b = bytes_sent_per_peer[peer];
    if (b == 0) continue;
    if (topology.link(global_rank, static_cast<int>(peer)) == LinkClass::intra_node) {
      out.intra_node += b;
    } else {
      out.inter_node += b;
    }
  }
  return out;
}

LinkBytes link_bytes_sent(const Communicator& comm, const NodeTopology& topology) {
  const std::vector<int64_t> per_peer = comm.bytes_sent_per_peer();
  return link_bytes(per_peer, topology, comm.global_rank());
}

}  // namespace dtrain::comm
