// sgemm(): a thin timed wrapper over cblas_sgemm.
#include "dtrain/model/gemm.h"

#include <cblas.h>

#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"

namespace dtrain::model {

void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc, GemmStats* stats) {
  if (M == 0 || N == 0) return;
  const double start_us = stats != nullptr ? now_us() : 0.0;
  cblas_sgemm(CblasRowMajor, trans_a == Trans::yes ? CblasTrans : CblasNoTrans,
              trans_b == Trans::yes ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
              static_cast<blasint>(N), static_cast<blasint>(K), alpha, A, static_cast<blasint>(lda),
              B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
  if (stats != nullptr) {
    stats->time_us += now_us() - start_us;
    stats->flops += 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
    ++stats->calls;
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
