// hierarchical_all_reduce: three ring collectives on the node and across subgroups; the shard a
// rank reduces inside its node (chunk_of over the node) is the block it all-reduces across nodes.
#include "dtrain/comm/hierarchical.h"

#include <algorithm>
#include <map>
#include <type_traits>
#include <vector>

#include "dtrain/comm/chunks.h"
#include "dtrain/comm/collectives.h"
#include "dtrain/core/check.h"

namespace dtrain::comm {

LinkBytes NodeGroups::link_bytes_sent(const NodeTopology& topology) const {
  LinkBytes out;
  if (node) out += comm::link_bytes_sent(*node, topology);
  if (across) out += comm::link_bytes_sent(*across, topology);
  return out;
}

NodeGroups make_node_groups(Communicator& comm, const NodeTopology& topology) {
  const int n = comm.size();
  DTRAIN_CHECK(comm.world_size() == topology.world(), "hierarchical all-reduce: the topology has ",
               topology.world(), " ranks but the world has ", comm.world_size());
  // Members of `comm` per node, in comm-rank order.
  std::map<int, std::vector<int>> by_node;
  for (int r = 0; r < n; ++r) by_node[topology.node_of(comm.global_rank_of(r))].push_back(r);
  const size_t per_node = by_node.begin()->second.size();
  for (const auto& [node, members] : by_node) {
    DTRAIN_CHECK(members.size() == per_node, "hierarchical all-reduce: the group's ranks are ",
                 "spread unevenly over nodes (node ", by_node.begin()->first, " holds ", per_node,
                 ", node ", node, " holds ", members.size(), ")");
  }
  const std::vector<int>& mine = by_node[topology.node_of(comm.global_rank())];
  const auto local = std::find(mine.begin(), mine.end(), comm.rank()) - mine.begin();
  std::vector<int> across;
  for (const auto& [node, members] : by_node) across.push_back(members[local]);
  std::sort(across.begin(), across.end());

  NodeGroups groups;
  groups.world = n;
  groups.node = comm.subgroup(mine, "node");
  groups.across = comm.subgroup(across, "across_nodes");
  return groups;
}

template <typename T>
Traffic hierarchical_all_reduce(NodeGroups& groups, T* data, int64_t count, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    DTRAIN_CHECK(op != ReduceOp::avg,
                 "hierarchical all_reduce: avg is defined for float32 only; use sum on counters");
  }
  DTRAIN_CHECK(count >= 0, "hierarchical all_reduce: negative element count ", count);
  DTRAIN_CHECK(groups.node && groups.across, "hierarchical all_reduce: groups not built");
  Communicator& node = *groups.node;
  Communicator& across = *groups.across;
  // Sum (or max) through all three phases; avg divides the reduced shard once at the end, so
  // every rank receives the same bits in the all-gather.
  const ReduceOp reduce = op == ReduceOp::avg ? ReduceOp::sum : op;
  const Chunk shard = chunk_of(count, node.size(), node.rank());
  T* block = data + shard.offset;
  Traffic total;
  total += reduce_scatter(node, data, block, count, reduce, Algorithm::ring);
  total += all_reduce(across, block, shard.count, reduce, Algorithm::ring);
  if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::avg) {
      const T scale = static_cast<T>(1) / static_cast<T>(groups.world);
      for (int64_t i = 0; i < shard.count; ++i) block[i] *= scale;
    }
  }
  total += all_gather(node, block, data, count, Algorithm::ring);
  return total;
}

template <typename T>
Traffic hierarchical_all_reduce(Communicator& comm, const NodeTopology& topology, T* data,
                                int64_t count, ReduceOp op) {
  NodeGroups groups = make_node_groups(comm, topology);
  return hierarchical_all_reduce(groups, data, count, op);
}

template Traffic hierarchical_all_reduce<float>(NodeGroups&, float*, int64_t, ReduceOp);
template Traffic hierarchical_all_reduce<int64_t>(NodeGroups&, int64_t*, int64_t, ReduceOp);
template Traffic hierarchical_all_reduce<float>(Communicator&, const NodeTopology&, float*, int64_t,
                                                ReduceOp);
template Traffic hierarchical_all_reduce<int64_t>(Communicator&, const NodeTopology&, int64_t*,
                                                  int64_t, ReduceOp);

}  // namespace dtrain::comm
