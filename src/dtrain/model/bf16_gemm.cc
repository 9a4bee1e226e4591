// bgemm(): oneDNN matmul primitives (cached per thread by shape, strides, alpha and beta) on
// gemm_split()'s pieces, or the emulation: the pieces' bf16 operands widened into float scratch
// and multiplied by cblas_sgemm.
#include "dtrain/model/bf16_gemm.h"

#include <cblas.h>

#include <atomic>
#include <fstream>
#include <map>
#include <tuple>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/core/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#if DTRAIN_HAVE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace dtrain::model {
namespace {

// -1: not chosen yet (the first call detects), else a Bf16GemmBackend.
std::atomic<int> chosen_backend{-1};

// The stored matrix (rows x cols at stride ld) of a bf16 operand, widened into `out` (packed).
void widen(const bf16* X, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) to_float(X + r * ld, out.data() + r * cols, cols);
}

void emulated_call(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
                   int64_t ldc) {
  thread_local std::vector<float> a32, b32;
  const bool ta = trans_a == Trans::yes, tb = trans_b == Trans::yes;
  widen(A, ta ? K : M, ta ? M : K, lda, a32);
  widen(B, tb ? N : K, tb ? K : N, ldb, b32);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha,
              a32.data(), static_cast<blasint>(ta ? M : K), b32.data(),
              static_cast<blasint>(tb ? K : N), beta, C, static_cast<blasint>(ldc));
}

#if DTRAIN_HAVE_DNNL
bool isa_has_bf16(dnnl::cpu_isa isa) {
  const auto bits = static_cast<unsigned>(isa);
  const auto want = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (bits & want) == want;
}

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    default:
      return "other";
  }
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// One thread's primitives and stream. oneDNN's CPU threads are OpenMP's, and a rank thread is
// an OpenMP initial thread with its own thread count: 1, since ranks and their ThreadTeams
// already share the cores out (as blas_threads is 1 per rank).
struct DnnlThreadState {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         float, float>;
  DnnlThreadState() : stream(cpu_engine()) { omp_set_num_threads(1); }
  dnnl::stream stream;
  std::map<Key, dnnl::matmul> primitives;
};

void onednn_call(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
                 int64_t ldc) {
  if (K == 0) {  // no products: C = beta * C (oneDNN wants non-empty operands)
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    }
    return;
  }
  thread_local DnnlThreadState state;
  using dt = dnnl::memory::data_type;
  // op(A) is (M, K) and op(B) is (K, N); a transposed operand is the stored matrix read by
  // columns, which the strides say.
  const dnnl::memory::dims a_strides =
      trans_a == Trans::yes ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1};
  const dnnl::memory::dims b_strides =
      trans_b == Trans::yes ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1};
  const dnnl::memory::desc a_desc({M, K}, dt::bf16, a_strides);
  const dnnl::memory::desc b_desc({K, N}, dt::bf16, b_strides);
  const dnnl::memory::desc c_desc({M, N}, dt::f32, dnnl::memory::dims{ldc, 1});
  const DnnlThreadState::Key key{
      M, N, K, a_strides[0], a_strides[1], b_strides[0], b_strides[1], ldc, alpha, beta};
  auto it = state.primitives.find(key);
  if (it == state.primitives.end()) {
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), attr,
                                          cpu_engine());
    it = state.primitives.emplace(key, dnnl::matmul(pd)).first;
  }
  // oneDNN takes non-const handles; it only reads src and weights.
  dnnl::memory a_mem(a_desc, cpu_engine(), const_cast<bf16*>(A));
  dnnl::memory b_mem(b_desc, cpu_engine(), const_cast<bf16*>(B));
  dnnl::memory c_mem(c_desc, cpu_engine(), C);
  it->second.execute(state.stream,
                     {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  state.stream.wait();
}
#endif

}  // namespace

bool onednn_bf16_available() {
#if DTRAIN_HAVE_DNNL
  return isa_has_bf16(dnnl::get_effective_cpu_isa());
#else
  return false;
#endif
}

