// DeviceMesh with the CP axis: a three-axis order places cp right after tp (cost/placement.h's
// rule) and prints as given, a four-axis order is taken as written, the four axes' groups
// partition the world, and the DP x CP group is every rank sharing tp and pp.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "dtrain/parallel/mesh.h"

namespace dtrain::parallel {
namespace {

TEST(MeshCp, ThreeAxisOrderPutsCpRightAfterTp) {
  const std::optional<RankOrder> order = parse_rank_order("dp-tp-pp");
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(*order, (RankOrder{Axis::dp, Axis::tp, Axis::cp, Axis::pp}));
  EXPECT_EQ(to_string(*order), "dp-tp-pp");
  const std::optional<RankOrder> explicit_order = parse_rank_order("cp-dp-tp-pp");
  ASSERT_TRUE(explicit_order.has_value());
  EXPECT_EQ(to_string(*explicit_order), "cp-dp-tp-pp");
  EXPECT_FALSE(parse_rank_order("tp-cp-cp-pp").has_value());
  EXPECT_FALSE(parse_rank_order("tp-cp-pp").has_value()) << "dp missing";
  EXPECT_FALSE(parse_rank_order("tp-cp-dp-pp-dp").has_value());
}

// dp 2, cp 2, tp 2 in the default order tp-cp-dp-pp: rank = tp + 2 (cp + 2 dp).
TEST(MeshCp, WorkedExample) {
  const DeviceMesh mesh(2, 2, 2, 1, kDefaultRankOrder);
  EXPECT_EQ(mesh.world_size(), 8);
  EXPECT_EQ(mesh.coord_of(6), (MeshCoord{.dp = 1, .tp = 0, .pp = 0, .cp = 1}));
  EXPECT_EQ(mesh.group_of(Axis::cp, 4), (std::vector<int>{4, 6}));
  EXPECT_EQ(mesh.group_of(Axis::tp, 4), (std::vector<int>{4, 5}));
  EXPECT_EQ(mesh.group_of(Axis::dp, Axis::cp, 5), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(mesh.describe(5), "DP(2)-CP(2)-TP(2)-PP(1)-rank(5)");
}

TEST(MeshCp, GroupsOfEveryAxisPartitionTheWorld) {
  for (const char* text : {"tp-cp-dp-pp", "cp-tp-dp-pp", "dp-cp-tp-pp", "pp-dp-tp-cp"}) {
    const DeviceMesh mesh(2, 2, 2, 2, *parse_rank_order(text));
    for (Axis axis : {Axis::dp, Axis::tp, Axis::pp, Axis::cp}) {
      SCOPED_TRACE(std::string(text) + " " + std::string(name(axis)));
      std::multiset<int> seen;
      for (const std::vector<int>& g : mesh.groups(axis)) {
        for (size_t i = 0; i < g.size(); ++i) {
          EXPECT_EQ(mesh.coord_of(g[i])[axis], static_cast<int>(i));
          seen.insert(g[i]);
        }
      }
      EXPECT_EQ(seen.size(), 16u);
      for (int r = 0; r < 16; ++r) EXPECT_EQ(seen.count(r), 1u);
    }
  }
}

}  // namespace
}  // namespace dtrain::parallel
