// Where the DP, TP and PP groups of a layout land on the cluster's nodes, and what a collective
// costs on a group so placed: inside one node it runs on the intra-node link; across nodes the
// cheaper of a flat ring (every step waits for the inter-node link) and the hierarchical form
// (comm_model.h) — which is what NCCL's multi-ring and tree algorithms approach on DGX nodes.
//
// Global ranks follow a rank order, innermost axis first. Megatron-LM's default keeps TP
// innermost, then DP, then PP ("tp-dp-pp"): with dp=2, tp=2, pp=2 rank = tp + 2 * (dp + 2 * pp),
// so TP groups are {0,1} {2,3} ..., DP groups {0,2} {1,3} {4,6} {5,7}, PP groups {0,4} {1,5} ...
// A group of `size` ranks whose axis has `stride` (the product of the inner axes' sizes) holds
// ranks r, r + stride, ...; on nodes of g GPUs it spans ceil-ish(stride * size / g) nodes.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "dtrain/cost/comm_model.h"
#include "dtrain/machine/hardware.h"

namespace dtrain::plan {

// cp (context parallelism) is never named in a rank order: it sits right outside tp, as in
// Megatron-core's default tp-cp-ep-dp-pp, so "tp-dp-pp" places ranks in the order tp, cp, dp, pp
// and a CP group is as close together as its TP group allows.
enum class Axis { tp, dp, pp, cp };
std::string_view name(Axis axis);  // "tp", "dp", "pp", "cp"

struct RankOrder {
  std::array<Axis, 3> inner_to_outer{Axis::tp, Axis::dp, Axis::pp};
  bool operator==(const RankOrder&) const = default;
};
// "tp-dp-pp" and its permutations; nullopt for anything else.
std::optional<RankOrder> parse_rank_order(std::string_view s);
std::string to_string(RankOrder order);

struct GroupPlacement {
  int size = 1;            // ranks in the group
  int stride = 1;          // global-rank distance between neighbours in the group
  int nodes = 1;           // nodes the group (of global rank 0) spans
  int ranks_per_node = 1;  // most members of the group on one node
  bool crosses_nodes() const { return nodes > 1; }
};

struct AxisSizes {
  int dp = 1, tp = 1, pp = 1;
  int cp = 1;  // appended: {dp, tp, pp} initialisers keep their meaning
  int of(Axis a) const { return a == Axis::dp ? dp : a == Axis::tp ? tp : a == Axis::pp ? pp : cp; }
};
GroupPlacement place_group(Axis axis, AxisSizes sizes, RankOrder order, int gpus_per_node);
// The group gradients are reduced over with context parallelism: rank 0's DP x CP ranks (its
// `stride` is the inner axis's; nodes and ranks_per_node counted over the members).
GroupPlacement place_data_group(AxisSizes sizes, RankOrder order, int gpus_per_node);

struct PlacedCost {
  int64_t steps = 0;
  double bytes_sent = 0;  // per rank
  double time_s = 0;
  bool inter_node = false;    // some of it crosses the node boundary
  bool hierarchical = false;  // the two-level form was the cheaper one
};
// `call` (all its calls) on a group so placed.
PlacedCost placed_collective_cost(const CollectiveCall& call, const GroupPlacement& group,
                                  const Cluster& cluster);
// One point-to-point send of `bytes` between neighbouring stages of a pipeline group.
PlacedCost placed_send_cost(double bytes, const GroupPlacement& group, const Cluster& cluster);

}  // namespace dtrain::plan
