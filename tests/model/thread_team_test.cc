// ThreadTeam: ranges tile [0, n) exactly, every member runs once per run(), errors reach the
// caller, sgemm() makes the same BLAS calls with any team, and the model gives the same bits with
// a team as without one (by construction, so under any BLAS kernel).
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/cost/head_activation_memory.h"
#include "dtrain/model/gemm.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/thread_team.h"

namespace dtrain::model {
namespace {

TEST(SplitRange, TilesTheIntervalInAlignedPieces) {
  for (int64_t n : {0, 1, 15, 16, 17, 100, 512, 1001}) {
    for (int members : {1, 2, 3, 7}) {
      for (int64_t align : {1, 16}) {
        int64_t next = 0;
        for (int m = 0; m < members; ++m) {
          const Range r = split_range(n, m, members, align);
          EXPECT_EQ(r.begin, std::min(next, n)) << n << " " << members << " " << align;
          EXPECT_GE(r.end, r.begin);
          if (r.begin < n) {
            EXPECT_EQ(r.begin % align, 0);
          }
          next = std::max(next, r.end);
        }
        EXPECT_EQ(next, n) << n << " " << members << " " << align;
      }
    }
  }
}

TEST(ThreadTeam, EveryMemberRunsOncePerRun) {
  for (int size : {1, 2, 3, 5}) {
    ThreadTeam team(size);
    std::vector<std::atomic<int>> count(static_cast<size_t>(size));
    const int runs = 300;  // back-to-back runs, as the ops issue them
    for (int r = 0; r < runs; ++r) {
      team.run([&](int member) { count[static_cast<size_t>(member)].fetch_add(1); });
    }
    for (int m = 0; m < size; ++m) EXPECT_EQ(count[static_cast<size_t>(m)].load(), runs) << size;
  }
}

TEST(ThreadTeam, AWorkersExceptionReachesTheCallerAndTheTeamLivesOn) {
  ThreadTeam team(3);
  EXPECT_THROW(team.run([](int member) {
    if (member == 2) throw std::runtime_error("member 2 failed");
  }),
               std::runtime_error);
  std::atomic<int> sum{0};
  team.run([&](int member) { sum += member; });
  EXPECT_EQ(sum.load(), 0 + 1 + 2);
  EXPECT_THROW(ThreadTeam(0), Error);
}

// Sets OpenBLAS's thread count for one test, as the engine does (1 whenever there is a team).
class BlasThreads {
 public:
  explicit BlasThreads(int threads) : before_(blas_threads()) { set_blas_threads(threads); }
  ~BlasThreads() { set_blas_threads(before_); }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  int before_;
};

TEST(GemmSplit, PiecesOf256RowsOrColumnsAndAtLeastTwo) {
  EXPECT_EQ(gemm_split(512, 128, 16).parts, 1);  // 2^21 flops: one call
  EXPECT_EQ(gemm_split(2048, 512, 128).parts, 8);
  EXPECT_TRUE(gemm_split(2048, 512, 128).by_rows);
  EXPECT_EQ(gemm_split(16, 4096, 4096).parts, 16);  // columns when N is the longer side
  EXPECT_FALSE(gemm_split(16, 4096, 4096).by_rows);
  EXPECT_EQ(gemm_split(128, 128, 512).parts, 2);  // a large GEMM is always shared by 2 threads
  EXPECT_EQ(gemm_split(8, 8, 1 << 20).parts, 1);  // too narrow to cut into 16-row pieces
}

// Every transpose, row and column pieces, sizes that are not multiples of 16, beta 0 and 1:
// the result of 2, 3 and 5 threads has the bits of no team.
TEST(Sgemm, ATeamChangesWhoCallsTheBlasNotWhatItComputes) {
  const BlasThreads one(1);
  struct Shape {
    int64_t M, N, K;
  };
  for (const Shape& s : {Shape{512, 384, 128}, Shape{1000, 136, 64}, Shape{128, 512, 512},
                         Shape{40, 2050, 96}, Shape{600, 600, 17}}) {
    for (Trans ta : {Trans::no, Trans::yes}) {
      for (Trans tb : {Trans::no, Trans::yes}) {
        for (float beta : {0.0f, 1.0f}) {
          Rng rng(static_cast<uint64_t>(s.M * 7 + s.N));
          auto fill = [&](int64_t n) {
            std::vector<float> v(static_cast<size_t>(n));
            for (float& x : v) x = static_cast<float>(rng.normal());
            return v;
          };
          const auto A = fill(s.M * s.K), B = fill(s.K * s.N), C0 = fill(s.M * s.N);
          const int64_t lda = ta == Trans::yes ? s.M : s.K, ldb = tb == Trans::yes ? s.K : s.N;
          std::vector<float> want = C0;
          sgemm(ta, tb, s.M, s.N, s.K, 0.5f, A.data(), lda, B.data(), ldb, beta, want.data(), s.N);
          ASSERT_GT(gemm_split(s.M, s.N, s.K).parts, 1) << s.M << "x" << s.N << "x" << s.K;
          for (int threads : {2, 3, 5}) {
            ThreadTeam team(threads);
            std::vector<float> got = C0;
            sgemm(ta, tb, s.M, s.N, s.K, 0.5f, A.data(), lda, B.data(), ldb, beta, got.data(), s.N,
                  Compute{&team, nullptr});
            EXPECT_EQ(got, want) << s.M << "x" << s.N << "x" << s.K << " " << threads << " threads";
          }
        }
      }
    }
  }
}

// Bench-sized layers so that every kind of split happens (GEMM rows, heads, elementwise).
TEST(ThreadTeam, ModelGivesTheSameBitsWithAndWithoutATeam) {
  const BlasThreads one(1);
  const GptConfig g = gpt_preset("bench").config;
  const int64_t B = 8, T = 64;
  Rng rng(3);
  std::vector<int32_t> x(B * T), y(B * T);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(g.vocab)));
    y[i] = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(g.vocab)));
  }
  MemoryTracker tracker;
  GptModel serial(g, &tracker);
  serial.init_params(9);
  serial.zero_grads();
  const float want = serial.forward(x, y, B, T);
  serial.backward();
  for (int threads : {2, 3}) {
    ThreadTeam team(threads);
    GptModel split(g, &tracker, nullptr, &team);
    split.init_params(9);
    split.zero_grads();
    EXPECT_EQ(split.forward(x, y, B, T), want) << threads << " threads";
    split.backward();
    EXPECT_TRUE(std::equal(serial.grads().begin(), serial.grads().end(), split.grads().begin()))
        << threads << " threads";
    // The workspace holds one attention-score gradient per thread, as the plan says.
    MemoryTracker ws_tracker;
    GptWorkspace ws(g, B, T, &ws_tracker, threads);
    EXPECT_EQ(static_cast<double>(ws_tracker.current_bytes(MemoryTag::activations)),
              plan::workspace_activation_bytes({.seq = T,
                                                .micro_batch = B,
                                                .hidden = g.channels,
                                                .vocab = g.vocab,
                                                .threads = threads}));
  }
}

}  // namespace
}  // namespace dtrain::model
