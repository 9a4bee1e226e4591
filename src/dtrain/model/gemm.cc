// sgemm(): cblas_sgemm on the pieces of C that gemm_split() fixes from the shape, shared out
// across a team when there is one, timed when asked; under bf16, bgemm() on rounded copies.
#include "dtrain/model/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/model/bf16_gemm.h"

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

// Below 2^22 flops C is one call: a split would cost more than a second thread saves.
constexpr double kSplitFlops = 4194304.0;
constexpr int64_t kAlign = 16;
// Every piece packs the operand it shares with the other pieces again (K x N for row pieces),
// about 1/rows of its own work: the bench model's GEMMs in 256-row pieces took 1-3% longer than
// one call each, in 128-row pieces 5-9% (OpenBLAS 0.3.21: SkylakeX, Haswell, Prescott kernels).
constexpr int64_t kPieceRows = 256;

// Piece `p` of the `split` of C: its rows or columns [begin, end).
template <typename T>
void call_piece(GemmPieceCall<T> call, const GemmSplit& split, int64_t p, Trans trans_a,
                Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, const T* A,
                int64_t lda, const T* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const Range r = split_range(split.by_rows ? M : N, static_cast<int>(p),
                              static_cast<int>(split.parts), kAlign);
  if (r.end <= r.begin) return;
  if (split.by_rows) {  // rows of op(A): rows of A, or columns when A is transposed
    const T* a = trans_a == Trans::yes ? A + r.begin : A + r.begin * lda;
    call(trans_a, trans_b, r.end - r.begin, N, K, alpha, a, lda, B, ldb, beta, C + r.begin * ldc,
         ldc);
  } else {  // columns of op(B): columns of B, or rows when B is transposed
    const T* b = trans_b == Trans::yes ? B + r.begin * ldb : B + r.begin;
    call(trans_a, trans_b, M, r.end - r.begin, K, alpha, A, lda, b, ldb, beta, C + r.begin, ldc);
  }
}

// op(X)'s stored matrix (rows x cols at stride ld) rounded to bf16 into `out`, packed (stride
// cols): as bf16 for oneDNN, or as the rounded floats for the emulation's cblas_sgemm.
void pack_rounded(const float* X, int64_t rows, int64_t cols, int64_t ld, std::vector<bf16>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) to_bf16(X + r * ld, out.data() + r * cols, cols);
}
void pack_rounded(const float* X, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      out[static_cast<size_t>(r * cols + c)] = round_to_bf16(X[r * ld + c]);
  }
}

void count_call(GemmStats* stats, double start_us, int64_t M, int64_t N, int64_t K) {
  if (stats == nullptr) return;
  stats->time_us += now_us() - start_us;
  stats->flops += 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  ++stats->calls;
}

}  // namespace

GemmSplit gemm_split(int64_t M, int64_t N, int64_t K) {
  const double flops =
      2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  const bool by_rows = M >= N;
  const int64_t dim = by_rows ? M : N;
  if (flops < kSplitFlops || dim < 2 * kAlign) return {by_rows, 1};
  // At least 2 pieces, so that 2 threads always share a large GEMM.
  return {by_rows, std::max<int64_t>(2, dim / kPieceRows)};
}

template <typename T>
void gemm_by_pieces(GemmPieceCall<T> call, Trans trans_a, Trans trans_b, int64_t M, int64_t N,
                    int64_t K, float alpha, const T* A, int64_t lda, const T* B, int64_t ldb,
                    float beta, float* C, int64_t ldc, const Compute& cx) {
  if (M == 0 || N == 0) return;
  const double start_us = cx.gemm_stats != nullptr ? now_us() : 0.0;
  const GemmSplit split = gemm_split(M, N, K);
  auto pieces = [&](Range run) {
    for (int64_t p = run.begin; p < run.end; ++p) {
      call_piece(call, split, p, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
  };
  // The team only decides which thread makes each call, never which calls are made.
  ThreadTeam* team = split.parts > 1 && cx.threads() > 1 ? cx.team : nullptr;
  if (team == nullptr) {
    pieces({0, split.parts});
  } else {
    team->run([&](int member) { pieces(split_range(split.parts, member, team->size())); });
  }
  count_call(cx.gemm_stats, start_us, M, N, K);
}
template void gemm_by_pieces<float>(GemmPieceCall<float>, Trans, Trans, int64_t, int64_t, int64_t,
                                    float, const float*, int64_t, const float*, int64_t, float,
                                    float*, int64_t, const Compute&);
template void gemm_by_pieces<bf16>(GemmPieceCall<bf16>, Trans, Trans, int64_t, int64_t, int64_t,
                                   float, const bf16*, int64_t, const bf16*, int64_t, float, float*,
                                   int64_t, const Compute&);

void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc, const Compute& cx) {
  if (cx.precision == Precision::fp32) {
    gemm_by_pieces<float>(call_cblas, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                          ldc, cx);
    return;
  }
  if (M == 0 || N == 0) return;
  // The rounded copies are this thread's scratch, reused call after call. Their time counts
  // as the GEMM's. The emulation gets the rounded floats straight away (not bf16 to widen).
  const double start_us = cx.gemm_stats != nullptr ? now_us() : 0.0;
  const bool ta = trans_a == Trans::yes, tb = trans_b == Trans::yes;
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  Compute uncounted = cx;
  uncounted.gemm_stats = nullptr;
  if (bf16_gemm_backend() == Bf16GemmBackend::emulated) {
    thread_local std::vector<float> a32, b32;
    pack_rounded(A, a_rows, a_cols, lda, a32);
    pack_rounded(B, b_rows, b_cols, ldb, b32);
    gemm_by_pieces<float>(call_cblas, trans_a, trans_b, M, N, K, alpha, a32.data(), a_cols,
                          b32.data(), b_cols, beta, C, ldc, uncounted);
  } else {
    thread_local std::vector<bf16> a16, b16;
    pack_rounded(A, a_rows, a_cols, lda, a16);
    pack_rounded(B, b_rows, b_cols, ldb, b16);
    bgemm(trans_a, trans_b, M, N, K, alpha, a16.data(), a_cols, b16.data(), b_cols, beta, C, ldc,
          uncounted);
  }
  count_call(cx.gemm_stats, start_us, M, N, K);
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
