// sgemm(): cblas_sgemm, split by rows of C across a team, timed when asked.
#include "dtrain/model/gemm.h"

#include <cblas.h>

#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"

namespace dtrain::model {
namespace {

void call_cblas(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a == Trans::yes ? CblasTrans : CblasNoTrans,
              trans_b == Trans::yes ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
              static_cast<blasint>(N), static_cast<blasint>(K), alpha, A, static_cast<blasint>(lda),
              B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

constexpr double kSplitFlops = 4194304.0;  // 2^22: below this a split costs more than it saves
constexpr int64_t kRowAlign = 16;

}  // namespace

void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc, const Compute& cx) {
  if (M == 0 || N == 0) return;
  const double flops =
      2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  const double start_us = cx.gemm_stats != nullptr ? now_us() : 0.0;
  ThreadTeam* team = flops >= kSplitFlops ? cx.team_for(M, 2 * kRowAlign) : nullptr;
  if (team == nullptr) {
    call_cblas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  } else {
    // Rows m0..m1 of op(A): rows of A, or columns when A is transposed.
    team->run([&](int member) {
      const Range r = split_range(M, member, team->size(), kRowAlign);
      if (r.end <= r.begin) return;
      const float* a = trans_a == Trans::yes ? A + r.begin : A + r.begin * lda;
      call_cblas(trans_a, trans_b, r.end - r.begin, N, K, alpha, a, lda, B, ldb, beta,
                 C + r.begin * ldc, ldc);
    });
  }
  if (cx.gemm_stats != nullptr) {
    cx.gemm_stats->time_us += now_us() - start_us;
    cx.gemm_stats->flops += flops;
    ++cx.gemm_stats->calls;
  }
}

void set_blas_threads(int threads) {
  DTRAIN_CHECK(threads > 0, "--blas-threads must be positive (got ", threads, ")");
  openblas_set_num_threads(threads);
}

int blas_threads() {
  return openblas_get_num_threads();
}

std::string blas_corename() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

}  // namespace dtrain::model
