// The bf16 matrix product behind --precision bf16: operands in bfloat16, products summed and C
// kept in float32 (the GEMM of PyTorch's CPU autocast and of Megatron's bf16 mode). Two
// backends: oneDNN's matmul where it has bf16 kernels for this CPU (AVX512-BF16 or AMX), else an
// emulation that widens the bf16 operands to float and calls cblas_sgemm, the same products at
// fp32 speed. Either way C is computed piece by piece as gemm_split() says, so its bits do not
// depend on the thread count.
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/core/bf16.h"
#include "dtrain/model/gemm.h"

namespace dtrain::model {

enum class Bf16GemmBackend { onednn, emulated };

// The backend bgemm() uses: oneDNN when it was built in and reports a bf16 ISA for this CPU
// (ONEDNN_MAX_CPU_ISA can lower what it reports), else emulated; set_bf16_gemm_backend
// overrides it (tests run both; onednn without oneDNN is an error).
Bf16GemmBackend bf16_gemm_backend();
void set_bf16_gemm_backend(Bf16GemmBackend backend);
bool onednn_bf16_available();
// One line for run headers, e.g. "oneDNN 2.6.3 matmul, avx512_core_bf16" or "emulated ...".
std::string bf16_gemm_description();

// What this CPU and this build offer bf16 products: whether the CPU has bf16 dot-product
// instructions (cpuid: AVX512_BF16 or AMX-BF16), whether oneDNN is built in and whether it
// reports a bf16 ISA (ONEDNN_MAX_CPU_ISA can lower that), and the CPU's model name.
struct Bf16Support {
  bool cpu_avx512_bf16 = false, cpu_amx_bf16 = false;
  bool onednn_built = false, onednn_bf16 = false;
  std::string onednn_isa;  // what oneDNN reports, e.g. "avx512_core"; empty without oneDNN
  std::string cpu_model;   // /proc/cpuinfo's "model name", or "this CPU"
};
Bf16Support bf16_support();

// Why --precision bf16 runs slower than fp32 with `s`, for a warning at the start of a run; empty
// when oneDNN's bf16 kernels run the products. A pure function of `s`, so it is tested on every
// case whatever CPU runs the tests.
std::string bf16_slow_reason(const Bf16Support& s);

// Row-major C (M, N) = alpha * op(A) * op(B) + beta * C as sgemm(), with A and B in bf16.
void bgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
           int64_t ldc, const Compute& cx = {});

}  // namespace dtrain::model
