// The two-level all-reduce for ranks spread over nodes (NodeTopology): a ring reduce-scatter
// inside each node, a ring all-reduce of each rank's shard among the ranks with the same local
// rank on every node, and a ring all-gather inside the node. Each rank sends 2(M-1)/M S/G over
// the slow inter-node link (M nodes of G ranks), where the flat ring makes one rank in G send
// 2(N-1)/N S.
// Written over the plain collectives on two subgroups; cost/link_traffic.h gives its bytes.
#pragma once

#include <cstdint>
#include <memory>

#include "dtrain/comm/collective_kind.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/topology.h"

namespace dtrain::comm {

// The two subgroups of one rank, built once and reused by every call (creating a group is
// itself a collective on some backends).
struct NodeGroups {
  std::unique_ptr<Communicator> node;    // this rank's node: its members of `comm`, ascending
  std::unique_ptr<Communicator> across;  // the ranks with this local rank on every node
  int world = 1;                         // size of the group the pair was built from
  // Bytes this rank sent through both subgroups so far, by link class.
  LinkBytes link_bytes_sent(const NodeTopology& topology) const;
};

// Splits `comm` by node; every member calls it. Throws Error when the group's ranks are spread
// unevenly (every node must hold the same number of them).
NodeGroups make_node_groups(Communicator& comm, const NodeTopology& topology);

// All-reduce of `count` elements in place over the group `groups` was built from; the result
// is bit-identical on every rank (avg scales the reduced shard once, before the all-gather).
// Returns the traffic of the three phases summed (steps: 2(G-1) + 2(M-1) for M nodes).
template <typename T>
Traffic hierarchical_all_reduce(NodeGroups& groups, T* data, int64_t count, ReduceOp op);

// The same, building the groups for this one call.
template <typename T>
Traffic hierarchical_all_reduce(Communicator& comm, const NodeTopology& topology, T* data,
                                int64_t count, ReduceOp op);

extern template Traffic hierarchical_all_reduce<float>(NodeGroups&, float*, int64_t, ReduceOp);
extern template Traffic hierarchical_all_reduce<int64_t>(NodeGroups&, int64_t*, int64_t, ReduceOp);
extern template Traffic hierarchical_all_reduce<float>(Communicator&, const NodeTopology&, float*,
                                                       int64_t, ReduceOp);
extern template Traffic hierarchical_all_reduce<int64_t>(Communicator&, const NodeTopology&,
                                                         int64_t*, int64_t, ReduceOp);

}  // namespace dtrain::comm
