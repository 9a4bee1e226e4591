// The backend contract, on the backend under test (harness.h): rank and size, point-to-point
// ordering, tags and sizes, subgroups that never exchange each other's messages, barrier, and
// per-peer byte accounting.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "dtrain/comm/collectives.h"
#include "harness.h"

namespace dtrain::comm {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Communicator, RankAndSize) {
  testing::run_group(5, [](Communicator& comm) {
    EXPECT_EQ(comm.size(), 5);
    EXPECT_GE(comm.rank(), 0);
    EXPECT_LT(comm.rank(), 5);
    // Each rank learns every other rank's id from them: a permutation of 0..4.
    int64_t ids[5] = {0, 0, 0, 0, 0};
    ids[comm.rank()] = comm.rank() + 1;
    all_reduce(comm, ids, 5, ReduceOp::sum, Algorithm::naive);
    for (int r = 0; r < 5; ++r) EXPECT_EQ(ids[r], r + 1);
  });
}

TEST(Communicator, MessagesWithTheSameTagArriveInOrder) {
  testing::run_group(2, [](Communicator& comm) {
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
        EXPECT_EQ(v, i) << "message " << i;
      }
    }
  });
}

TEST(Communicator, TagsKeepMessagesApart) {
  testing::run_group(2, [](Communicator& comm) {
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
      EXPECT_EQ(a, 1);
      EXPECT_EQ(b, 2);
    }
  });
}

TEST(Communicator, SizeMismatchIsAnError) {
  testing::run_group(2, [](Communicator& comm) {
    if (comm.rank() == 1) {
      int64_t x = 0;
      try {
        comm.recv(&x, 4, 0, 3);
        ADD_FAILURE() << "expected a size mismatch";
      } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "size mismatch")) << e.what();
      }
    } else {
      int64_t x = 42;
      try {
        comm.send(&x, 8, 1, 3);
      } catch (const Error&) {
        // The sender may or may not hear of the mismatch, depending on the backend.
      }
    }
  });
}

TEST(Communicator, SubgroupsRunConcurrentlyWithoutCrossTalk) {
  // Six ranks as a 2 x 3 grid: rows of 3 and columns of 2, all-reducing at the same time.
  testing::run_group(6, [](Communicator& comm) {
    const int r = comm.rank();
    const int row = r / 3, col = r % 3;
    std::vector<int> row_members = {row * 3, row * 3 + 1, row * 3 + 2};
    std::vector<int> col_members = {col, col + 3};
    auto rows = comm.subgroup(row_members, "row");
    auto cols = comm.subgroup(col_members, "col");
    EXPECT_EQ(rows->size(), 3);
    EXPECT_EQ(cols->rank(), row);
    EXPECT_EQ(cols->global_rank(), comm.global_rank());
    float a = static_cast<float>(r), b = static_cast<float>(r);
    all_reduce(*rows, &a, 1, ReduceOp::sum);
    all_reduce(*cols, &b, 1, ReduceOp::sum);
    EXPECT_EQ(a, static_cast<float>(3 * row * 3 + 3));  // row*3 + (row*3+1) + (row*3+2)
    EXPECT_EQ(b, static_cast<float>(2 * col + 3));      // col + (col+3)
  });
}

TEST(Communicator, SameMembersDifferentNamesAreDifferentGroups) {
  testing::run_group(2, [](Communicator& comm) {
    std::vector<int> all = {0, 1};
    auto a = comm.subgroup(all, "a");
    auto b = comm.subgroup(all, "b");
    int x = -1, y = -1;
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
    EXPECT_EQ(x, peer + 10);
    EXPECT_EQ(y, peer + 20);
  });
}

TEST(Communicator, NonMemberCannotCreateAGroup) {
  testing::run_group(2, [](Communicator& comm) {
    std::vector<int> only_zero = {0};
    if (comm.rank() == 1) {
      EXPECT_THROW(comm.subgroup(only_zero, "x"), Error);
    }
  });
}

TEST(Communicator, BarrierCompletesOnEveryRank) {
  testing::run_group(4, [](Communicator& comm) {
    for (int i = 0; i < 10; ++i) comm.barrier();
  });
}

TEST(Communicator, CountsBytesPerPeer) {
  testing::run_group(3, [](Communicator& comm) {
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
    const std::vector<int64_t> per_peer = comm.bytes_sent_per_peer();
    const Traffic total = comm.traffic();
    for (int p = 0; p < 3; ++p) {
      EXPECT_EQ(per_peer[comm.global_rank_of(p)], p == r ? 0 : (r + 1) * 10);
    }
    EXPECT_EQ(total.bytes_sent, 2 * (r + 1) * 10);
    EXPECT_EQ(total.messages_sent, 2);
    // Every other rank p sends (p+1)*10 bytes to r.
    EXPECT_EQ(total.bytes_received, (1 + 2 + 3) * 10 - (r + 1) * 10);
  });
}

}  // namespace
}  // namespace dtrain::comm
