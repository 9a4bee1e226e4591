// The cache rule of the engine clock's products (clock/cache_model.h) on hand-worked values: a
// product whose operands fit the cache gets its warm sample, one far above it nearly the cold
// one, and in between the share of its bytes the cache keeps; stale operands also need the
// pass since their last use to fit.
#include <gtest/gtest.h>

#include "dtrain/clock/cache_model.h"

namespace dtrain::plan {
namespace {

// This build machine's caches: 1 MiB L2 per core, one 32 MiB L3 shared by 2 cores.
constexpr double kMiB = 1024.0 * 1024.0;
const CacheSizes kCaches{48 * 1024, 1 * kMiB, 32 * kMiB, 2};

TEST(CacheModel, RanksPerL3SpreadOverTheCaches) {
  EXPECT_EQ(ranks_per_l3(kCaches, 2, 1), 1);
  EXPECT_EQ(ranks_per_l3(kCaches, 2, 4), 4);  // one L3 for the whole (2-core) machine
  // 16 cores, 8 per L3 (two caches): 6 ranks put 3 on each, 7 put 4 on the busier one.
  const CacheSizes ccx{32e3, 1e6, 32e6, 8};
  EXPECT_EQ(ranks_per_l3(ccx, 16, 6), 3);
  EXPECT_EQ(ranks_per_l3(ccx, 16, 7), 4);
  EXPECT_EQ(ranks_per_l3(ccx, 16, 0), 1);
}

TEST(CacheModel, RankCacheIsTheLargerOfItsL2sAndItsL3Share) {
  EXPECT_EQ(rank_cache_bytes(kCaches, 1, 1), 32 * kMiB);
  EXPECT_EQ(rank_cache_bytes(kCaches, 1, 4), 8 * kMiB);
  // 64 ranks on one L3: 0.5 MiB each, below one core's L2.
  EXPECT_EQ(rank_cache_bytes(kCaches, 1, 64), 1 * kMiB);
  EXPECT_EQ(rank_cache_bytes(kCaches, 2, 64), 2 * kMiB);
  EXPECT_EQ(rank_cache_bytes(CacheSizes{}, 2, 1), 0);
}

TEST(CacheModel, WarmShareHandWorked) {
  const double cache = rank_cache_bytes(kCaches, 1, 2);  // 16 MiB
  // 256 x 256 x 256 fp32: A, B, C 256 KiB each; fits L2, and the pass (4 MiB) fits: warm.
  const double quarter = 256 * 1024;
  EXPECT_EQ(warm_share({2 * quarter, quarter}, cache, 4 * kMiB), 1);
  // Far above L3: 1 GiB of operands against 16 MiB is 1/64 resident, nearly cold.
  EXPECT_DOUBLE_EQ(warm_share({512 * kMiB, 512 * kMiB}, cache, 4 * kMiB), 1.0 / 64);
  // In between: 32 MiB of operands, half fresh, half stale, against 16 MiB (1/2 resident),
  // after a pass of 64 MiB (1/4 resident): (16 x 1/2 + 16 x 1/2 x 1/4) / 32 = 0.3125.
  EXPECT_DOUBLE_EQ(warm_share({16 * kMiB, 16 * kMiB}, cache, 64 * kMiB), 0.3125);
  // Operands that fit, but the weight was evicted by a pass 4x the cache: the fresh 3/4 warm,
  // the stale 1/4 at 1/4: 3/4 + 1/16.
  EXPECT_DOUBLE_EQ(warm_share({3 * kMiB, 1 * kMiB}, cache, 64 * kMiB), 0.8125);
  // Unknown caches: cold.
  EXPECT_EQ(warm_share({1, 1}, 0, 1), 0);
  EXPECT_EQ(warm_share({0, 0}, cache, 1), 0);
}

}  // namespace
}  // namespace dtrain::plan
