// gather_in_rank_order and sum_in_rank_order on the backend under test (harness.h), over world
// sizes 1..8 and lengths 0, 1, 3 and 1000. The values are doubles whose sum rounds differently
// in different orders, so "equal to the serial left-to-right sum" tests the order, and every
// rank's result is compared bit for bit with the one each rank computes alone.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "dtrain/comm/rank_order.h"
#include "harness.h"

namespace dtrain::comm {
namespace {

// Rank r's element i: magnitudes from 1e-8 to 1e8 and both signs, so a sum in another order
// rounds to other bits.
double value_of(int rank, size_t i) {
  const double sign = (static_cast<size_t>(rank) + i) % 3 == 0 ? -1.0 : 1.0;
  const auto exponent = static_cast<double>((static_cast<size_t>(rank) * 7 + i * 3) % 17) - 8.0;
  return sign * std::pow(10.0, exponent) /
         (1.0 + 0.1 * static_cast<double>(rank) + 0.01 * static_cast<double>(i));
}

// Rank r's values; with n >= 3 the first three are bits no arithmetic would keep: a negative
// zero, a NaN with a payload, a subnormal.
std::vector<double> values_of(int rank, size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value_of(rank, i);
  return v;
}

std::vector<double> odd_values_of(int rank, size_t n) {
  std::vector<double> v = values_of(rank, n);
  if (n >= 3) {
    v[0] = -0.0;
    v[1] = std::bit_cast<double>(int64_t{0x7ff800000000abcd} + rank);
    v[2] = std::numeric_limits<double>::denorm_min() * (rank + 1);
  }
  return v;
}

TEST(RankOrder, GatherReturnsEveryRanksBitsInRankOrder) {
  for (int world = 1; world <= 8; ++world) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}}) {
      testing::run_group(world, [&](Communicator& comm) {
        const std::vector<double> all = gather_in_rank_order(comm, odd_values_of(comm.rank(), n));
        ASSERT_EQ(all.size(), n * static_cast<size_t>(world));
        for (int r = 0; r < world; ++r) {
          const std::vector<double> want = odd_values_of(r, n);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(std::bit_cast<int64_t>(all[static_cast<size_t>(r) * n + i]),
                      std::bit_cast<int64_t>(want[i]))
                << "world " << world << " n " << n << " on rank " << comm.rank() << ": rank " << r
                << "'s element " << i;
          }
        }
      });
    }
  }
}

TEST(RankOrder, SumIsTheSerialLeftToRightSumOnEveryRank) {
  for (int world = 1; world <= 8; ++world) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}}) {
      // The serial loop over the ranks, as any one process computes it alone.
      std::vector<double> want = values_of(0, n);
      for (int r = 1; r < world; ++r) {
        const std::vector<double> v = values_of(r, n);
        for (size_t i = 0; i < n; ++i) want[i] += v[i];
      }
      testing::run_group(world, [&](Communicator& comm) {
        const std::vector<double> sum = sum_in_rank_order(comm, values_of(comm.rank(), n));
        ASSERT_EQ(sum.size(), n);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(std::bit_cast<int64_t>(sum[i]), std::bit_cast<int64_t>(want[i]))
              << "world " << world << " n " << n << " rank " << comm.rank() << " element " << i;
        }
      });
    }
  }
}

// The data above depends on the order: summed from the last rank down, some elements of the
// 8-rank sum round to other bits (otherwise the test above could not see a wrong order).
TEST(RankOrder, TheTestDataIsOrderSensitive) {
  const size_t n = 1000;
  std::vector<double> forward = values_of(0, n), backward = values_of(7, n);
  for (int r = 1; r < 8; ++r) {
    const std::vector<double> f = values_of(r, n), b = values_of(7 - r, n);
    for (size_t i = 0; i < n; ++i) {
      forward[i] += f[i];
      backward[i] += b[i];
    }
  }
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += forward[i] != backward[i] ? 1 : 0;
  EXPECT_GT(differ, 0u);
}

}  // namespace
}  // namespace dtrain::comm
