// Every matrix product of the model goes through sgemm() here: OpenBLAS's cblas_sgemm,
// optionally timed, so a benchmark can report the share of step time spent in GEMM and the
// GFLOP/s it reached. Also the BLAS thread count (default 1 per rank, so that ranks sharing
// a machine do not oversubscribe its cores).
#pragma once

#include <cstdint>
#include <string>

namespace dtrain::model {

struct GemmStats {
  int64_t calls = 0;
  double flops = 0;    // 2*M*N*K per call
  double time_us = 0;  // wall time inside cblas_sgemm
  void reset() { *this = {}; }
};

enum class Trans { no, yes };

// Row-major C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, with leading
// dimensions lda, ldb, ldc (the row strides of A, B, C as stored). beta = 1 accumulates.
// When `stats` is not null the call is timed and counted there.
void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc, GemmStats* stats = nullptr);

// OpenBLAS's thread count is process-wide: set it before a run.
void set_blas_threads(int threads);
int blas_threads();
std::string blas_corename();  // the kernel family OpenBLAS picked, e.g. "Cooperlake"

}  // namespace dtrain::model
