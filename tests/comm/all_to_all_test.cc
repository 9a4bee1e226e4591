// all_to_all and all_to_all_v on the backend under test (harness.h: threads in test_comm, 8 MPI
// processes in test_comm_mpi): every element lands where its (sender, receiver, index) says, for
// world sizes 1..8, every algorithm, float, bf16 and int64, uneven and empty parts (a rank that
// sends nothing, one that receives nothing, everything empty), and each rank's measured traffic
// equals plan::all_to_all_traffic / all_to_all_v_traffic exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm/all_to_all.h"
#include "dtrain/cost/collective_cost.h"
#include "harness.h"

namespace dtrain::comm {
namespace {

// Element i of the part rank `from` sends to rank `to`: a small integer (exact in bf16, whose
// 8-bit mantissa holds every integer up to 256) that differs between senders, receivers and
// neighbouring elements.
float value(int from, int to, int64_t i) {
  return static_cast<float>(from * 8 + to + 1 + (i % 3) * 64);
}

template <typename T>
T as(float v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return to_bf16(v);
  } else {
    return static_cast<T>(v);
  }
}
template <typename T>
float back(T v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return to_float(v);
  } else {
    return static_cast<float>(v);
  }
}

constexpr float kUntouched = -7;

// Slot bytes of the group's shared window (0: a shared address space or no shared memory).
int64_t slot_bytes(Communicator& comm) {
  const SharedMemoryGroup* shm = comm.size() > 1 ? comm.shared_memory() : nullptr;
  return shm == nullptr || shm->shares_address_space() ? 0 : shm->slot_bytes();
}

const Algorithm kAlgorithms[] = {Algorithm::pairwise, Algorithm::direct, Algorithm::automatic};

template <typename T>
void check_equal_blocks(int world, int64_t block, Algorithm requested) {
  testing::run_group(world, [&](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    std::vector<T> in(static_cast<size_t>(n * block)), out(in.size(), as<T>(kUntouched));
    for (int j = 0; j < n; ++j) {
      for (int64_t i = 0; i < block; ++i) in[j * block + i] = as<T>(value(r, j, i));
    }
    const Traffic t = all_to_all(comm, in.data(), out.data(), block, requested);
    for (int q = 0; q < n; ++q) {
      for (int64_t i = 0; i < block; ++i) {
        ASSERT_EQ(back(out[q * block + i]), value(q, r, i))
            << "rank " << r << " block " << q << " element " << i << " (N=" << n << ", "
            << name(requested) << ")";
      }
    }
    const Algorithm algo = resolve_all_to_all_algorithm(comm, requested);
    const double s = static_cast<double>(n * block * static_cast<int64_t>(sizeof(T)));
    const int64_t segments =
        plan::direct_all_to_all_segments(block, n, slot_bytes(comm), sizeof(T));
    const plan::CollectiveTraffic want =
        block == 0 ? plan::CollectiveTraffic{} : plan::all_to_all_traffic(algo, s, n, segments);
    EXPECT_EQ(t.steps, want.steps) << "N=" << n << " " << name(algo);
    EXPECT_EQ(t.bytes_sent, static_cast<int64_t>(want.bytes_sent))
        << "N=" << n << " " << name(algo);
    EXPECT_EQ(t.bytes_received, static_cast<int64_t>(want.bytes_received))
        << "N=" << n << " " << name(algo);
    if (n > 1 && block > 0) {
      EXPECT_EQ(t.messages_sent, algo == Algorithm::pairwise ? n - 1 : 0);
    }
  });
}

TEST(AllToAll, EqualBlocksEveryWorldAlgorithmAndType) {
  for (int world : {1, 2, 3, 4, 8}) {
    for (Algorithm algo : kAlgorithms) {
      check_equal_blocks<float>(world, 5, algo);
      check_equal_blocks<bf16>(world, 7, algo);
      check_equal_blocks<int64_t>(world, 1, algo);
      check_equal_blocks<float>(world, 0, algo);
    }
  }
}

