// What only the threads backend can show in one process: a barrier that holds everyone, and
// failure propagation (a rank that throws, exits early or stalls makes the others fail fast
// with an error that names it; run_ranks rethrows the cause; nothing hangs). Under MPI the
// same failures abort the job instead (see the MPI tests in tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/timer.h"

namespace dtrain::comm {
namespace {

using threads::run_ranks;
using threads::WorldOptions;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ThreadsBackend, BarrierHoldsEveryoneUntilTheLastArrives) {
  std::atomic<int> arrived{0};
  std::atomic<bool> early{false};
  run_ranks(4, [&](Communicator& comm) {
    if (comm.rank() == 3) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    arrived.fetch_add(1);
    comm.barrier();
    if (arrived.load() != 4) early.store(true);
  });
  EXPECT_FALSE(early.load());
}

// Wraps a communicator and throws on its `fail_at`-th send: a rank dying mid-collective.
class FailingCommunicator : public Communicator {
 public:
  FailingCommunicator(Communicator& inner, int fail_at) : inner_(inner), fail_at_(fail_at) {
    init_accounting(inner.world_size());
  }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int global_rank_of(int r) const override { return inner_.global_rank_of(r); }
  int world_size() const override { return inner_.world_size(); }
  void barrier() override { inner_.barrier(); }
  std::unique_ptr<Communicator> subgroup(std::span<const int> ranks,
                                         std::string_view name) override {
    return inner_.subgroup(ranks, name);
  }

 protected:
  RequestPtr start_send(const void* data, int64_t bytes, int peer, int tag) override {
    if (++sends_ == fail_at_) throw Error(str("injected fault on rank ", rank()));
    return inner_.isend(data, bytes, peer, tag);
  }
  RequestPtr start_recv(void* data, int64_t bytes, int peer, int tag) override {
    return inner_.irecv(data, bytes, peer, tag);
  }

 private:
  Communicator& inner_;
  int fail_at_;
  int sends_ = 0;
};

TEST(Failure, RankThrowingMidAllReduceFailsTheOthersFastNamingIt) {
  const double timeout_s = 2.0;
  const int world = 4, culprit = 2;
  std::vector<std::string> errors(world);
  std::vector<double> failed_after_s(world, -1);
  Stopwatch clock;
  try {
    run_ranks(
        world,
        [&](Communicator& comm) {
          std::vector<float> data(1 << 16, 1.0f);
          try {
            if (comm.rank() == culprit) {
              FailingCommunicator faulty(comm, /*fail_at=*/3);  // in the reduce-scatter
              all_reduce(faulty, data.data(), data.size(), ReduceOp::sum, Algorithm::ring);
            } else {
              all_reduce(comm, data.data(), data.size(), ReduceOp::sum, Algorithm::ring);
            }
          } catch (const std::exception& e) {
            errors[comm.rank()] = e.what();
            failed_after_s[comm.rank()] = clock.elapsed_s();
            throw;
          }
        },
        WorldOptions{timeout_s});
    FAIL() << "expected the injected fault";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "injected fault on rank 2"))
        << "rethrows the cause: " << e.what();
  }
  for (int r = 0; r < world; ++r) {
    if (r == culprit) continue;
    SCOPED_TRACE(str("rank ", r, ": ", errors[r]));
    EXPECT_TRUE(contains(errors[r], "rank 2 failed"));
    EXPECT_TRUE(contains(errors[r], "all_reduce #0"));
    EXPECT_GE(failed_after_s[r], 0);
    EXPECT_LT(failed_after_s[r], 2 * timeout_s);
  }
}

TEST(Failure, RankThatSkipsACollectiveIsNamedWhenItFinishes) {
  const int world = 3;
  std::vector<std::string> errors(world);
  try {
    run_ranks(world, [&](Communicator& comm) {
      if (comm.rank() == 1) return;  // leaves without taking part
      float x = 1;
      try {
        all_reduce(comm, &x, 1, ReduceOp::sum, Algorithm::ring);
      } catch (const std::exception& e) {
        errors[comm.rank()] = e.what();
        throw;
      }
    });
    FAIL() << "expected an error";
  } catch (const CommError& e) {
    EXPECT_TRUE(contains(e.what(), "rank 1")) << e.what();
  }
}

