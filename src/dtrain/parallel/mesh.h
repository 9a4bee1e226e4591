// The DP x CP x TP x PP rank grid as one pure function of (shape, rank order): which coordinates
// a global rank has, and which ranks share each group. No communication and no global state;
// the engines build their communicators from these lists. CP (context parallelism) has size 1
// unless asked for; a three-axis order places it right outside TP (cost/placement.h's rule), so
// "tp-dp-pp" means "tp-cp-dp-pp" and a CP ring stays beside its TP group.
//
// Worked example: dp = 2, tp = 2, pp = 2 with the default order "tp-dp-pp" (TP varies fastest,
// so TP groups are consecutive ranks and stay inside a node):
//
//   rank:  0  1  2  3  4  5  6  7
//   tp:    0  1  0  1  0  1  0  1      rank = tp + TP * (dp + DP * pp)
//   dp:    0  0  1  1  0  0  1  1
//   pp:    0  0  0  0  1  1  1  1
//
//   TP groups {0,1} {2,3} {4,5} {6,7};  DP groups {0,2} {1,3} {4,6} {5,7};
//   PP groups {0,4} {1,5} {2,6} {3,7}.  Rank 5 prints itself as DP(2)-TP(2)-PP(2)-rank(5).
//
// With order "dp-tp-pp" instead, rank = dp + DP * (tp + TP * pp): DP groups become consecutive
// and TP groups stride by DP (and may cross a node boundary).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::parallel {

enum class Axis { dp, tp, pp, cp };
std::string_view name(Axis axis);

struct MeshCoord {
  int dp = 0, tp = 0, pp = 0, cp = 0;
  int operator[](Axis a) const {
    return a == Axis::dp ? dp : a == Axis::tp ? tp : a == Axis::pp ? pp : cp;
  }
  int& operator[](Axis a) {
    return a == Axis::dp ? dp : a == Axis::tp ? tp : a == Axis::pp ? pp : cp;
  }
  bool operator==(const MeshCoord&) const = default;
};

// The four axes, fastest-varying first: the order in which global ranks fill the mesh.
using RankOrder = std::array<Axis, 4>;
inline constexpr RankOrder kDefaultRankOrder = {Axis::tp, Axis::cp, Axis::dp, Axis::pp};
// "tp-cp-dp-pp" and back; parse_rank_order returns nullopt unless the text names tp, dp and pp
// once each (and cp at most once; without it cp goes right after tp), joined by '-'. to_string
// leaves cp out where it sits right after tp, so three-axis orders print as they were given.
std::optional<RankOrder> parse_rank_order(std::string_view text);
std::string to_string(const RankOrder& order);

class DeviceMesh {
 public:
  // `order` lists the three axes fastest-varying first, e.g. tp-dp-pp (the default), dp-tp-pp,
  // tp-pp-dp. Throws Error on non-positive sizes or, for the text, a malformed order.
  DeviceMesh(int dp, int tp, int pp, const RankOrder& order = kDefaultRankOrder);
  DeviceMesh(int dp, int tp, int pp, std::string_view order);
  DeviceMesh(int dp, int cp, int tp, int pp, const RankOrder& order);

  int size(Axis axis) const;
  int world_size() const { return dp_ * cp_ * tp_ * pp_; }
  const std::string& order() const { return order_text_; }

  MeshCoord coord_of(int global_rank) const;
  int rank_of(MeshCoord coord) const;
  // The ranks that share every coordinate with `global_rank` except `axis`, ordered by their
  // coordinate on `axis` (so a rank's index in the list is its dp_rank / tp_rank / pp_rank).
  std::vector<int> group_of(Axis axis, int global_rank) const;
  // The ranks that share every coordinate with `global_rank` except those of `a` and `b`,
  // ordered by the rank numbering (the combined DP x CP group that reduces gradients).
  std::vector<int> group_of(Axis a, Axis b, int global_rank) const;
  // Every group of `axis`: a partition of 0..world-1.
  std::vector<std::vector<int>> groups(Axis axis) const;
  // "DP(2)-TP(2)-PP(2)-rank(5)": the mesh's sizes and this global rank ("DP(1)-CP(2)-..." with
  // CP).
  std::string describe(int global_rank) const;

 private:
  int dp_, cp_, tp_, pp_;
  RankOrder order_;  // fastest first
  std::string order_text_;
};

}  // namespace dtrain::parallel