// Blocks longer than a shared window's piece run in several segments (MPI ranks on one node); a
// shared address space moves them in one.
TEST(AllToAll, BlocksLargerThanTheSharedWindowSlot) {
  check_equal_blocks<float>(4, 70000, Algorithm::direct);
  check_equal_blocks<float>(3, 70000, Algorithm::pairwise);
}

// Count patterns of all_to_all_v: elements rank i sends to rank j.
enum class Pattern { uneven, silent_sender, deaf_receiver, all_empty, one_large };

int64_t count_of(Pattern p, int world, int i, int j) {
  switch (p) {
    case Pattern::uneven:  // includes zeros, self parts too
      return (i * 3 + j * 5) % 7;
    case Pattern::silent_sender:  // rank 1 (mod N) sends nothing, to itself neither
      return i == 1 % world ? 0 : 2 + i + j;
    case Pattern::deaf_receiver:  // rank 2 (mod N) receives nothing
      return j == 2 % world ? 0 : 1 + (i + 2 * j) % 4;
    case Pattern::all_empty:
      return 0;
    case Pattern::one_large:  // rank 0's part for the last rank outgrows a window slot's piece
      return i == 0 && j == world - 1 ? 70001 : (i + j) % 3;
  }
  return 0;
}

const char* name_of(Pattern p) {
  switch (p) {
    case Pattern::uneven:
      return "uneven";
    case Pattern::silent_sender:
      return "silent sender";
    case Pattern::deaf_receiver:
      return "deaf receiver";
    case Pattern::all_empty:
      return "all empty";
    case Pattern::one_large:
      return "one large";
  }
  return "?";
}

// The parts are not packed the obvious way: send parts in rank order with a one-element gap
// after each, receive parts in reverse rank order, so offsets are checked and gaps stay untouched.
template <typename T>
void check_v(int world, Pattern pattern, Algorithm requested) {
  testing::run_group(world, [&](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    std::vector<Chunk> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
    int64_t in_len = 0, out_len = 0;
    for (int j = 0; j < n; ++j) {
      send[j] = {in_len, count_of(pattern, n, r, j)};
      in_len += send[j].count + 1;
    }
    for (int q = n - 1; q >= 0; --q) {
      recv[q] = {out_len, count_of(pattern, n, q, r)};
      out_len += recv[q].count + 1;
    }
    std::vector<T> in(static_cast<size_t>(in_len), as<T>(kUntouched));
    std::vector<T> out(static_cast<size_t>(out_len), as<T>(kUntouched));
    for (int j = 0; j < n; ++j) {
      for (int64_t i = 0; i < send[j].count; ++i) in[send[j].offset + i] = as<T>(value(r, j, i));
    }
    const Traffic t = all_to_all_v(comm, in.data(), send, out.data(), recv, requested);
    const std::string where = std::string(name_of(pattern)) + ", N=" + std::to_string(n) + ", " +
                              std::string(name(requested));
    std::vector<bool> written(out.size(), false);
    for (int q = 0; q < n; ++q) {
      for (int64_t i = 0; i < recv[q].count; ++i) {
        written[recv[q].offset + i] = true;
        ASSERT_EQ(back(out[recv[q].offset + i]), value(q, r, i))
            << "rank " << r << " part from " << q << " element " << i << " (" << where << ")";
      }
    }
    for (size_t k = 0; k < out.size(); ++k) {
      if (!written[k]) {
        ASSERT_EQ(back(out[k]), kUntouched) << "gap " << k << " (" << where << ")";
      }
    }
    // The formula from the count matrix: this rank's row and column, and the longest part.
    const Algorithm algo = resolve_all_to_all_algorithm(comm, requested);
    std::vector<double> sent(static_cast<size_t>(n)), received(static_cast<size_t>(n));
    int64_t longest = 0;
    for (int q = 0; q < n; ++q) {
      sent[q] = static_cast<double>(count_of(pattern, n, r, q) * sizeof(T));
      received[q] = static_cast<double>(count_of(pattern, n, q, r) * sizeof(T));
      for (int j = 0; j < n; ++j) {
        if (j != q) longest = std::max(longest, count_of(pattern, n, q, j));
      }
    }
    const plan::CollectiveTraffic want = plan::all_to_all_v_traffic(
        algo, sent, received, r,
        plan::direct_all_to_all_segments(longest, n, slot_bytes(comm), sizeof(T)));
    EXPECT_EQ(t.steps, want.steps) << where;
    EXPECT_EQ(t.bytes_sent, static_cast<int64_t>(want.bytes_sent)) << where;
    EXPECT_EQ(t.bytes_received, static_cast<int64_t>(want.bytes_received)) << where;
  });
}

