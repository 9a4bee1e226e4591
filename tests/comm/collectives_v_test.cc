// reduce_scatter_v and all_gather_v against closed-form results on the backend under test
// (harness.h): chunk layouts with unequal and empty chunks, world sizes 1..5, float and int64.
// Inputs are small integers, so sums are exact in any order and compared bit for bit. Traffic:
// a ring reduce-scatter sends every chunk but this rank's own, an all-gather every chunk but
// rank (r+1)'s, exactly (the ZeRO traffic tests build on this). The direct algorithm reads its
// own chunk from every peer (reduce-scatter) or every other chunk (all-gather) and sends
// nothing, in two barriers per segment.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dtrain/comm/collectives_v.h"
#include "dtrain/core/bf16.h"
#include "harness.h"

namespace dtrain::comm {
namespace {

// Layouts over `world` ranks: chunk sizes by pattern.
std::vector<Chunk> layout(int world, int pattern) {
  std::vector<Chunk> chunks;
  int64_t offset = 0;
  for (int i = 0; i < world; ++i) {
    int64_t count = 0;
    switch (pattern) {
      case 0:  // unequal: 3, 8, 13, ...
        count = 3 + 5 * i;
        break;
      case 1:  // all on the last rank (a ZeRO bucket inside one owner's range)
        count = i == world - 1 ? 1000 : 0;
        break;
      case 2:  // empty in the middle, large first
        count = i == 0 ? 70000 : (i % 2 == 1 ? 0 : 17);
        break;
      default:  // everything empty
        count = 0;
        break;
    }
    chunks.push_back({offset, count});
    offset += count;
  }
  return chunks;
}

int64_t total(const std::vector<Chunk>& chunks) {
  return chunks.back().offset + chunks.back().count;
}

// Steps of a direct call: two barriers per segment. A shared address space runs one segment;
// a shared window's slot holds, per segment, a piece of every chunk (reduce-scatter) or of
// the owner's chunk (all-gather).
int64_t direct_steps(Communicator& comm, const std::vector<Chunk>& chunks, int64_t elem,
                     bool reduce_scatter) {
  if (comm.size() == 1 || total(chunks) == 0) return 0;
  const SharedMemoryGroup* shm = comm.shared_memory();
  if (shm->shares_address_space()) return 2;
  int64_t longest = 0;
  for (const Chunk& c : chunks) longest = std::max(longest, c.count);
  const int64_t piece = shm->slot_bytes() / elem / (reduce_scatter ? comm.size() : 1);
  return 2 * ((longest + piece - 1) / piece);
}

template <typename T>
T value(int rank, int64_t i) {
  return static_cast<T>((rank + 1) * ((i % 5) + 1));
}

template <typename T>
void check_reduce_scatter(int world, int pattern, ReduceOp op, bool in_place,
                          Algorithm algo = Algorithm::ring) {
  const std::vector<Chunk> chunks = layout(world, pattern);
  const int64_t count = total(chunks);
  testing::run_group(world, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<T> input(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) input[static_cast<size_t>(i)] = value<T>(r, i);
    const Chunk mine = chunks[static_cast<size_t>(r)];
    std::vector<T> separate(static_cast<size_t>(mine.count));
    T* output = in_place ? input.data() + mine.offset : separate.data();
    const Traffic t = reduce_scatter_v<T>(comm, input.data(), output, chunks, op, algo);
    for (int64_t k = 0; k < mine.count; ++k) {
      const int64_t i = mine.offset + k;
      T sum = 0;
      for (int q = 0; q < world; ++q) sum += value<T>(q, i);
      if (op == ReduceOp::avg) sum = sum * (static_cast<T>(1) / static_cast<T>(world));
      ASSERT_EQ(output[k], sum) << "rank " << r << " element " << i;
    }
    if (algo == Algorithm::direct) {
      EXPECT_EQ(t.bytes_sent, 0) << "rank " << r;
      EXPECT_EQ(t.bytes_received, (world - 1) * mine.count * int64_t{sizeof(T)}) << "rank " << r;
      EXPECT_EQ(t.steps, direct_steps(comm, chunks, sizeof(T), true));
      return;
    }
    const int64_t expected_sent = world == 1 ? 0 : (count - mine.count) * int64_t{sizeof(T)};
    EXPECT_EQ(t.bytes_sent, expected_sent) << "rank " << r;
    EXPECT_EQ(t.steps, count == 0 ? 0 : world - 1);
  });
}

template <typename T>
void check_all_gather(int world, int pattern, bool in_place, Algorithm algo = Algorithm::ring) {
  const std::vector<Chunk> chunks = layout(world, pattern);
  const int64_t count = total(chunks);
  testing::run_group(world, [&](Communicator& comm) {
    const int r = comm.rank();
    const Chunk mine = chunks[static_cast<size_t>(r)];
    std::vector<T> output(static_cast<size_t>(count), T{-1});
    std::vector<T> own(static_cast<size_t>(mine.count));
    for (int64_t k = 0; k < mine.count; ++k) {
      own[static_cast<size_t>(k)] = value<T>(r, mine.offset + k);
      if (in_place) output[static_cast<size_t>(mine.offset + k)] = own[static_cast<size_t>(k)];
    }
    const T* input = in_place ? output.data() + mine.offset : own.data();
    const Traffic t = all_gather_v<T>(comm, input, output.data(), chunks, algo);
    for (int q = 0; q < world; ++q) {
      const Chunk c = chunks[static_cast<size_t>(q)];
      for (int64_t k = 0; k < c.count; ++k) {
        ASSERT_EQ(output[static_cast<size_t>(c.offset + k)], value<T>(q, c.offset + k))
            << "rank " << r << " chunk " << q;
      }
    }
    if (algo == Algorithm::direct) {
      EXPECT_EQ(t.bytes_sent, 0) << "rank " << r;
      EXPECT_EQ(t.bytes_received, world == 1 ? 0 : (count - mine.count) * int64_t{sizeof(T)})
          << "rank " << r;
      EXPECT_EQ(t.steps, direct_steps(comm, chunks, sizeof(T), false));
      return;
    }
    const int64_t skipped = chunks[static_cast<size_t>((r + 1) % world)].count;
    const int64_t expected_sent = world == 1 ? 0 : (count - skipped) * int64_t{sizeof(T)};
    EXPECT_EQ(t.bytes_sent, expected_sent) << "rank " << r;
  });
}

TEST(CollectivesV, ReduceScatterOverCallerChunks) {
  for (int world = 1; world <= 5; ++world) {
    for (int pattern = 0; pattern < 4; ++pattern) {
      SCOPED_TRACE(::testing::Message() << "world " << world << " pattern " << pattern);
      check_reduce_scatter<float>(world, pattern, ReduceOp::sum, false);
      check_reduce_scatter<float>(world, pattern, ReduceOp::avg, true);
      check_reduce_scatter<int64_t>(world, pattern, ReduceOp::sum, true);
      check_reduce_scatter<float>(world, pattern, ReduceOp::sum, false, Algorithm::direct);
      check_reduce_scatter<float>(world, pattern, ReduceOp::avg, true, Algorithm::direct);
      check_reduce_scatter<int64_t>(world, pattern, ReduceOp::sum, true, Algorithm::direct);
    }
  }
}

// bf16 is not a std floating-point type, and its ring average once came back as the sum: small
// integers on 1, 2 and 4 ranks, whose sums and averages bf16 holds exactly, ring and direct.
TEST(CollectivesV, Bf16ReduceScatterAverages) {
  for (int world : {1, 2, 4}) {
    for (Algorithm algo : {Algorithm::ring, Algorithm::direct}) {
      SCOPED_TRACE(::testing::Message() << "world " << world << " " << name(algo));
      const std::vector<Chunk> chunks = layout(world, 0);
      const int64_t count = total(chunks);
      testing::run_group(world, [&](Communicator& comm) {
        const int r = comm.rank();
        std::vector<bf16> input(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i)
          input[static_cast<size_t>(i)] = to_bf16(value<float>(r, i));
        const Chunk mine = chunks[static_cast<size_t>(r)];
        std::vector<bf16> output(static_cast<size_t>(mine.count));
        reduce_scatter_v<bf16>(comm, input.data(), output.data(), chunks, ReduceOp::avg, algo);
        for (int64_t k = 0; k < mine.count; ++k) {
          float sum = 0;
          for (int q = 0; q < world; ++q) sum += value<float>(q, mine.offset + k);
          ASSERT_EQ(to_float(output[static_cast<size_t>(k)]), sum / static_cast<float>(world))
              << "rank " << r << " element " << mine.offset + k;
        }
      });
    }
  }
}

TEST(CollectivesV, AllGatherOverCallerChunks) {
  for (int world = 1; world <= 5; ++world) {
    for (int pattern = 0; pattern < 4; ++pattern) {
      SCOPED_TRACE(::testing::Message() << "world " << world << " pattern " << pattern);
      check_all_gather<float>(world, pattern, false);
      check_all_gather<float>(world, pattern, true);
      check_all_gather<int64_t>(world, pattern, false);
      check_all_gather<float>(world, pattern, false, Algorithm::direct);
      check_all_gather<float>(world, pattern, true, Algorithm::direct);
      check_all_gather<int64_t>(world, pattern, true, Algorithm::direct);
    }
  }
}

TEST(CollectivesV, ChunksThatDoNotTileTheBufferAreRejected) {
  testing::run_group(2, [](Communicator& comm) {
    std::vector<float> data(10);
    const std::vector<Chunk> gap = {{0, 4}, {5, 5}};
    EXPECT_THROW(reduce_scatter_v<float>(comm, data.data(), data.data(), gap, ReduceOp::sum),
                 Error);
    const std::vector<Chunk> one = {{0, 10}};
    EXPECT_THROW(all_gather_v<float>(comm, data.data(), data.data(), one), Error);
  });
}

}  // namespace
}  // namespace dtrain::comm
