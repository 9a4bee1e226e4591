// Group placement by walking rank 0's group, and the link choice for each collective.
#include "dtrain/cost/placement.h"

#include <algorithm>
#include <array>

#include "dtrain/core/check.h"

namespace dtrain::plan {

std::string_view name(Axis axis) {
  switch (axis) {
    case Axis::tp:
      return "tp";
    case Axis::dp:
      return "dp";
    case Axis::pp:
      return "pp";
    case Axis::cp:
      return "cp";
  }
  return "?";
}

std::optional<RankOrder> parse_rank_order(std::string_view s) {
  RankOrder order;
  int seen = 0;
  size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t dash = s.find('-', start);
    const std::string_view part =
        s.substr(start, dash == std::string_view::npos ? std::string_view::npos : dash - start);
    std::optional<Axis> axis;
    for (Axis a : {Axis::tp, Axis::dp, Axis::pp}) {
      if (part == name(a)) axis = a;
    }
    if (!axis || (seen & (1 << static_cast<int>(*axis)))) return std::nullopt;
    seen |= 1 << static_cast<int>(*axis);
    order.inner_to_outer[static_cast<size_t>(i)] = *axis;
    if (dash == std::string_view::npos) {
      if (i != 2) return std::nullopt;
      return order;
    }
    start = dash + 1;
  }
  return std::nullopt;  // more than three parts
}

std::string to_string(RankOrder order) {
  std::string out;
  for (Axis a : order.inner_to_outer) {
    if (!out.empty()) out.push_back('-');
    out.append(name(a));
  }
  return out;
}

namespace {

// The order's axes with cp inserted right outside tp, innermost first.
std::array<Axis, 4> with_cp(RankOrder order) {
  std::array<Axis, 4> out{};
  size_t i = 0;
  for (Axis a : order.inner_to_outer) {
    out[i++] = a;
    if (a == Axis::tp) out[i++] = Axis::cp;
  }
  return out;
}

int stride_of(Axis axis, AxisSizes sizes, RankOrder order) {
  int stride = 1;
  for (Axis a : with_cp(order)) {
    if (a == axis) break;
    stride *= sizes.of(a);
  }
  return stride;
}

}  // namespace

namespace {

// The walks themselves (place_group and place_data_group below remember their results).
GroupPlacement place_data_group_walked(AxisSizes sizes, RankOrder order, int gpus_per_node) {
  DTRAIN_CHECK(gpus_per_node >= 1, "--gpus-per-node must be >= 1, got ", gpus_per_node);
  if (sizes.cp == 1) return place_group(Axis::dp, sizes, order, gpus_per_node);
  if (sizes.dp == 1) return place_group(Axis::cp, sizes, order, gpus_per_node);
  const int dp_stride = stride_of(Axis::dp, sizes, order);
  const int cp_stride = stride_of(Axis::cp, sizes, order);
  GroupPlacement g;
  g.size = sizes.dp * sizes.cp;
  g.stride = std::min(dp_stride, cp_stride);
  // Members' nodes, counted (the group is two strided axes, not one). The outer axis's stride is
  // at least the inner axis's size times its stride, so walking outer-major visits the members
  // in ascending rank order: each node's members are one run.
  const bool dp_inner = dp_stride < cp_stride;
  const int inner = dp_inner ? sizes.dp : sizes.cp, outer = dp_inner ? sizes.cp : sizes.dp;
  const int64_t inner_stride = dp_inner ? dp_stride : cp_stride;
  const int64_t outer_stride = dp_inner ? cp_stride : dp_stride;
  g.nodes = 0;
  g.ranks_per_node = 0;
  int64_t node = -1;
  int run = 0;
  for (int i = 0; i < outer; ++i) {
    for (int j = 0; j < inner; ++j) {
      const int64_t n = (i * outer_stride + j * inner_stride) / gpus_per_node;
      if (n != node) {
        node = n;
        ++g.nodes;
        run = 0;
      }
      g.ranks_per_node = std::max(g.ranks_per_node, ++run);
    }
  }
  return g;
}

GroupPlacement place_group_walked(Axis axis, AxisSizes sizes, RankOrder order, int gpus_per_node) {
  DTRAIN_CHECK(gpus_per_node >= 1, "--gpus-per-node must be >= 1, got ", gpus_per_node);
  GroupPlacement g;
  g.size = sizes.of(axis);
  g.stride = stride_of(axis, sizes, order);
  // Rank 0's group: ranks i * stride; their nodes (i * stride) / gpus_per_node never decrease.
  g.nodes = 0;
  g.ranks_per_node = 0;
  int64_t node = -1;
  int run = 0;
  for (int i = 0; i < g.size; ++i) {
    const int64_t n = static_cast<int64_t>(i) * g.stride / gpus_per_node;
    if (n != node) {
      node = n;
      ++g.nodes;
      run = 0;
    }
    g.ranks_per_node = std::max(g.ranks_per_node, ++run);
  }
  return g;
}

}  // namespace