TEST(AllToAllV, UnevenAndEmptyPartsEveryWorldAndAlgorithm) {
  for (int world : {1, 2, 3, 4, 8}) {
    for (Algorithm algo : kAlgorithms) {
      for (Pattern p :
           {Pattern::uneven, Pattern::silent_sender, Pattern::deaf_receiver, Pattern::all_empty}) {
        check_v<float>(world, p, algo);
      }
      check_v<bf16>(world, Pattern::uneven, algo);
      check_v<int64_t>(world, Pattern::silent_sender, algo);
    }
  }
}

TEST(AllToAllV, OnePartLargerThanTheSharedWindowSlot) {
  check_v<float>(4, Pattern::one_large, Algorithm::direct);
  check_v<bf16>(3, Pattern::one_large, Algorithm::direct);
  check_v<float>(4, Pattern::one_large, Algorithm::pairwise);
}

TEST(AllToAll, BadArgumentsNameTheProblem) {
  testing::run_group(2, [](Communicator& comm) {
    std::vector<float> in(4), out(4);
    const std::vector<Chunk> one = {{0, 1}};
    const std::vector<Chunk> two = {{0, 1}, {1, 1}};
    const std::vector<Chunk> negative = {{0, 1}, {1, -1}};
    EXPECT_THROW(all_to_all_v<float>(comm, in.data(), one, out.data(), two), Error);
    EXPECT_THROW(all_to_all_v<float>(comm, in.data(), two, out.data(), negative), Error);
    EXPECT_THROW(all_to_all<float>(comm, in.data(), out.data(), 2, Algorithm::ring), Error);
    EXPECT_THROW(all_to_all<float>(comm, in.data(), in.data(), 2), Error);
    EXPECT_THROW(all_to_all<float>(comm, in.data(), out.data(), -1), Error);
    EXPECT_THROW(all_to_all_v<float>(comm, in.data(), two, out.data(), two, Algorithm::native),
                 Error);
    try {
      all_to_all<float>(comm, in.data(), out.data(), 2, Algorithm::tree);
      ADD_FAILURE() << "tree was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("pairwise"), std::string::npos) << e.what();
    }
  });
}

#if !DTRAIN_TEST_MPI
// A count the sender and the receiver disagree on fails, naming both ranks, with either
// algorithm (threads only: under MPI a failed rank ends the job).
TEST(AllToAllV, CountMismatchIsAnErrorNamingBothRanks) {
  for (Algorithm algo : {Algorithm::pairwise, Algorithm::direct}) {
    try {
      testing::run_group(2, [&](Communicator& comm) {
        const int r = comm.rank();
        std::vector<float> in(8, 1), out(8);
        // Rank 0 sends 3 elements to rank 1, which expects 2.
        const std::vector<Chunk> send = {{0, 1}, {1, r == 0 ? 3 : 1}};
        const std::vector<Chunk> recv =
            r == 0 ? std::vector<Chunk>{{0, 1}, {1, 1}} : std::vector<Chunk>{{0, 2}, {2, 1}};
        all_to_all_v<float>(comm, in.data(), send, out.data(), recv, algo);
      });
      ADD_FAILURE() << name(algo) << ": the mismatch was not detected";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
    }
  }
}
#endif

}  // namespace
}  // namespace dtrain::comm
