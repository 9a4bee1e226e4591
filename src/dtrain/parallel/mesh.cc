// DeviceMesh: mixed-radix numbering of the (dp, tp, pp) grid, fastest axis first.
#include "dtrain/parallel/mesh.h"

#include <algorithm>

#include "dtrain/core/check.h"

namespace dtrain::parallel {

std::string_view name(Axis axis) {
  switch (axis) {
    case Axis::dp:
      return "dp";
    case Axis::tp:
      return "tp";
    case Axis::pp:
      return "pp";
  }
  return "?";
}

std::optional<RankOrder> parse_rank_order(std::string_view text) {
  RankOrder order{};
  bool seen[3] = {false, false, false};
  size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t dash = text.find('-', start);
    const bool last = i == 2;
    if (last != (dash == std::string_view::npos)) return std::nullopt;
    const std::string_view part = text.substr(start, last ? std::string_view::npos : dash - start);
    Axis a = Axis::dp;
    if (part == "dp") {
      a = Axis::dp;
    } else if (part == "tp") {
      a = Axis::tp;
    } else if (part == "pp") {
      a = Axis::pp;
    } else {
      return std::nullopt;
    }
    if (seen[static_cast<int>(a)]) return std::nullopt;
    seen[static_cast<int>(a)] = true;
    order[static_cast<size_t>(i)] = a;
    start = dash + 1;
  }
  return order;
}

std::string to_string(const RankOrder& order) {
  return str(name(order[0]), "-", name(order[1]), "-", name(order[2]));
}

DeviceMesh::DeviceMesh(int dp, int tp, int pp, const RankOrder& order)
    : dp_(dp), tp_(tp), pp_(pp), order_(order), order_text_(to_string(order)) {
  DTRAIN_CHECK(dp >= 1 && tp >= 1 && pp >= 1, "--dp, --tp and --pp must be >= 1, got dp ", dp,
               ", tp ", tp, ", pp ", pp);
  bool seen[3] = {false, false, false};
  for (Axis a : order) seen[static_cast<int>(a)] = true;
  DTRAIN_CHECK(seen[0] && seen[1] && seen[2], "rank order ", order_text_,
               " must name tp, dp and pp once each");
}

namespace {

RankOrder checked_order(std::string_view text) {
  const std::optional<RankOrder> order = parse_rank_order(text);
  DTRAIN_CHECK(order.has_value(), "--rank-order '", text,
               "' must name tp, dp and pp once each, fastest first (e.g. tp-dp-pp)");
  return *order;
}

}  // namespace

DeviceMesh::DeviceMesh(int dp, int tp, int pp, std::string_view order)
    : DeviceMesh(dp, tp, pp, checked_order(order)) {}

int DeviceMesh::size(Axis axis) const {
  return axis == Axis::dp ? dp_ : axis == Axis::tp ? tp_ : pp_;
}

MeshCoord DeviceMesh::coord_of(int global_rank) const {
  DTRAIN_CHECK(global_rank >= 0 && global_rank < world_size(), "rank ", global_rank,
               " is outside the mesh of ", world_size());
  MeshCoord c;
  int rest = global_rank;
  for (Axis a : order_) {
    const int v = rest % size(a);
    rest /= size(a);
    (a == Axis::dp ? c.dp : a == Axis::tp ? c.tp : c.pp) = v;
  }
  return c;
}

int DeviceMesh::rank_of(MeshCoord coord) const {
  int rank = 0, stride = 1;
  for (Axis a : order_) {
    DTRAIN_CHECK(coord[a] >= 0 && coord[a] < size(a), name(a), " coordinate ", coord[a],
                 " outside 0..", size(a) - 1);
    rank += coord[a] * stride;
    stride *= size(a);
  }
  return rank;
}

std::vector<int> DeviceMesh::group_of(Axis axis, int global_rank) const {
  MeshCoord c = coord_of(global_rank);
  std::vector<int> members;
  for (int i = 0; i < size(axis); ++i) {
    (axis == Axis::dp ? c.dp : axis == Axis::tp ? c.tp : c.pp) = i;
    members.push_back(rank_of(c));
  }
  return members;
}

std::vector<std::vector<int>> DeviceMesh::groups(Axis axis) const {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < world_size(); ++r) {
    if (coord_of(r)[axis] == 0) out.push_back(group_of(axis, r));
  }
  return out;
}

std::string DeviceMesh::describe(int global_rank) const {
  return str("DP(", dp_, ")-TP(", tp_, ")-PP(", pp_, ")-rank(", global_rank, ")");
}

}  // namespace dtrain::parallel
