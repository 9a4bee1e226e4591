// sgemm() under bf16 precision, on both bgemm() backends, against a double-precision product of
// the bf16-rounded operands. The bound: C's entry is a K-term fp32 sum of exact products of
// 8-bit mantissas (16 bits: exact in fp32), so its error is at most gamma_K = K*u/(1-K*u) times
// sum |a||b| (u = 2^-24; Higham, Accuracy and Stability, 2nd ed., eq. 3.5), plus one rounding of
// alpha times it and of the beta term: (K + 2) * u * (|alpha| sum |a||b| + |beta c|) covers all.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/core/bf16.h"
#include "dtrain/core/rng.h"
#include "dtrain/model/bf16_gemm.h"
#include "dtrain/model/gemm.h"
#include "dtrain/model/thread_team.h"

namespace dtrain::model {
namespace {

struct Shape {
  int64_t M, N, K;
};

// Puts the chosen backend back when a test ends.
class BackendScope {
 public:
  explicit BackendScope(Bf16GemmBackend b) : saved_(bf16_gemm_backend()) {
    set_bf16_gemm_backend(b);
  }
  ~BackendScope() { set_bf16_gemm_backend(saved_); }
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;

 private:
  Bf16GemmBackend saved_;
};

std::vector<Bf16GemmBackend> backends() {
  std::vector<Bf16GemmBackend> b{Bf16GemmBackend::emulated};
  if (onednn_bf16_available()) b.push_back(Bf16GemmBackend::onednn);
  return b;
}

// op(X)(i, j) of a stored row-major matrix with stride ld.
double at(const std::vector<float>& X, Trans t, int64_t ld, int64_t i, int64_t j) {
  const float x =
      t == Trans::yes ? X[static_cast<size_t>(j * ld + i)] : X[static_cast<size_t>(i * ld + j)];
  return static_cast<double>(round_to_bf16(x));
}

void check_shape(const Shape& s, Trans ta, Trans tb, float alpha, float beta, const Compute& cx) {
  Rng rng(static_cast<uint64_t>(s.M * 131 + s.N * 7 + s.K));
  // Stored with padding columns (ld > what is read), which must not be touched or read.
  const int64_t lda = (ta == Trans::yes ? s.M : s.K) + 3;
  const int64_t ldb = (tb == Trans::yes ? s.K : s.N) + 5;
  const int64_t ldc = s.N + 2;
  auto fill = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(rng.normal());
    return v;
  };
  const auto A = fill((ta == Trans::yes ? s.K : s.M) * lda);
  const auto B = fill((tb == Trans::yes ? s.N : s.K) * ldb);
  const auto C0 = fill(s.M * ldc);
  std::vector<float> C = C0;
  Compute bf = cx;
  bf.precision = Precision::bf16;
  sgemm(ta, tb, s.M, s.N, s.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, bf);
  const double u = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < s.M; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t c = static_cast<size_t>(i * ldc + j);
      if (j >= s.N) {  // padding of C: untouched
        ASSERT_EQ(C[c], C0[c]);
        continue;
      }
      double exact = 0, magnitude = 0;
      for (int64_t k = 0; k < s.K; ++k) {
        const double p = at(A, ta, lda, i, k) * at(B, tb, ldb, k, j);
        exact += p;
        magnitude += std::fabs(p);
      }
      const double want = alpha * exact + beta * static_cast<double>(C0[c]);
      const double bound = static_cast<double>(s.K + 2) * u *
                           (std::fabs(alpha) * magnitude + std::fabs(beta * C0[c]));
      ASSERT_LE(std::fabs(static_cast<double>(C[c]) - want), bound)
          << s.M << "x" << s.N << "x" << s.K << " at (" << i << ", " << j << ")";
    }
  }
}

TEST(Bf16Gemm, MatchesTheExactProductOfTheRoundedOperands) {
  for (Bf16GemmBackend b : backends()) {
    const BackendScope scope(b);
    for (const Shape& s : {Shape{7, 5, 3}, Shape{64, 48, 96}, Shape{300, 40, 17},
                           Shape{33, 520, 64}, Shape{16, 16, 0}}) {
      for (Trans ta : {Trans::no, Trans::yes}) {
        for (Trans tb : {Trans::no, Trans::yes}) {
          for (float beta : {0.0f, 1.0f, 0.5f}) {
            SCOPED_TRACE(bf16_gemm_description());
            check_shape(s, ta, tb, beta == 0.5f ? 0.125f : 1.0f, beta, {});
          }
        }
      }
    }
  }
}

