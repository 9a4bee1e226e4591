// Stage partitioning: every (L, P, v) split covers each block exactly once in consecutive
// chunks, the balanced split is balanced and places its remainder as documented, and every bad
// input is an error that names the flags.
#include "dtrain/cost/pipeline_stages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dtrain/core/check.h"

namespace dtrain::plan {
namespace {

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Every block in exactly one chunk, chunks consecutive in virtual-stage order, and the
// per-rank and per-layer views agree with the per-chunk one.
void expect_covers_once(const StagePartition& part, int layers) {
  ASSERT_EQ(part.layers(), layers);
  std::vector<int> owners(static_cast<size_t>(layers), 0);
  int next = 0;
  for (int vs = 0; vs < part.virtual_stages(); ++vs) {
    const int rank = part.rank_of(vs), chunk = part.chunk_of(vs);
    ASSERT_EQ(part.virtual_stage(rank, chunk), vs);
    ASSERT_EQ(part.first_layer(rank, chunk), next) << "chunk " << vs << " is not consecutive";
    ASSERT_GE(part.layer_count(rank, chunk), 1) << "chunk " << vs << " is empty";
    for (int l = next; l < next + part.layer_count(rank, chunk); ++l) {
      ++owners[static_cast<size_t>(l)];
      EXPECT_EQ(part.rank_of_layer(l), rank);
    }
    next += part.layer_count(rank, chunk);
  }
  EXPECT_EQ(next, layers);
  for (int l = 0; l < layers; ++l) EXPECT_EQ(owners[static_cast<size_t>(l)], 1) << "layer " << l;
  int sum = 0;
  for (int n : part.stage_layers()) sum += n;
  EXPECT_EQ(sum, layers);
}

TEST(PipelineStages, EveryBalancedSplitCoversEachBlockOnce) {
  for (int layers = 1; layers <= 16; ++layers) {
    for (int stages = 1; stages <= layers; ++stages) {
      for (int chunks = 1; stages * chunks <= layers; ++chunks) {
        SCOPED_TRACE(testing::Message() << "L " << layers << " P " << stages << " v " << chunks);
        const StagePartition part = balanced_partition(layers, stages, chunks);
        expect_covers_once(part, layers);
        const std::vector<int>& sizes = part.chunk_layers();
        const int n = stages * chunks;
        // Balanced: floor(L/n) or one more, and exactly L mod n chunks have the extra block.
        const int base = layers / n, extra = layers % n;
        EXPECT_EQ(std::count(sizes.begin(), sizes.end(), base + 1), extra);
        EXPECT_EQ(std::count(sizes.begin(), sizes.end(), base), n - extra);
        // The remainder rule: the last chunk never gets an extra block; chunk 0 only once every
        // interior chunk has one; interior chunks fill from the front.
        EXPECT_EQ(sizes.back(), base);
        if (n >= 2 && sizes.front() == base + 1) {
          for (int vs = 1; vs + 1 < n; ++vs) EXPECT_EQ(sizes[static_cast<size_t>(vs)], base + 1);
        }
        for (int vs = 2; vs + 1 < n; ++vs) {
          EXPECT_LE(sizes[static_cast<size_t>(vs)], sizes[static_cast<size_t>(vs - 1)]);
        }
      }
    }
  }
}

TEST(PipelineStages, InterleavedChunksAlternateRanks) {
  // The header's example: L = 8, P = 2, v = 2.
  const StagePartition part = balanced_partition(8, 2, 2);
  EXPECT_EQ(part.chunk_layers(), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(part.first_layer(0, 0), 0);
  EXPECT_EQ(part.first_layer(1, 0), 2);
  EXPECT_EQ(part.first_layer(0, 1), 4);
  EXPECT_EQ(part.first_layer(1, 1), 6);
  EXPECT_EQ(part.stage_layers(), (std::vector<int>{4, 4}));
  EXPECT_TRUE(part.has_embedding(0));
  EXPECT_TRUE(part.has_head(1));
  EXPECT_FALSE(part.has_head(0));
}

TEST(PipelineStages, ExplicitSplitIsKept) {
  const std::vector<int> list = parse_stage_layers("3,3,2", "--stage-layers");
  const StagePartition part = explicit_partition(8, 3, 1, list);
  EXPECT_EQ(part.stage_layers(), list);
  expect_covers_once(part, 8);
  const std::vector<int> chunked = {1, 2, 3, 2};  // P = 2, v = 2
  expect_covers_once(explicit_partition(8, 2, 2, chunked), 8);
}

TEST(PipelineStages, BadInputNamesTheFlags) {
  EXPECT_EQ(error_of([] { balanced_partition(4, 5); }), "--pp 5 is larger than --layers 4");
  EXPECT_EQ(error_of([] {
              explicit_partition(8, 3, 1, std::vector<int>{3, 3, 1});
            }),
            "--stage-layers 3,3,1 sums to 7, not --layers 8");
  EXPECT_EQ(error_of([] { balanced_partition(8, 4, 3); }),
            "--interleave 3 needs at least --pp * --interleave = 12 layers (one per model "
            "chunk), got --layers 8");
  EXPECT_EQ(error_of([] {
              explicit_partition(8, 2, 1, std::vector<int>{3, 3, 2});
            }),
            "--stage-layers 3,3,2 has 3 entries, but --pp is 2");
  EXPECT_NE(error_of([] {
              explicit_partition(8, 2, 2, std::vector<int>{4, 4});
            }).find("lists each model chunk, --pp * --interleave = 4"),
            std::string::npos);
  EXPECT_NE(error_of([] { balanced_partition(8, 0); }).find("--pp must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { balanced_partition(0, 1); }).find("--layers must be >= 1"),
            std::string::npos);
  // A command with other flag names gets them in its messages.
  const PartitionFlags flags{"--stages", "--layers", "--stage-layers", "--vp"};
  EXPECT_EQ(error_of([&] { balanced_partition(4, 5, 1, flags); }),
            "--stages 5 is larger than --layers 4");
}

// The one-chunk-at-a-time form agrees with the partition for every (L, n), and gives Llama 3
// 405B's published pipeline: 126 = 7 + 14 x 8 + 7 on 16 stages (floor(126 / 16) = 7, the 14
// left over on the 14 interior stages), DeepSeek-V3's 61 on 16: 3, 13 x 4, 3, 3.
TEST(PipelineStages, ChunkAtATimeIsThePartition) {
  for (int layers = 1; layers <= 40; ++layers) {
    for (int n = 1; n <= layers; ++n) {
      const StagePartition part = balanced_partition(layers, n);
      for (int vs = 0; vs < n; ++vs) {
        EXPECT_EQ(balanced_chunk_layers(layers, n, vs), part.layer_count(vs, 0)) << layers << n;
        EXPECT_EQ(balanced_chunk_first(layers, n, vs), part.first_layer(vs, 0)) << layers << n;
      }
    }
  }
  // A stage's blocks over its chunks: the sum of its chunks' (the interleaved split's ranks).
  for (int layers = 1; layers <= 40; ++layers) {
    for (int stages = 1; stages <= layers; ++stages) {
      for (int chunks = 1; stages * chunks <= layers; ++chunks) {
        const StagePartition part = balanced_partition(layers, stages, chunks);
        const std::vector<int> per_rank = part.stage_layers();
        for (int stage = 0; stage < stages; ++stage) {
          EXPECT_EQ(balanced_stage_layers(layers, stages, chunks, stage),
                    per_rank[static_cast<size_t>(stage)])
              << layers << " " << stages << " " << chunks << " " << stage;
        }
        const std::vector<int64_t> counts = balanced_stage_layer_counts(layers, stages, chunks);
        ASSERT_EQ(counts.size(), per_rank.size());
        for (size_t k = 0; k < counts.size(); ++k) EXPECT_EQ(counts[k], per_rank[k]);
        EXPECT_EQ(balanced_most_stage_layers(layers, stages, chunks),
                  *std::max_element(per_rank.begin(), per_rank.end()))
            << layers << " " << stages << " " << chunks;
      }
    }
  }
  std::vector<int> llama(16, 126 / 16 + 1);
  llama.front() = llama.back() = 126 / 16;
  EXPECT_EQ(balanced_partition(126, 16).stage_layers(), llama);
  std::vector<int> deepseek(16, 61 / 16);
  for (int k = 1; k <= 61 % 16; ++k) deepseek[static_cast<size_t>(k)] += 1;
  EXPECT_EQ(balanced_partition(61, 16).stage_layers(), deepseek);
  EXPECT_EQ(deepseek.back(), 3);
}

TEST(PipelineStages, ParseStageLayers) {
  EXPECT_EQ(parse_stage_layers("4", "--stage-layers"), (std::vector<int>{4}));
  EXPECT_EQ(parse_stage_layers("1,2,30", "--stage-layers"), (std::vector<int>{1, 2, 30}));
  for (const char* bad : {"", "3,,2", "a", "3,-1", "3,0", "3,2,", "2.5", " 3"}) {
    const std::string e = error_of([&] { parse_stage_layers(bad, "--stage-layers"); });
    EXPECT_NE(e.find("--stage-layers"), std::string::npos) << bad;
    EXPECT_NE(e.find("comma-separated list"), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace dtrain::plan
