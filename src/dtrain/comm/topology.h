// Where ranks sit: the node topology a run declares (--ranks-per-node G: global ranks
// [k*G, (k+1)*G) share node k) and the link class between two ranks. Bytes a rank sent are
// split by link class from the communicator's per-peer counters, so a report can say how much
// crossed the slow inter-node network.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.h"

namespace dtrain::comm {

enum class LinkClass { intra_node, inter_node };

class NodeTopology {
 public:
  // Every rank on one node.
  NodeTopology() = default;
  // `world` ranks, `ranks_per_node` to a node. Throws Error naming --ranks-per-node unless
  // it is >= 1 and divides `world`.
  NodeTopology(int world, int ranks_per_node);

  int world() const { return world_; }
  int ranks_per_node() const { return ranks_per_node_; }
  int nodes() const { return ranks_per_node_ > 0 ? world_ / ranks_per_node_ : 1; }
  bool single_node() const { return nodes() <= 1; }
  int node_of(int global_rank) const;
  LinkClass link(int global_a, int global_b) const {
    return node_of(global_a) == node_of(global_b) ? LinkClass::intra_node : LinkClass::inter_node;
  }
  // The nodes a set of global ranks spans, ascending.
  std::vector<int> nodes_of(std::span<const int> global_ranks) const;

 private:
  int world_ = 1;
  int ranks_per_node_ = 0;  // 0: everything on one node
};

// Bytes split by link class.
struct LinkBytes {
  int64_t intra_node = 0;
  int64_t inter_node = 0;
  int64_t total() const { return intra_node + inter_node; }
  LinkBytes operator-(const LinkBytes& o) const {
    return {intra_node - o.intra_node, inter_node - o.inter_node};
  }
  LinkBytes& operator+=(const LinkBytes& o) {
    intra_node += o.intra_node;
    inter_node += o.inter_node;
    return *this;
  }
};

// What the rank `global_rank` moved (sent, or read in place: Traffic::bytes_moved), by link
// class, from per-peer byte counts indexed by global rank (Communicator::bytes_sent_per_peer()).
LinkBytes link_bytes(std::span<const int64_t> bytes_sent_per_peer, const NodeTopology& topology,
                     int global_rank);
// The same read off one communicator (cumulative over its life).
LinkBytes link_bytes_sent(const Communicator& comm, const NodeTopology& topology);

}  // namespace dtrain::comm