// A split GEMM (pieces of 256 rows or columns) on a team: each piece is its own bgemm call, and
// the result is the bits of no team, as with fp32.
TEST(Bf16Gemm, ATeamChangesWhoCallsNotWhatIsComputed) {
  for (Bf16GemmBackend b : backends()) {
    const BackendScope scope(b);
    for (const Shape& s : {Shape{600, 136, 64}, Shape{40, 1100, 96}}) {
      ASSERT_GT(gemm_split(s.M, s.N, s.K).parts, 1);
      check_shape(s, Trans::no, Trans::yes, 1.0f, 1.0f, {});
      Rng rng(5);
      std::vector<float> A(static_cast<size_t>(s.M * s.K)), B(static_cast<size_t>(s.K * s.N));
      for (float& x : A) x = static_cast<float>(rng.normal());
      for (float& x : B) x = static_cast<float>(rng.normal());
      Compute bf;
      bf.precision = Precision::bf16;
      std::vector<float> want(static_cast<size_t>(s.M * s.N));
      sgemm(Trans::no, Trans::no, s.M, s.N, s.K, 1.0f, A.data(), s.K, B.data(), s.N, 0.0f,
            want.data(), s.N, bf);
      for (int threads : {2, 3}) {
        ThreadTeam team(threads);
        Compute teamed = bf;
        teamed.team = &team;
        std::vector<float> got(want.size());
        sgemm(Trans::no, Trans::no, s.M, s.N, s.K, 1.0f, A.data(), s.K, B.data(), s.N, 0.0f,
              got.data(), s.N, teamed);
        EXPECT_EQ(got, want) << bf16_gemm_description() << ", " << threads << " threads";
      }
    }
  }
}

// A bf16 sgemm counts once in GemmStats, rounding included, with 2*M*N*K flops.
TEST(Bf16Gemm, StatsCountTheCallAndItsFlops) {
  GemmStats stats;
  Compute bf;
  bf.precision = Precision::bf16;
  bf.gemm_stats = &stats;
  std::vector<float> A(64 * 32, 1.0f), B(32 * 16, 0.5f), C(64 * 16);
  sgemm(Trans::no, Trans::no, 64, 16, 32, 1.0f, A.data(), 32, B.data(), 16, 0.0f, C.data(), 16, bf);
  EXPECT_EQ(stats.calls, 1);
  EXPECT_EQ(stats.flops, 2.0 * 64 * 16 * 32);
  for (float c : C) EXPECT_EQ(c, 16.0f);  // 32 products of 1 * 0.5, exact in every format
}

TEST(Bf16Gemm, DescribesItsBackend) {
  const std::string d = bf16_gemm_description();
  if (bf16_gemm_backend() == Bf16GemmBackend::onednn) {
    EXPECT_NE(d.find("oneDNN"), std::string::npos) << d;
  } else {
    EXPECT_NE(d.find("emulated"), std::string::npos) << d;
  }
}

// Why bf16 is slower than fp32, for each way the bf16 kernels can be missing; nothing when
// oneDNN's bf16 kernels run. A pure function of what was detected, so every case is tested here
// whatever CPU runs the test.
TEST(Bf16Gemm, SaysWhyBf16IsSlowerOnEveryCpu) {
  Bf16Support none{.cpu_avx512_bf16 = false,
                   .cpu_amx_bf16 = false,
                   .onednn_built = true,
                   .onednn_bf16 = false,
                   .onednn_isa = "avx2",
                   .cpu_model = "Intel Xeon E5-2690 v4"};
  const std::string no_instructions = bf16_slow_reason(none);
  EXPECT_NE(no_instructions.find("Intel Xeon E5-2690 v4 has no bf16 dot-product instructions"),
            std::string::npos)
      << no_instructions;
  EXPECT_NE(no_instructions.find("emulated"), std::string::npos);
  EXPECT_NE(no_instructions.find("conversions"), std::string::npos);

  Bf16Support lowered = none;
  lowered.cpu_avx512_bf16 = true;
  lowered.onednn_isa = "avx512_core";
  const std::string by_env = bf16_slow_reason(lowered);
  EXPECT_NE(by_env.find("has AVX512_BF16 but oneDNN reports only avx512_core"), std::string::npos)
      << by_env;
  EXPECT_NE(by_env.find("ONEDNN_MAX_CPU_ISA"), std::string::npos);

  Bf16Support amx_without_onednn = none;
  amx_without_onednn.cpu_amx_bf16 = true;
  amx_without_onednn.onednn_built = false;
  EXPECT_NE(bf16_slow_reason(amx_without_onednn)
                .find("has AMX-BF16 but this dtrain was built "
                      "without oneDNN"),
            std::string::npos);

  Bf16Support fast = lowered;
  fast.onednn_bf16 = true;
  EXPECT_EQ(bf16_slow_reason(fast), "");
  // This machine: where oneDNN reports a bf16 ISA, cpuid shows the instructions too.
  const Bf16Support here = bf16_support();
  EXPECT_FALSE(here.cpu_model.empty());
  EXPECT_EQ(here.onednn_bf16, onednn_bf16_available());
  if (onednn_bf16_available()) {
    EXPECT_TRUE(here.cpu_avx512_bf16 || here.cpu_amx_bf16);
    EXPECT_EQ(bf16_slow_reason(here), "");
  }
}

}  // namespace
}  // namespace dtrain::model
