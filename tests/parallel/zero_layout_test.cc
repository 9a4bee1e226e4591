// ZeRO's shard ranges: shard_layout gives every rank ceil(Psi/N) elements (plan::shard_count,
// so measured shard bytes match plan::model_state_bytes), the owned ranges tile the buffer,
// pieces of any range tile that range, and the reduce-scatter into shards / gather from shards
// round-trip exactly on the threads backend.
#include <gtest/gtest.h>

#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/cost/memory_model.h"
#include "dtrain/parallel/zero.h"

namespace dtrain::parallel {
namespace {

TEST(ShardLayout, PadsTheLastRangeAsPlanShardCount) {
  for (int64_t count : {0, 1, 2, 9, 10, 11, 36597, 34688}) {
    for (int ranks = 1; ranks <= 8; ++ranks) {
      const ShardLayout s = shard_layout(count, ranks);
      EXPECT_EQ(s.shard, plan::shard_count(count, ranks)) << count << " over " << ranks;
      EXPECT_GE(s.padded_count(), count);
      EXPECT_LT(s.padded_count() - count, ranks);
      int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const comm::Chunk own = s.owned(r);
        EXPECT_EQ(own.offset, r * s.shard);
        EXPECT_LE(own.count, s.shard);
        if (own.count > 0) {
          EXPECT_EQ(own.offset, next);
        }
        next += own.count;
      }
      EXPECT_EQ(next, count) << "the owned ranges tile the buffer";
    }
  }
}

TEST(ShardLayout, TheHeaderExample) {
  const ShardLayout s = shard_layout(10, 4);
  EXPECT_EQ(s.shard, 3);
  EXPECT_EQ(s.owned(3).offset, 9);
  EXPECT_EQ(s.owned(3).count, 1);
  const std::vector<comm::Chunk> p = s.pieces(4, 4);
  ASSERT_EQ(p.size(), 4u);
  const int64_t expected[4][2] = {{0, 0}, {0, 2}, {2, 2}, {4, 0}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(p[static_cast<size_t>(r)].offset, expected[r][0]) << r;
    EXPECT_EQ(p[static_cast<size_t>(r)].count, expected[r][1]) << r;
  }
}

TEST(ShardLayout, PiecesTileEveryRange) {
  const ShardLayout s = shard_layout(37, 4);  // shard 10, the last rank owns 7
  for (int64_t offset = 0; offset <= 37; offset += 3) {
    for (int64_t n = 0; offset + n <= 37; n += 5) {
      int64_t next = 0;
      for (const comm::Chunk& c : s.pieces(offset, n)) {
        EXPECT_EQ(c.offset, next);
        next += c.count;
      }
      EXPECT_EQ(next, n);
    }
  }
  EXPECT_THROW(s.pieces(30, 8), Error);
}

TEST(ZeroCollectives, ReduceIntoShardsThenGatherRoundTrips) {
  // 4 ranks, 37 elements (shard 10): rank r contributes (r + 1) * (i % 5 + 1) to element i, so
  // the average is (i % 5 + 1) * 2.5, exact in float. Reduce two overlapping-owner ranges into
  // the shards (the second accumulating twice), then gather the whole buffer back.
  const ShardLayout layout = shard_layout(37, 4);
  comm::threads::run_ranks(4, [&](comm::Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> grads(37);
    for (int64_t i = 0; i < 37; ++i) grads[static_cast<size_t>(i)] = (r + 1.0f) * (i % 5 + 1.0f);
    std::vector<float> shard(static_cast<size_t>(layout.shard), 0.0f);
    Buffer<float> scratch(0, MemoryTag::communication, nullptr);
    reduce_scatter_to_shard(comm, layout, 0, 17, grads.data(), shard.data(), false, scratch);
    reduce_scatter_to_shard(comm, layout, 17, 20, grads.data() + 17, shard.data(), false, scratch);
    reduce_scatter_to_shard(comm, layout, 17, 20, grads.data() + 17, shard.data(), true, scratch);
    std::vector<float> all(37, -1.0f);
    gather_from_shards(comm, layout, 0, 37, shard.data(), all.data());
    for (int64_t i = 0; i < 37; ++i) {
      const float avg = (i % 5 + 1.0f) * 2.5f;
      EXPECT_EQ(all[static_cast<size_t>(i)], i < 17 ? avg : 2 * avg) << "rank " << r << " i " << i;
    }
  });
}

}  // namespace
}  // namespace dtrain::parallel