TEST(Failure, StalledRankTimesOutNamingThePeerAndOperation) {
  const double timeout_s = 0.3;
  Stopwatch clock;
  std::string error;
  try {
    run_ranks(
        2,
        [&](Communicator& comm) {
          if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          float x = 1;
          all_reduce(comm, &x, 1, ReduceOp::sum, Algorithm::ring);
        },
        WorldOptions{timeout_s});
    FAIL() << "expected a timeout";
  } catch (const CommError& e) {
    error = e.what();
  }
  EXPECT_TRUE(contains(error, "timed out")) << error;
  EXPECT_TRUE(contains(error, "rank 1")) << error;
  EXPECT_TRUE(contains(error, "all_reduce #0")) << error;
}

// The direct algorithm waits at flag barriers in shared memory, not on messages: a failed,
// departed or stalled member must still end every other rank's wait with its name, on the
// bandwidth path (two barriers) and on the latency path (one exchange).
TEST(Failure, DirectCollectivesNameAFailedOrDepartedRank) {
  for (int64_t count : {int64_t{16}, int64_t{1} << 16}) {
    SCOPED_TRACE(str(count, " elements"));
    std::vector<std::string> errors(3);
    try {
      run_ranks(
          3,
          [&](Communicator& comm) {
            std::vector<float> data(static_cast<size_t>(count), 1.0f);
            all_reduce(comm, data.data(), count, ReduceOp::sum, Algorithm::direct);
            if (comm.rank() == 1) throw Error("injected fault on rank 1");
            try {
              all_reduce(comm, data.data(), count, ReduceOp::sum, Algorithm::direct);
            } catch (const std::exception& e) {
              errors[comm.rank()] = e.what();
              throw;
            }
          },
          WorldOptions{30});
      FAIL() << "expected the injected fault";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), "injected fault on rank 1")) << e.what();
    }
    for (int r : {0, 2}) {
      EXPECT_TRUE(contains(errors[r], "rank 1")) << errors[r];
      EXPECT_TRUE(contains(errors[r], "all_reduce #1 (direct)")) << errors[r];
    }
  }
  // A rank that leaves without taking part.
  try {
    run_ranks(2, [&](Communicator& comm) {
      if (comm.rank() == 1) return;
      std::vector<float> data(1 << 16, 1.0f);
      reduce_scatter(comm, data.data(), data.data(), 1 << 16, ReduceOp::sum, Algorithm::direct);
    });
    FAIL() << "expected an error";
  } catch (const CommError& e) {
    EXPECT_TRUE(contains(e.what(), "rank 1 finished its work")) << e.what();
  }
}

TEST(Failure, DirectCollectiveTimesOutNamingTheStalledRank) {
  for (int64_t count : {int64_t{16}, int64_t{1} << 16}) {
    std::string error;
    try {
      run_ranks(
          3,
          [&](Communicator& comm) {
            if (comm.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
            std::vector<float> data(static_cast<size_t>(count), 1.0f);
            all_reduce(comm, data.data(), count, ReduceOp::sum, Algorithm::direct);
          },
          WorldOptions{0.3});
      FAIL() << "expected a timeout";
    } catch (const CommError& e) {
      error = e.what();
    }
    EXPECT_TRUE(contains(error, "timed out")) << error;
    EXPECT_TRUE(contains(error, "from rank 2 ")) << error;
    EXPECT_TRUE(contains(error, "all_reduce #0 (direct)")) << error;
  }
}

TEST(Failure, RunRanksRejectsZeroRanks) {
  EXPECT_THROW(run_ranks(0, [](Communicator&) {}), Error);
}

}  // namespace
}  // namespace dtrain::comm
