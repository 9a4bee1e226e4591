// DeviceMesh: mixed-radix numbering of the (dp, cp, tp, pp) grid, fastest axis first.
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
    case Axis::cp:
      return "cp";
  }
  return "?";
}

std::optional<RankOrder> parse_rank_order(std::string_view text) {
  std::vector<Axis> parts;
  bool seen[4] = {false, false, false, false};
  size_t start = 0;
  while (true) {
    const size_t dash = text.find('-', start);
    const std::string_view part =
        text.substr(start, dash == std::string_view::npos ? std::string_view::npos : dash - start);
    std::optional<Axis> a;
    for (Axis candidate : {Axis::dp, Axis::tp, Axis::pp, Axis::cp}) {
      if (part == name(candidate)) a = candidate;
    }
    if (!a || seen[static_cast<int>(*a)] || parts.size() == 4) return std::nullopt;
    seen[static_cast<int>(*a)] = true;
    parts.push_back(*a);
    if (dash == std::string_view::npos) break;
    start = dash + 1;
  }
  if (!seen[0] || !seen[1] || !seen[2]) return std::nullopt;
  RankOrder order{};
  size_t i = 0;
  for (Axis a : parts) {
    order[i++] = a;
    if (a == Axis::tp && !seen[3]) order[i++] = Axis::cp;  // cp right outside tp
  }
  return order;
}

std::string to_string(const RankOrder& order) {
  std::string out;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] == Axis::cp && i > 0 && order[i - 1] == Axis::tp) continue;  // the implied place
    if (!out.empty()) out += "-";
    out += name(order[i]);
  }
  return out;
}

DeviceMesh::DeviceMesh(int dp, int cp, int tp, int pp, const RankOrder& order)
    : dp_(dp), cp_(cp), tp_(tp), pp_(pp), order_(order), order_text_(to_string(order)) {
  DTRAIN_CHECK(dp >= 1 && cp >= 1 && tp >= 1 && pp >= 1,
               "--dp, --cp, --tp and --pp must be >= 1, got dp ", dp, ", cp ", cp, ", tp ", tp,
               ", pp ", pp);
  bool seen[4] = {false, false, false, false};
  for (Axis a : order) seen[static_cast<int>(a)] = true;
  DTRAIN_CHECK(seen[0] && seen[1] && seen[2] && seen[3], "rank order ", order_text_,
               " must name tp, dp and pp once each (and cp at most once)");
}

DeviceMesh::DeviceMesh(int dp, int tp, int pp, const RankOrder& order)
    : DeviceMesh(dp, 1, tp, pp, order) {}

namespace {

RankOrder checked_order(std::string_view text) {
  const std::optional<RankOrder> order = parse_rank_order(text);
  DTRAIN_CHECK(order.has_value(), "--rank-order '", text,
               "' must name tp, dp and pp once each (cp at most once), fastest first (e.g. "
               "tp-dp-pp or tp-cp-dp-pp)");
  return *order;
}

}  // namespace

DeviceMesh::DeviceMesh(int dp, int tp, int pp, std::string_view order)
    : DeviceMesh(dp, 1, tp, pp, checked_order(order)) {}

int DeviceMesh::size(Axis axis) const {
  return axis == Axis::dp ? dp_ : axis == Axis::tp ? tp_ : axis == Axis::pp ? pp_ : cp_;
}

MeshCoord DeviceMesh::coord_of(int global_rank) const {
  DTRAIN_CHECK(global_rank >= 0 && global_rank < world_size(), "rank ", global_rank,
               " is outside the mesh of ", world_size());
  MeshCoord c;
  int rest = global_rank;
  for (Axis a : order_) {
    c[a] = rest % size(a);
    rest /= size(a);
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
    c[axis] = i;
    members.push_back(rank_of(c));
  }
  return members;
}

std::vector<int> DeviceMesh::group_of(Axis a, Axis b, int global_rank) const {
  MeshCoord c = coord_of(global_rank);
  std::vector<int> members;
  for (int i = 0; i < size(a); ++i) {
    for (int j = 0; j < size(b); ++j) {
      c[a] = i;
      c[b] = j;
      members.push_back(rank_of(c));
    }
  }
  std::sort(members.begin(), members.end());
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
  if (cp_ > 1) {
    return str("DP(", dp_, ")-CP(", cp_, ")-TP(", tp_, ")-PP(", pp_, ")-rank(", global_rank, ")");
  }
  return str("DP(", dp_, ")-TP(", tp_, ")-PP(", pp_, ")-rank(", global_rank, ")");
}

}  // namespace dtrain::parallel
