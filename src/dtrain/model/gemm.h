// Every matrix product of the model goes through sgemm() here: OpenBLAS's cblas_sgemm on fixed
// pieces of C that a ThreadTeam shares out when there is one, and optionally timed so that a
// benchmark can report the share of step time spent in GEMM and the GFLOP/s it reached. Under
// bf16 precision the same call rounds the operands to bf16 and multiplies them with bgemm()
// (bf16_gemm.h). Also the OpenBLAS thread count (default 1 per rank, so that ranks sharing a
// machine do not oversubscribe).
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/model/precision.h"
#include "dtrain/model/thread_team.h"

namespace dtrain::model {

struct GemmStats {
  int64_t calls = 0;
  double flops = 0;    // 2*M*N*K per call
  double time_us = 0;  // wall time inside sgemm (a split call counts once, as its wall time)
  void reset() { *this = {}; }
};

// How an op may use the machine: a team to split its work across (null: the calling thread
// alone) and the GEMM counters (null: not counted). Ops take it as their last argument.
struct Compute {
  ThreadTeam* team = nullptr;
  GemmStats* gemm_stats = nullptr;
  // bf16: sgemm() rounds A and B to bf16 (round to nearest even) and sums in fp32.
  Precision precision = Precision::fp32;
  int threads() const { return team != nullptr ? team->size() : 1; }
  // The team if `work` units are worth splitting (at least min_work per member), else null.
  ThreadTeam* team_for(int64_t work, int64_t min_work) const {
    return threads() > 1 && work >= min_work * threads() ? team : nullptr;
  }
};

enum class Trans { no, yes };

// How sgemm() cuts C: `parts` pieces of rows (by_rows) or of columns, boundaries at multiples
// of 16. A function of the shape alone, never of the team: with or without a team, and with any
// team size, C is computed by the same cblas_sgemm calls on the same pieces, so the bits cannot
// depend on the thread count whatever the BLAS kernel does with a shape (OpenBLAS's Haswell
// kernels, for one, round a row of C differently when the rows around it change).
struct GemmSplit {
  bool by_rows = true;
  int64_t parts = 1;
};
GemmSplit gemm_split(int64_t M, int64_t N, int64_t K);

// Row-major C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, with leading
// dimensions lda, ldb, ldc (the row strides of A, B, C as stored). beta = 1 accumulates.
// C is computed piece by piece as gemm_split() says, each piece by one cblas_sgemm call; a team
// shares the pieces out (a contiguous run of them per member). With cx.precision bf16, A and B
// are first rounded to bf16 copies (scratch of this thread) and the pieces are bgemm()'s.
void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc, const Compute& cx = {});

// OpenBLAS's thread count is process-wide: set it before a run. With a ThreadTeam keep it 1.
void set_blas_threads(int threads);
int blas_threads();
std::string blas_corename();  // the kernel family OpenBLAS picked, e.g. "Cooperlake"

// For bgemm(): C's pieces, each computed by `call` (a GEMM on that piece's rows of op(A) or
// columns of op(B)), shared out across cx's team as sgemm() does, counted in cx.gemm_stats.
template <typename T>
using GemmPieceCall = void (*)(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K,
                               float alpha, const T* A, int64_t lda, const T* B, int64_t ldb,
                               float beta, float* C, int64_t ldc);
template <typename T>
void gemm_by_pieces(GemmPieceCall<T> call, Trans trans_a, Trans trans_b, int64_t M, int64_t N,
                    int64_t K, float alpha, const T* A, int64_t lda, const T* B, int64_t ldb,
                    float beta, float* C, int64_t ldc, const Compute& cx);

}  // namespace dtrain::model