Bf16GemmBackend bf16_gemm_backend() {
  int b = chosen_backend.load();
  if (b < 0) {
    b = static_cast<int>(onednn_bf16_available() ? Bf16GemmBackend::onednn
                                                 : Bf16GemmBackend::emulated);
    chosen_backend.store(b);
  }
  return static_cast<Bf16GemmBackend>(b);
}

void set_bf16_gemm_backend(Bf16GemmBackend backend) {
  DTRAIN_CHECK(backend == Bf16GemmBackend::emulated || DTRAIN_HAVE_DNNL,
               "the oneDNN bf16 GEMM is not built in (configure with libdnnl-dev installed)");
  chosen_backend.store(static_cast<int>(backend));
}

std::string bf16_gemm_description() {
  const std::string emulated = "emulated (bf16 operands widened to fp32, cblas_sgemm)";
#if DTRAIN_HAVE_DNNL
  const dnnl::version_t* v = dnnl::version();
  const std::string onednn = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) +
                             "." + std::to_string(v->patch);
  const char* isa = isa_name(dnnl::get_effective_cpu_isa());
  if (bf16_gemm_backend() == Bf16GemmBackend::onednn) return onednn + " matmul, " + isa;
  return emulated + "; " + onednn + " sees " + isa + ", no bf16 kernels";
#else
  return emulated + "; built without oneDNN";
#endif
}

Bf16Support bf16_support() {
  Bf16Support s;
#if defined(__x86_64__) || defined(__i386__)
  // Intel SDM, CPUID leaf 7: sub-leaf 1 EAX bit 5 is AVX512_BF16 (VDPBF16PS), sub-leaf 0 EDX
  // bit 22 is AMX-BF16 (TDPBF16PS). Whether the OS enabled the registers is oneDNN's check.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0) {
    s.cpu_amx_bf16 = (edx >> 22) & 1U;
    const unsigned max_subleaf = eax;
    if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0) {
      s.cpu_avx512_bf16 = (eax >> 5) & 1U;
    }
  }
#endif
#if DTRAIN_HAVE_DNNL
  s.onednn_built = true;
  s.onednn_bf16 = onednn_bf16_available();
  s.onednn_isa = isa_name(dnnl::get_effective_cpu_isa());
#endif
  s.cpu_model = "this CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size())
      s.cpu_model = line.substr(colon + 2);
    break;
  }
  return s;
}

std::string bf16_slow_reason(const Bf16Support& s) {
  if (s.onednn_built && s.onednn_bf16) return "";
  const std::string emulated =
      "every matrix product is emulated (its bf16 operands widened to fp32 for sgemm) and the "
      "conversions to and from bf16 come on top, so a bf16 step is slower than an fp32 one; "
      "use --precision fp32 here";
  const bool cpu_has = s.cpu_avx512_bf16 || s.cpu_amx_bf16;
  if (!cpu_has) {
    return str(s.cpu_model,
               " has no bf16 dot-product instructions (no AVX512_BF16, no AMX-BF16): ", emulated,
               ", or bf16 on a CPU that has them (Intel Cooper Lake or Sapphire Rapids "
               "and later, AMD Zen 4 and later)");
  }
  if (!s.onednn_built) {
    return str(s.cpu_model, " has ", s.cpu_avx512_bf16 ? "AVX512_BF16" : "AMX-BF16",
               " but this dtrain was built without oneDNN: ", emulated,
               ", or rebuild with libdnnl-dev installed");
  }
  return str(s.cpu_model, " has ", s.cpu_avx512_bf16 ? "AVX512_BF16" : "AMX-BF16",
             " but oneDNN reports only ", s.onednn_isa, " (is ONEDNN_MAX_CPU_ISA set?): ", emulated,
             ", or unset ONEDNN_MAX_CPU_ISA");
}

void bgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
           int64_t ldc, const Compute& cx) {
  GemmPieceCall<bf16> call = emulated_call;
#if DTRAIN_HAVE_DNNL
  if (bf16_gemm_backend() == Bf16GemmBackend::onednn) call = onednn_call;
#endif
  gemm_by_pieces<bf16>(call, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, cx);
}

}  // namespace dtrain::model
