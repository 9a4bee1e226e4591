// The backend contract on the threads backend: point-to-point ordering and sizes, subgroups,
// barrier, per-peer accounting, and failure propagation (a rank that throws, exits early or
// stalls makes the others fail fast with an error that names it; nothing hangs).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
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

TEST(Communicator, RankAndSize) {
  std::vector<int> seen(5, -1);
  run_ranks(5, [&](Communicator& comm) {
    EXPECT_EQ(comm.size(), 5);
    seen[comm.rank()] = comm.global_rank();
  });
  for (int r = 0; r < 5; ++r) EXPECT_EQ(seen[r], r);
}

TEST(Communicator, MessagesWithTheSameTagArriveInOrder) {
  run_ranks(2, [](Communicator& comm) {
    constexpr int kMessages = 100;
    if (comm.rank() == 0) {
      std::vector<RequestPtr> sends;
      std::vector<int> values(kMessages);
      std::iota(values.begin(), values.end(), 0);
      for (int i = 0; i < kMessages; ++i) sends.push_back(comm.isend(&values[i], 4, 1, 7));
      for (auto& s : sends) s->wait();
    } else {
      for (int i = 0; i < kMessages; ++i) {
        int v = -1;
        comm.recv(&v, 4, 0, 7);
        if (v != i) throw Error(str("message ", i, " arrived as ", v));
      }
    }
  });
}

TEST(Communicator, TagsKeepMessagesApart) {
  run_ranks(2, [](Communicator& comm) {
    if (comm.rank() == 0) {
      int a = 1, b = 2;
      auto sa = comm.isend(&a, 4, 1, /*tag=*/1);
      auto sb = comm.isend(&b, 4, 1, /*tag=*/2);
      sa->wait();
      sb->wait();
    } else {
      int b = 0, a = 0;
      comm.recv(&b, 4, 0, 2);  // receive in the opposite order
      comm.recv(&a, 4, 0, 1);
      if (a != 1 || b != 2) throw Error(str("tags mixed up: a=", a, " b=", b));
    }
  });
}

TEST(Communicator, SizeMismatchIsAnErrorNamingBothSides) {
  try {
    run_ranks(2, [](Communicator& comm) {
      int64_t x = 0;
      if (comm.rank() == 0)
        comm.send(&x, 8, 1, 3);
      else
        comm.recv(&x, 4, 0, 3);
    });
    FAIL() << "expected an error";
  } catch (const CommError& e) {
    EXPECT_TRUE(contains(e.what(), "size mismatch")) << e.what();
    EXPECT_TRUE(contains(e.what(), "8 bytes")) << e.what();
  }
}

TEST(Communicator, SubgroupsRunConcurrentlyWithoutCrossTalk) {
  // Six ranks as a 2 x 3 grid: rows of 3 and columns of 2, all-reducing at the same time.
  std::vector<float> row_sum(6), col_sum(6);
  run_ranks(6, [&](Communicator& comm) {
    const int r = comm.rank();
    const int row = r / 3, col = r % 3;
    std::vector<int> row_members = {row * 3, row * 3 + 1, row * 3 + 2};
    std::vector<int> col_members = {col, col + 3};
    auto rows = comm.subgroup(row_members, "row");
    auto cols = comm.subgroup(col_members, "col");
    EXPECT_EQ(rows->size(), 3);
    EXPECT_EQ(cols->rank(), row);
    float a = static_cast<float>(r), b = static_cast<float>(r);
    all_reduce(*rows, &a, 1, ReduceOp::sum);
    all_reduce(*cols, &b, 1, ReduceOp::sum);
    row_sum[r] = a;
    col_sum[r] = b;
  });
  for (int r = 0; r < 6; ++r) {
    const int row = r / 3, col = r % 3;
    EXPECT_EQ(row_sum[r], static_cast<float>(3 * row * 3 + 3)) << r;
    EXPECT_EQ(col_sum[r], static_cast<float>(2 * col + 3)) << r;
  }
}

TEST(Communicator, SameMembersDifferentNamesAreDifferentGroups) {
  run_ranks(2, [](Communicator& comm) {
    std::vector<int> all = {0, 1};
    auto a = comm.subgroup(all, "a");
    auto b = comm.subgroup(all, "b");
    int x = comm.rank() + 10, y = comm.rank() + 20;
    const int peer = 1 - comm.rank();
    // Post on b first and a second: a group-unaware backend would pair them crosswise.
    auto rb = b->irecv(&y, 4, peer, 0);
    auto ra = a->irecv(&x, 4, peer, 0);
    int sx = comm.rank() + 10, sy = comm.rank() + 20;
    auto sa = a->isend(&sx, 4, peer, 0);
    auto sb = b->isend(&sy, 4, peer, 0);
    ra->wait();
    rb->wait();
    sa->wait();
    sb->wait();
    if (x != peer + 10 || y != peer + 20) throw Error("groups exchanged each other's messages");
  });
}

TEST(Communicator, NonMemberCannotCreateAGroup) {
  EXPECT_THROW(run_ranks(2,
                         [](Communicator& comm) {
                           std::vector<int> only_zero = {0};
                           if (comm.rank() == 1) comm.subgroup(only_zero, "x");
                         }),
               Error);
}

TEST(Communicator, BarrierHoldsEveryoneUntilTheLastArrives) {
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

TEST(Communicator, CountsBytesPerPeer) {
  std::vector<std::vector<int64_t>> per_peer(3);
  std::vector<Traffic> totals(3);
  run_ranks(3, [&](Communicator& comm) {
    std::vector<char> buf(100);
    const int r = comm.rank();
    // Rank r sends (r+1)*10 bytes to each other rank.
    std::vector<RequestPtr> requests;
    std::vector<std::vector<char>> inbox(3, std::vector<char>(100));
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      requests.push_back(comm.irecv(inbox[p].data(), (p + 1) * 10, p, 0));
      requests.push_back(comm.isend(buf.data(), (r + 1) * 10, p, 0));
    }
    for (auto& q : requests) q->wait();
    per_peer[r] = comm.bytes_sent_per_peer();
    totals[r] = comm.traffic();
  });
  for (int r = 0; r < 3; ++r) {
    for (int p = 0; p < 3; ++p) EXPECT_EQ(per_peer[r][p], p == r ? 0 : (r + 1) * 10);
    EXPECT_EQ(totals[r].bytes_sent, 2 * (r + 1) * 10);
    EXPECT_EQ(totals[r].messages_sent, 2);
    // Every other rank p sends (p+1)*10 bytes to r.
    EXPECT_EQ(totals[r].bytes_received, (1 + 2 + 3) * 10 - (r + 1) * 10);
  }
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

TEST(Failure, RunRanksRejectsZeroRanks) {
  EXPECT_THROW(run_ranks(0, [](Communicator&) {}), Error);
}

}  // namespace
}  // namespace dtrain::comm
