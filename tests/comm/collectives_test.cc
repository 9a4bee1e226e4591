// The collectives against closed-form results, swept over collective x algorithm x world size
// x element count, on the backend under test (harness.h). Inputs are small integers, so every sum
// is exact in any order and results are compared bit for bit. Each call's measured traffic (steps,
// bytes sent and received) is compared with the planner's formula, plan::collective_traffic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm/collectives.h"
#include "dtrain/cost/collective_cost.h"
#include "harness.h"

namespace dtrain::comm {
namespace {

enum class CountKind { zero, one, world_minus_one, world_plus_one, prime, large };

int64_t element_count(CountKind kind, int world) {
  switch (kind) {
    case CountKind::zero:
      return 0;
    case CountKind::one:
      return 1;
    case CountKind::world_minus_one:
      return world - 1;
    case CountKind::world_plus_one:
      return world + 1;
    case CountKind::prime:
      return 1009;
    case CountKind::large:
      return int64_t{1} << 20;
  }
  return 0;
}

// Rank r's element i. Sums over ranks are ((i % 7) + 1) * N(N+1)/2: small exact integers.
template <typename T>
T input_value(int rank, int64_t i) {
  T base = static_cast<T>((rank + 1) * ((i % 7) + 1));
  if constexpr (std::is_integral_v<T>) base += T{1} << 40;  // exercise the high bits
  return base;
}

template <typename T>
T expected_reduction(ReduceOp op, int world, int64_t i) {
  T sum = 0, max = input_value<T>(0, i);
  for (int r = 0; r < world; ++r) {
    sum += input_value<T>(r, i);
    max = std::max(max, input_value<T>(r, i));
  }
  if (op == ReduceOp::max) return max;
  if (op == ReduceOp::avg) return sum * (static_cast<T>(1) / static_cast<T>(world));
  return sum;
}

// The rank whose chunk holds element i.
int owner_of(int64_t count, int world, int64_t i) {
  for (int q = 0; q < world; ++q) {
    const Chunk ch = chunk_of(count, world, q);
    if (i >= ch.offset && i < ch.offset + ch.count) return q;
  }
  return -1;
}

struct SweepCase {
  CollectiveOp op;
  Algorithm algo;
  int world;
  CountKind count;
};

std::string case_name(const ::testing::TestParamInfo<SweepCase>& info) {
  const SweepCase& c = info.param;
  static const char* kCounts[] = {"zero", "one", "Nminus1", "Nplus1", "prime", "large"};
  return str(name(c.op), "_", name(c.algo), "_N", c.world, "_", kCounts[static_cast<int>(c.count)]);
}

// Runs one collective of each element type on every rank and records outputs and traffic.
template <typename T>
Traffic run_one(Communicator& comm, const SweepCase& c, int64_t count, ReduceOp op,
                std::vector<T>& out) {
  const int n = comm.size(), r = comm.rank();
  const int root = (n - 1) / 2;  // not always rank 0
  std::vector<T> in(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) in[i] = input_value<T>(r, i);
  const Chunk mine = chunk_of(count, n, r);
  switch (c.op) {
    case CollectiveOp::all_reduce:
      out = in;
      return all_reduce(comm, out.data(), count, op, c.algo);
    case CollectiveOp::broadcast:
      out = in;
      return broadcast(comm, out.data(), count, root, c.algo);
    case CollectiveOp::reduce:
      out.assign(static_cast<size_t>(count), T{-1});
      return reduce(comm, in.data(), r == root ? out.data() : nullptr, count, op, root, c.algo);
    case CollectiveOp::reduce_scatter:
      out.assign(static_cast<size_t>(mine.count), T{-1});
      return reduce_scatter(comm, in.data(), out.data(), count, op, c.algo);
    case CollectiveOp::all_gather: {
      out.assign(static_cast<size_t>(count), T{-1});
      std::vector<T> own(in.begin() + mine.offset, in.begin() + mine.offset + mine.count);
      return all_gather(comm, own.data(), out.data(), count, c.algo);
    }
    case CollectiveOp::all_to_all:  // its own sweep: all_to_all_test.cc
      break;
  }
  return {};
}

template <typename T>
void check_output(const SweepCase& c, int64_t count, ReduceOp op, int rank,
                  const std::vector<T>& out) {
  const int n = c.world, root = (n - 1) / 2;
  const Chunk mine = chunk_of(count, n, rank);
  auto fail = [&](int64_t i, T got, T want) {
    ADD_FAILURE() << "rank " << rank << " element " << i << ": got " << got << ", want " << want;
  };
  switch (c.op) {
    case CollectiveOp::all_reduce:
      for (int64_t i = 0; i < count; ++i) {
        const T want = expected_reduction<T>(op, n, i);
        if (out[i] != want) return fail(i, out[i], want);
      }
      break;
    case CollectiveOp::broadcast:
      for (int64_t i = 0; i < count; ++i) {
        const T want = input_value<T>(root, i);
        if (out[i] != want) return fail(i, out[i], want);
      }
      break;
    case CollectiveOp::reduce:
      if (rank != root) break;
      for (int64_t i = 0; i < count; ++i) {
        const T want = expected_reduction<T>(op, n, i);
        if (out[i] != want) return fail(i, out[i], want);
      }
      break;
    case CollectiveOp::reduce_scatter:
      ASSERT_EQ(static_cast<int64_t>(out.size()), mine.count);
      for (int64_t i = 0; i < mine.count; ++i) {
        const T want = expected_reduction<T>(op, n, mine.offset + i);
        if (out[i] != want) return fail(mine.offset + i, out[i], want);
      }
      break;
    case CollectiveOp::all_gather:
      for (int64_t i = 0; i < count; ++i) {
        const T want = input_value<T>(owner_of(count, n, i), i);
        if (out[i] != want) return fail(i, out[i], want);
      }
      break;
    case CollectiveOp::all_to_all:
      break;
  }
}

class CollectiveSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(CollectiveSweep, MatchesClosedFormAndTrafficFormula) {
  const SweepCase c = GetParam();
  const int64_t count = element_count(c.count, c.world);
  const ReduceOp f32_op =
      c.world % 3 == 0 ? ReduceOp::avg : (c.world % 3 == 1 ? ReduceOp::sum : ReduceOp::max);
  const ReduceOp i64_op = c.world % 2 == 0 ? ReduceOp::sum : ReduceOp::max;
  const int root = (c.world - 1) / 2;
  const Algorithm algo = choose_algorithm(c.algo, 0, c.world);
  testing::run_group(c.world, [&](Communicator& comm) {
    const int r = comm.rank();
    SCOPED_TRACE(str("rank ", r));
    std::vector<float> f32;
    std::vector<int64_t> i64;
    const Traffic t32 = run_one<float>(comm, c, count, f32_op, f32);
    const Traffic t64 = run_one<int64_t>(comm, c, count, i64_op, i64);
    check_output<float>(c, count, f32_op, r, f32);
    check_output<int64_t>(c, count, i64_op, r, i64);

    // The naive all_reduce / reduce_scatter / all_gather use rank 0 as their root.
    const bool rooted = c.op == CollectiveOp::broadcast || c.op == CollectiveOp::reduce;
    int64_t totals[3] = {0, 0, 0};  // bytes sent, received and moved by this rank, both calls
    if (algo == Algorithm::native) {
      // MPI moves these bytes itself: the communicator neither sees nor counts them.
      EXPECT_EQ(t32.bytes_sent + t64.bytes_sent, 0);
      return;
    }
    for (const auto& [traffic, elem] :
         {std::pair{t32, sizeof(float)}, std::pair{t64, sizeof(int64_t)}}) {
      const double bytes = static_cast<double>(count) * elem;
      plan::CollectiveTraffic want =
          plan::collective_traffic(c.op, algo, bytes, c.world, r, rooted ? root : 0);
      // Uneven chunks differ from S/N by less than one element, once per chunk sent: one per
      // step for ring, up to N-1 in all for Bruck and the naive root.
      double slack = static_cast<double>(std::max<int64_t>(want.steps, c.world - 1)) * elem;
      if (algo == Algorithm::direct && c.world > 1) {
        // Through a shared window (MPI) the call runs in slot-sized segments, each chunked
        // anew: up to N-1 elements of rounding per segment.
        const SharedMemoryGroup* shm = comm.shared_memory();
        ASSERT_NE(shm, nullptr);
        const int64_t slot =
            shm->shares_address_space() ? 0 : shm->slot_bytes() / static_cast<int64_t>(elem);
        const int64_t segments = plan::direct_segments(c.op, count, c.world, slot);
        want = plan::direct_traffic(c.op, bytes, c.world, r, rooted ? root : 0, segments);
        slack = static_cast<double>(std::max<int64_t>(segments, 1) * (c.world - 1)) * elem;
      }
      EXPECT_EQ(traffic.steps, want.steps) << "steps";
      EXPECT_LE(std::abs(traffic.bytes_sent - want.bytes_sent), slack)
          << "bytes sent: measured " << traffic.bytes_sent << ", formula " << want.bytes_sent;
      EXPECT_LE(std::abs(traffic.bytes_received - want.bytes_received), slack)
          << "bytes received: measured " << traffic.bytes_received << ", formula "
          << want.bytes_received;
      // Moved (docs/algorithms.md, "Bytes moved"): sent, plus what direct reads in place, which
      // is everything it receives; a message-passing algorithm reads nothing in place.
      EXPECT_EQ(traffic.bytes_read, algo == Algorithm::direct ? traffic.bytes_received : 0);
      EXPECT_EQ(want.bytes_read, algo == Algorithm::direct ? want.bytes_received : 0);
      EXPECT_LE(std::abs(traffic.bytes_moved() - want.bytes_moved()), 2 * slack)
          << "bytes moved: measured " << traffic.bytes_moved() << ", formula "
          << want.bytes_moved();
      totals[0] += traffic.bytes_sent;
      totals[1] += traffic.bytes_received;
      totals[2] += traffic.bytes_moved();
    }
    all_reduce(comm, totals, 3, ReduceOp::sum, Algorithm::naive);
    // (direct reads peers' memory without their sending it: its two counts differ.)
    if (algo != Algorithm::direct) {
      EXPECT_EQ(totals[0], totals[1]) << "every byte sent is received exactly once";
    }
    if (algo == Algorithm::ring && count > 0 && c.world > 1 &&
        (c.op == CollectiveOp::reduce_scatter || c.op == CollectiveOp::all_gather ||
         c.op == CollectiveOp::all_reduce)) {
      // Summed over ranks the ring's rounding cancels: each step moves every chunk once.
      const int64_t per_pass = (c.world - 1) * count * static_cast<int64_t>(sizeof(float) + 8);
      EXPECT_EQ(totals[0], c.op == CollectiveOp::all_reduce ? 2 * per_pass : per_pass);
    }
    // Direct moves every chunk once, as the ring does, though a reduce-scatter or an all-gather
    // writes nothing into a peer (its bytes sent are 0): summed over ranks, exactly the ring's
    // bytes (an all-reduce off its latency path, whose every rank reads each peer's whole buffer).
    const bool bandwidth_path =
        c.op != CollectiveOp::all_reduce ||
        count * static_cast<int64_t>(sizeof(float)) > comm::kDirectExchangeMaxBytes;
    if (algo == Algorithm::direct && count > 0 && c.world > 1 && bandwidth_path &&
        (c.op == CollectiveOp::reduce_scatter || c.op == CollectiveOp::all_gather ||
         c.op == CollectiveOp::all_reduce)) {
      const int64_t per_pass = (c.world - 1) * count * static_cast<int64_t>(sizeof(float) + 8);
      EXPECT_EQ(totals[2], c.op == CollectiveOp::all_reduce ? 2 * per_pass : per_pass);
    }
  });
}

std::vector<SweepCase> sweep_cases() {
  std::vector<SweepCase> cases;
  for (CollectiveOp op :
       {CollectiveOp::all_reduce, CollectiveOp::reduce_scatter, CollectiveOp::all_gather,
        CollectiveOp::broadcast, CollectiveOp::reduce}) {
    std::vector<Algorithm> algorithms = {Algorithm::ring, Algorithm::naive, Algorithm::tree,
                                         Algorithm::direct};
#if DTRAIN_TEST_MPI
    algorithms.push_back(Algorithm::native);  // OpenMPI's own, checked against the same results
#endif
    for (Algorithm algo : algorithms) {
      for (int world : {1, 2, 3, 4, 5, 7, 8}) {
        for (CountKind count : {CountKind::zero, CountKind::one, CountKind::world_minus_one,
                                CountKind::world_plus_one, CountKind::prime, CountKind::large}) {
          cases.push_back({op, algo, world, count});
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, CollectiveSweep, ::testing::ValuesIn(sweep_cases()), case_name);

TEST(Collectives, AutomaticPicksTreeForSmallAndRingForLarge) {
  EXPECT_EQ(choose_algorithm(Algorithm::automatic, 4096, 8), Algorithm::tree);
  EXPECT_EQ(choose_algorithm(Algorithm::automatic, kTreeMaxBytes + 1, 8), Algorithm::ring);
  EXPECT_EQ(choose_algorithm(Algorithm::naive, 1, 8), Algorithm::naive);
}

TEST(Collectives, AllReduceResultIsBitwiseIdenticalOnEveryRank) {
  // Non-integer data: sums round differently in different orders, yet every rank must end
  // with the same bits (the ring shares one reduced copy of each chunk).
  for (Algorithm algo : {Algorithm::ring, Algorithm::naive, Algorithm::tree, Algorithm::direct}) {
    testing::run_group(5, [&](Communicator& comm) {
      const int64_t count = 1000;
      std::vector<float> data(count);
      for (int64_t i = 0; i < count; ++i) data[i] = std::sin(0.37f * i + comm.rank()) / 3.0f;
      all_reduce(comm, data.data(), count, ReduceOp::avg, algo);
      std::vector<float> rank0 = data;
      broadcast(comm, rank0.data(), count, 0, Algorithm::naive);
      EXPECT_EQ(data, rank0) << name(algo) << " rank " << comm.rank();
    });
  }
}

TEST(Collectives, AverageOfIntegersIsRejected) {
  testing::run_group(2, [](Communicator& comm) {
    int64_t x = 1;
    EXPECT_THROW(all_reduce(comm, &x, 1, ReduceOp::avg), Error);
  });
}

#if !DTRAIN_TEST_MPI
TEST(Collectives, NativeNeedsABackendWithItsOwnCollectives) {
  testing::run_group(2, [](Communicator& comm) {
    float x = 1;
    try {
      all_reduce(comm, &x, 1, ReduceOp::sum, Algorithm::native);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--algo native"), std::string::npos) << e.what();
    }
  });
}
#endif

TEST(Collectives, RootOutsideTheGroupIsAnError) {
  testing::run_group(2, [](Communicator& comm) {
    float x = 1;
    try {
      broadcast(comm, &x, 1, /*root=*/2);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("root 2"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace dtrain::comm
