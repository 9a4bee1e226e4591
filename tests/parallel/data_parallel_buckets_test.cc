// Data parallelism's bookkeeping: GPT's gradient units follow ParamTable::backward_order and
// tile the flat buffer top-down, buckets are contiguous runs of whole units of at least the
// configured size, the overlap measure is the intersection it claims, and the communication
// thread runs tasks in order, reports their times and hands failures to the waiter.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/check.h"
#include "dtrain/model/gpt_config.h"
#include "dtrain/parallel/comm_thread.h"
#include "dtrain/parallel/data_parallel.h"

namespace dtrain::parallel {
namespace {

model::GptConfig config() {
  return {.vocab = 257, .context = 32, .layers = 3, .heads = 3, .channels = 33};
}

TEST(GradUnits, FollowTheBackwardOrderAndTileTheBufferTopDown) {
  const model::ParamTable table = model::gpt_param_table(config());
  const StageUnits stage(table, model::whole_model(config()));
  const std::vector<GradUnit>& units = stage.units();
  ASSERT_EQ(units.size(), 5u);  // lnf, h.2, h.1, h.0, embeddings
  EXPECT_EQ(units.front().name, "lnf");
  EXPECT_EQ(units[1].name, "h.2");
  EXPECT_EQ(units.back().name, "embeddings");
  // Walking backward_order, every tensor falls in the current unit or the next one.
  size_t u = 0;
  for (int index : table.backward_order()) {
    const model::ParamTensor& t = table[static_cast<size_t>(index)];
    auto in = [&](size_t k) {
      return t.offset >= units[k].offset && t.offset + t.count <= units[k].offset + units[k].count;
    };
    if (!in(u)) ++u;
    ASSERT_LT(u, units.size());
    EXPECT_TRUE(in(u)) << t.name << " is not in unit " << units[u].name;
  }
  EXPECT_EQ(u, units.size() - 1);
  EXPECT_EQ(units.back().offset, 0);
  EXPECT_EQ(units.front().offset + units.front().count, table.total_count());
}

TEST(Buckets, AreContiguousRunsOfWholeUnitsOfAtLeastTheSize) {
  const model::ParamTable table = model::gpt_param_table(config());
  const std::vector<GradUnit> units = StageUnits(table, model::whole_model(config())).units();
  const int64_t block_bytes = units[1].count * 4;
  for (int64_t size :
       {int64_t{1}, block_bytes, block_bytes + 1, 2 * block_bytes, int64_t{1} << 30}) {
    const std::vector<Bucket> buckets = make_buckets(units, size);
    int next_unit = 0;
    int64_t end = table.total_count();
    for (size_t b = 0; b < buckets.size(); ++b) {
      const Bucket& k = buckets[b];
      EXPECT_EQ(k.first_unit, next_unit);
      EXPECT_EQ(k.offset + k.count, end) << "bucket " << b << " is one range below the last";
      if (b + 1 < buckets.size()) {
        EXPECT_GE(k.count * 4, size);
      }
      for (int u = k.first_unit; u <= k.last_unit; ++u)
        EXPECT_EQ(bucket_of(buckets, u), static_cast<int>(b));
      next_unit = k.last_unit + 1;
      end = k.offset;
    }
    EXPECT_EQ(next_unit, static_cast<int>(units.size()));
    EXPECT_EQ(end, 0);
  }
  EXPECT_EQ(make_buckets(units, 1).size(), units.size());  // one unit each
  EXPECT_EQ(make_buckets(units, int64_t{1} << 30).size(), 1u);
  EXPECT_THROW(make_buckets(units, 0), Error);
}

TEST(Overlap, IsTheIntersectionWithTheComputeWindows) {
  const std::vector<TimeInterval> compute = {{0, 10}, {20, 30}};
  const std::vector<TimeInterval> comm = {{5, 15}, {25, 35}};  // 5 + 5 hidden of 20
  EXPECT_DOUBLE_EQ(hidden_us(comm, compute), 10.0);
  EXPECT_DOUBLE_EQ(overlap_share(comm, compute), 0.5);
  EXPECT_DOUBLE_EQ(overlap_share({}, compute), 0.0);
}

TEST(CommThread, RunsTasksInOrderAndRecordsThem) {
  comm::threads::run_ranks(2, [](comm::Communicator& world) {
    const int all[] = {0, 1};
    CommThread thread(world.subgroup(all, "dp-async"));
    std::vector<int> order;
    int64_t last = -1;
    for (int k = 0; k < 5; ++k) {
      last = thread.submit("task " + std::to_string(k), [&order, k](comm::Communicator& c) {
        c.barrier();
        order.push_back(k);
      });
    }
    thread.wait(last);
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
    const std::vector<CommThread::Event> events = thread.take_events();
    ASSERT_EQ(events.size(), 5u);
    for (size_t k = 0; k < events.size(); ++k) {
      EXPECT_EQ(events[k].what, "task " + std::to_string(k));
      EXPECT_LE(events[k].time.begin_us, events[k].time.end_us);
      if (k > 0) {
        EXPECT_GE(events[k].time.begin_us, events[k - 1].time.end_us);
      }
    }
  });
}

TEST(CommThread, AFailedTaskIsRethrownToTheWaiter) {
  comm::threads::run_ranks(1, [](comm::Communicator& world) {
    const int all[] = {0};
    CommThread thread(world.subgroup(all, "dp-async"));
    thread.submit("fails", [](comm::Communicator&) { throw std::runtime_error("bucket 3 broke"); });
    const int64_t later = thread.submit("never runs", [](comm::Communicator&) {});
    EXPECT_THROW(thread.wait(later), std::runtime_error);
    EXPECT_THROW(thread.wait_all(), std::runtime_error);
  });
}

// A pipeline stage's units: only its blocks (every chunk's, the last first), the final LayerNorm
// on the last stage and the tied wte there alone ("wte"), the embeddings on the first; they tile
// the stage's own table top down, and block l's unit is found by its layer.
TEST(GradUnits, AStagesUnitsAreItsBlocksAndEnds) {
  model::GptConfig g = config();
  g.layers = 4;
  model::GptStage last;
  last.chunks = {{1, 1}, {3, 1}};  // an interleaved last rank: blocks 1 and 3
  last.embedding = false;
  last.head = true;
  const model::ParamTable table = model::gpt_stage_param_table(g, last);
  const StageUnits stage(table, last);
  ASSERT_EQ(stage.size(), 4);
  EXPECT_EQ(stage[0].name, "lnf");
  EXPECT_EQ(stage[1].name, "h.3");
  EXPECT_EQ(stage[2].name, "h.1");
  EXPECT_EQ(stage[3].name, "wte");
  EXPECT_EQ(stage.final_norm(), 0);
  EXPECT_EQ(stage.embeddings(), 3);
  EXPECT_EQ(stage.block(3), 1);
  EXPECT_EQ(stage.block(1), 2);
  EXPECT_THROW(stage.block(2), Error);
  EXPECT_EQ(stage[3].offset, 0);
  EXPECT_EQ(stage[0].offset + stage[0].count, table.total_count());
  model::GptStage middle;
  middle.chunks = {{2, 1}};
  middle.embedding = false;
  middle.head = false;
  const StageUnits inner(model::gpt_stage_param_table(g, middle), middle);
  ASSERT_EQ(inner.size(), 1);
  EXPECT_EQ(inner.final_norm(), -1);
  EXPECT_EQ(inner.embeddings(), -1);
}

}  // namespace
}  // namespace dtrain::parallel
