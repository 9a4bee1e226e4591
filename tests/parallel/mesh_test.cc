// DeviceMesh: every axis's groups partition the world exactly once, group membership follows
// from the coordinates alone, the worked example of mesh.h holds, and bad shapes are errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "dtrain/core/check.h"
#include "dtrain/parallel/mesh.h"

namespace dtrain::parallel {
namespace {

const char* kOrders[] = {"tp-dp-pp", "dp-tp-pp", "tp-pp-dp", "pp-tp-dp", "dp-pp-tp", "pp-dp-tp"};

TEST(Mesh, GroupsOfEachAxisPartitionTheWorld) {
  for (int dp : {1, 2, 3, 4}) {
    for (int tp : {1, 2, 4}) {
      for (int pp : {1, 2, 3}) {
        for (const char* order : kOrders) {
          const DeviceMesh mesh(dp, tp, pp, order);
          for (Axis axis : {Axis::dp, Axis::tp, Axis::pp}) {
            SCOPED_TRACE(std::string(order) + " axis " + std::string(name(axis)));
            const auto groups = mesh.groups(axis);
            EXPECT_EQ(static_cast<int>(groups.size()), mesh.world_size() / mesh.size(axis));
            std::multiset<int> seen;
            for (const auto& g : groups) {
              EXPECT_EQ(static_cast<int>(g.size()), mesh.size(axis));
              seen.insert(g.begin(), g.end());
              for (size_t i = 0; i < g.size(); ++i) {
                // Index in the group == coordinate on the axis; other coordinates shared.
                const MeshCoord c = mesh.coord_of(g[i]);
                EXPECT_EQ(c[axis], static_cast<int>(i));
                for (Axis other : {Axis::dp, Axis::tp, Axis::pp}) {
                  if (other == axis) continue;
                  EXPECT_EQ(c[other], mesh.coord_of(g[0])[other]);
                }
                EXPECT_EQ(mesh.group_of(axis, g[i]), g) << "every member sees the same group";
              }
            }
            for (int r = 0; r < mesh.world_size(); ++r) EXPECT_EQ(seen.count(r), 1u) << r;
          }
        }
      }
    }
  }
}

TEST(Mesh, CoordinatesRoundTrip) {
  const DeviceMesh mesh(3, 2, 4, "dp-pp-tp");
  for (int r = 0; r < mesh.world_size(); ++r) EXPECT_EQ(mesh.rank_of(mesh.coord_of(r)), r);
}

TEST(Mesh, WorkedExampleOfTheHeader) {
  const DeviceMesh mesh(2, 2, 2);
  EXPECT_EQ(mesh.groups(Axis::tp), (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(mesh.groups(Axis::dp), (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(mesh.groups(Axis::pp), (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(mesh.coord_of(5), (MeshCoord{0, 1, 1}));
  EXPECT_EQ(mesh.describe(5), "DP(2)-TP(2)-PP(2)-rank(5)");
  // dp fastest: DP groups are consecutive, TP groups stride by dp.
  const DeviceMesh dp_first(2, 2, 2, "dp-tp-pp");
  EXPECT_EQ(dp_first.group_of(Axis::dp, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(dp_first.group_of(Axis::tp, 0), (std::vector<int>{0, 2}));
}

TEST(Mesh, MembershipDoesNotDependOnHowTheMeshWasBuilt) {
  // The same shape built twice, and groups asked for in different orders, agree.
  const DeviceMesh a(2, 4, 2), b(2, 4, 2, "tp-dp-pp");
  for (int r = 15; r >= 0; --r) {
    for (Axis axis : {Axis::pp, Axis::tp, Axis::dp})
      EXPECT_EQ(a.group_of(axis, r), b.group_of(axis, r));
  }
}

TEST(Mesh, BadShapesAndOrdersAreErrors) {
  EXPECT_THROW(DeviceMesh(0, 1, 1), Error);
  EXPECT_THROW(DeviceMesh(1, -2, 1), Error);
  for (const char* bad : {"tp-dp", "tp-tp-pp", "tp-dp-xx", "", "tp-dp-pp-dp"}) {
    try {
      DeviceMesh m(2, 2, 2, bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--rank-order"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(DeviceMesh(2, 2, 2).coord_of(8), Error);
}

}  // namespace
}  // namespace dtrain::parallel