PlacedCost placed_collective_cost(const CollectiveCall& call, const GroupPlacement& group,
                                  const Cluster& cluster) {
  PlacedCost p;
  if (group.size <= 1 || call.count == 0) return p;
  if (!group.crosses_nodes()) {
    const CommCost c = collective_cost(call, comm::Algorithm::ring, group.size, cluster.intra_node);
    return {c.steps, c.bytes_sent, c.time_s, false, false};
  }
  const CommCost flat =
      collective_cost(call, comm::Algorithm::ring, group.size, cluster.inter_node);
  p = {flat.steps, flat.bytes_sent, flat.time_s, true, false};
  const bool two_level = call.op == comm::CollectiveOp::all_reduce ||
                         call.op == comm::CollectiveOp::reduce_scatter ||
                         call.op == comm::CollectiveOp::all_gather;
  if (two_level && group.ranks_per_node > 1 && group.ranks_per_node * group.nodes == group.size) {
    const HierarchicalCost h =
        hierarchical_cost(call.op, call.bytes, group.ranks_per_node, group.nodes,
                          cluster.intra_node, cluster.inter_node);
    const double n = static_cast<double>(call.count);
    if (h.time_s * n < p.time_s) {
      p.steps = (h.intra_first.steps + h.inter.steps + h.intra_last.steps) * call.count;
      p.bytes_sent = (h.intra_first.bytes_sent + h.inter.bytes_sent + h.intra_last.bytes_sent) * n;
      p.time_s = h.time_s * n;
      p.hierarchical = true;
    }
  }
  return p;
}

PlacedCost placed_send_cost(double bytes, const GroupPlacement& group, const Cluster& cluster) {
  if (group.size <= 1) return {};
  const Link& link = group.crosses_nodes() ? cluster.inter_node : cluster.intra_node;
  return {1, bytes, link.latency_us * 1e-6 + bytes / link.bandwidth_bytes_per_s,
          group.crosses_nodes(), false};
}

namespace {

// The search places the same groups for thousands of layouts, and a group's walk visits every
// member (3072 of a DP group): the last placements asked for are kept, per thread, keyed by
// every argument (placement is a function of them alone).
struct PlacementKey {
  int axis = -1;  // -1: the data group (place_data_group)
  AxisSizes sizes;
  RankOrder order;
  int gpus_per_node = 0;
  bool operator==(const PlacementKey& o) const {
    return axis == o.axis && sizes.dp == o.sizes.dp && sizes.tp == o.sizes.tp &&
           sizes.pp == o.sizes.pp && sizes.cp == o.sizes.cp && order == o.order &&
           gpus_per_node == o.gpus_per_node;
  }
};

template <class Place>
GroupPlacement remembered(const PlacementKey& key, Place place) {
  struct Slot {
    PlacementKey key;
    GroupPlacement group;
    bool filled = false;
  };
  constexpr size_t kSlots = 64;
  thread_local std::array<Slot, kSlots> slots;
  size_t h = static_cast<size_t>(key.axis + 1);
  for (int x : {key.sizes.dp, key.sizes.tp, key.sizes.pp, key.sizes.cp, key.gpus_per_node}) {
    h = h * 31 + static_cast<size_t>(x);
  }
  for (Axis a : key.order.inner_to_outer) h = h * 7 + static_cast<size_t>(a);
  Slot& slot = slots[h % kSlots];
  if (!slot.filled || !(slot.key == key)) {
    slot.group = place();
    slot.key = key;
    slot.filled = true;
  }
  return slot.group;
}

}  // namespace

GroupPlacement place_group(Axis axis, AxisSizes sizes, RankOrder order, int gpus_per_node) {
  return remembered({static_cast<int>(axis), sizes, order, gpus_per_node},
                    [&] { return place_group_walked(axis, sizes, order, gpus_per_node); });
}

GroupPlacement place_data_group(AxisSizes sizes, RankOrder order, int gpus_per_node) {
  return remembered({-1, sizes, order, gpus_per_node},
                    [&] { return place_data_group_walked(sizes, order, gpus_per_node); });
}

}  // namespace dtrain::plan
