// The compute calibration: each rate timed through the engine's own entry points (sgemm with a
// ThreadTeam as a run uses it, the model/ops kernels, optim's AdamW and norm, bf16 conversion,
// comm's collectives on thread ranks), the median of several calls per point, then fitted.
#include "dtrain/calibrate/compute_calibration.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "dtrain/comm/all_to_all.h"
#include "dtrain/comm/collectives.h"
#include "dtrain/comm/hierarchical.h"
#include "dtrain/comm/launch.h"
#include "dtrain/comm/topology.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"
#include "dtrain/core/statistics.h"
#include "dtrain/core/timer.h"
#include "dtrain/model/gemm.h"
#include "dtrain/model/ops/attention.h"
#include "dtrain/model/ops/crossentropy.h"
#include "dtrain/model/ops/encoder.h"
#include "dtrain/model/ops/gelu.h"
#include "dtrain/model/ops/layernorm.h"
#include "dtrain/model/ops/residual.h"
#include "dtrain/model/thread_team.h"
#include "dtrain/optim/adamw.h"
#include "dtrain/optim/grad_clip.h"

namespace dtrain::calibrate {
namespace {

using plan::KernelOp;
using plan::Precision;

// Median seconds of `fn`: one warm-up call (first-touch page faults, cold caches and code),
// then at least `min_calls` calls and more until `min_total_s` has passed (small shapes are
// noisy; a few hundred microseconds of calls steady their median), at most 200.
template <typename Fn>
double median_seconds(Fn&& fn, int min_calls = 3, double min_total_s = 2e-3) {
  fn();
  std::vector<double> times;
  const Stopwatch total;
  while (times.size() < static_cast<size_t>(min_calls) ||
         (total.elapsed_us() * 1e-6 < min_total_s && times.size() < 200)) {
    const Stopwatch one;
    fn();
    times.push_back(one.elapsed_us() * 1e-6);
  }
  return median(times);
}

// Values that keep every kernel on its ordinary path (no NaN, no overflow in exp).
void fill(std::vector<float>& v, float scale = 0.5f) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>((i * 7919) % 1000) / 1000;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown CPU";
}

// Cold: the products are timed on operands fetched from memory, not left in cache by the call
// before:
// in a training step each product's input was written kernels (or, in backward, layers) earlier
// and each weight is read once per pass, so a grid point timed on the same three warm buffers
// ran 10-15% faster than the step's products of that shape (2x for the attention's small
// ones). Every call takes its next (A, B, C) from a pool larger than the last-level cache, and
// accumulates into C (beta 1) as matmul.cc's products do. Each point is the median of calls
// over 10 ms at least: on a shared virtual machine a 2 ms median still moved by 2x between two
// calibrations at some grid points.
// Warm (`warm`): every call on the same (A, B, C), which after the first call sit in cache as far
// as their size allows: the clock's bound for a product whose operands were just written
// (clock/cache_model.h picks the share between the two).
constexpr size_t kGemmPoolBytes = size_t{128} << 20;

// Median seconds of the forward's product, out (M, N) += inp (M, K) W^T with W stored (N, K) as
// matmul.cc has it, on operands from `pool`: cold, each call on the set after the last one
// (`offset` advances, wrapping), or warm, every call on the set at `offset`.
double time_product(std::vector<float>& pool, size_t& offset, int64_t M, int64_t N, int64_t K,
                    const model::Compute& cx, bool warm, double min_total_s) {
  // One call's operands, rounded up to a cache line; the pool holds at least two sets.
  const size_t set = (static_cast<size_t>(M * K + N * K + M * N) + 15) / 16 * 16;
  DTRAIN_CHECK(2 * set <= pool.size(), "calibrate: product ", M, " x ", N, " x ", K,
               " does not fit the operand pool twice");
  return median_seconds(
      [&] {
        if (offset + set > pool.size()) offset = 0;
        float* a = pool.data() + offset;
        float* b = a + M * K;
        float* c = b + N * K;
        if (!warm) offset += set;
        model::sgemm(model::Trans::no, model::Trans::yes, M, N, K, 1.0f, a, K, b, K, 1.0f, c, N,
                     cx);
      },
      warm ? 3 : 5, min_total_s);
}

void measure_gemm(const GemmGrid& grid, Precision precision, int threads, double min_total_s,
                  bool warm, std::vector<plan::GemmSample>& out) {
  std::unique_ptr<model::ThreadTeam> team;
  if (threads > 1) team = std::make_unique<model::ThreadTeam>(threads);
  model::Compute cx;
  cx.team = team.get();
  cx.precision = precision == Precision::bf16 ? model::Precision::bf16 : model::Precision::fp32;
  std::vector<float> pool(kGemmPoolBytes / sizeof(float));
  fill(pool, 0.01f);
  for (double m : grid.m) {
    for (double n : grid.n) {
      for (double k : grid.k) {
        const auto M = static_cast<int64_t>(m), N = static_cast<int64_t>(n),
                   K = static_cast<int64_t>(k);
        size_t offset = 0;
        const double s = time_product(pool, offset, M, N, K, cx, warm, min_total_s);
        out.push_back({precision, threads, m, n, k, s});
      }
    }
  }
}

// The engine runs OpenBLAS single-threaded in each rank (--blas-threads 1, its parallelism is
// --threads' team): so must the products measured here, or a "1 thread" sample runs on every
// core OpenBLAS finds (twice the engine's speed on an idle 2-core machine). Restored after.
struct SingleThreadedBlas {
  int before = model::blas_threads();
  SingleThreadedBlas() { model::set_blas_threads(1); }
  ~SingleThreadedBlas() { model::set_blas_threads(before); }
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;
};

// One memory-bound kernel at one size: the number of elements its law counts and the call.
struct KernelRun {
  double elements = 0;
  std::function<void()> call;
};

// The kernel `op` set up over about `elements` elements (rounded to its shape), single-threaded.
KernelRun kernel_run(KernelOp op, int64_t elements) {
  constexpr int64_t C = 256;   // channels of LayerNorm, residual, encoder rows
  constexpr int64_t V = 1024;  // vocabulary of cross-entropy and the encoder's table
  auto buf = [](int64_t n) {
    auto v = std::make_shared<std::vector<float>>(static_cast<size_t>(n));
    fill(*v);
    return v;
  };
  const int64_t rows = std::max<int64_t>(1, elements / C);
  switch (op) {
    case KernelOp::layernorm_forward:
    case KernelOp::layernorm_backward: {
      auto x = buf(rows * C), y = buf(rows * C), dy = buf(rows * C), w = buf(C), bias = buf(C),
           dw = buf(C), db = buf(C), mean = buf(rows), rstd = buf(rows);
      model::layernorm_forward(y->data(), mean->data(), rstd->data(), x->data(), w->data(),
                               bias->data(), 1, rows, C);
      if (op == KernelOp::layernorm_forward) {
        return {double(rows * C), [=] {
                  model::layernorm_forward(y->data(), mean->data(), rstd->data(), x->data(),
                                           w->data(), bias->data(), 1, rows, C);
                }};
      }
      return {double(rows * C), [=] {
                model::layernorm_backward(y->data(), dw->data(), db->data(), dy->data(), x->data(),
                                          w->data(), mean->data(), rstd->data(), 1, rows, C);
              }};
    }
    case KernelOp::gelu_forward: {
      auto x = buf(elements), y = buf(elements);
      return {double(elements), [=] { model::gelu_forward(y->data(), x->data(), elements); }};
    }
    case KernelOp::gelu_backward: {
      auto x = buf(elements), dy = buf(elements), dx = buf(elements);
      return {double(elements),
              [=] { model::gelu_backward(dx->data(), x->data(), dy->data(), elements); }};
    }
    case KernelOp::residual_forward: {
      auto x = buf(rows * C), d = buf(rows * C), y = buf(rows * C), bias = buf(C);
      return {double(rows * C), [=] {
                model::residual_forward(y->data(), x->data(), d->data(), bias->data(), rows, C);
              }};
    }
    case KernelOp::residual_backward: {
      auto dx = buf(rows * C), dd = buf(rows * C), dy = buf(rows * C), db = buf(C);
      return {double(rows * C), [=] {
                model::residual_backward(dx->data(), dd->data(), db->data(), dy->data(), rows, C);
              }};
    }
    case KernelOp::softmax_forward:
    case KernelOp::softmax_backward: {
      // One (T, T) block per call, T chosen so that its causal half holds about `elements`.
      int64_t T = 1;
      while ((T + 1) * (T + 2) / 2 <= elements) ++T;
      auto a = buf(T * T), ds = buf(T * T);
      model::causal_softmax(a->data(), T);
      const double half = double(T) * double(T + 1) / 2;
      if (op == KernelOp::softmax_forward) {
        // In place on its own output: a softmax of probabilities is as ordinary an input as
        // scores, so the calls repeat without a copy that the timing would include.
        return {half, [=] { model::causal_softmax(a->data(), T); }};
      }
      return {half, [=] { model::causal_softmax_backward(ds->data(), a->data(), T); }};
    }
    case KernelOp::crossentropy_forward:
    case KernelOp::crossentropy_backward: {
      const int64_t bt = std::max<int64_t>(1, elements / V);
      auto logits = buf(bt * V), probs = buf(bt * V), losses = buf(bt);
      auto targets = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(bt));
      for (int64_t i = 0; i < bt; ++i) (*targets)[static_cast<size_t>(i)] = int32_t(i * 31 % V);
      if (op == KernelOp::crossentropy_forward) {
        return {double(bt * V), [=] {
                  model::crossentropy_softmax_forward(probs->data(), losses->data(), logits->data(),
                                                      targets->data(), bt, V);
                }};
      }
      return {double(bt * V), [=] {
                model::crossentropy_softmax_backward_inplace(probs->data(), targets->data(), 1e-3f,
                                                             bt, V);
              }};
    }
    case KernelOp::encoder_forward:
    case KernelOp::encoder_backward: {
      auto out = buf(rows * C), wte = buf(V * C), wpe = buf(rows * C);
      auto tokens = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(rows));
      for (int64_t i = 0; i < rows; ++i) (*tokens)[static_cast<size_t>(i)] = int32_t(i * 31 % V);
      if (op == KernelOp::encoder_forward) {
        return {double(rows * C), [=] {
                  model::encoder_forward(out->data(), tokens->data(), wte->data(), wpe->data(), 1,
                                         rows, C);
                }};
      }
      return {double(rows * C), [=] {
                model::encoder_backward(wte->data(), wpe->data(), out->data(), tokens->data(), 1,
                                        rows, C);
              }};
    }
    case KernelOp::adamw: {
      auto p = buf(elements), g = buf(elements), m = buf(elements), v = buf(elements);
      auto step = std::make_shared<int64_t>(0);
      return {double(elements),
              [=] { optim::adamw_update(*p, *g, *m, *v, optim::AdamWConfig{}, 1e-4f, ++*step); }};
    }
    case KernelOp::grad_norm: {
      auto g = buf(elements);
      auto sink = std::make_shared<double>(0);
      return {double(elements), [=] { *sink += optim::sum_of_squares(*g); }};
    }
    case KernelOp::bf16_convert: {
      auto x = buf(elements);
      auto y = std::make_shared<std::vector<bf16>>(static_cast<size_t>(elements));
      return {double(elements), [=] { to_bf16(x->data(), y->data(), elements); }};
    }
  }
  throw Error("calibrate: no kernel for this operation");
}

// Each kernel at each size (in-cache to out-of-cache), fitted as call_s + bytes / bytes_per_s by
// least squares over the sizes (fit_latency_bandwidth); each (kernel, size) the median over
// `passes` passes through all of them.
std::vector<plan::KernelRate> measure_kernels(bool quick, int passes) {
  // Elements of the main tensor: 4 KiB, 64 KiB, 1 MiB and 16 MiB of fp32.
  const std::vector<int64_t> sizes = quick ? std::vector<int64_t>{1024, 65536}
                                           : std::vector<int64_t>{1024, 16384, 262144, 4194304};
  const size_t points = static_cast<size_t>(plan::kKernelOpCount) * sizes.size();
  std::vector<double> bytes(points);
  std::vector<std::vector<double>> seconds(points);
  for (int pass = 0; pass < passes; ++pass) {
    for (int i = 0; i < plan::kKernelOpCount; ++i) {
      for (size_t j = 0; j < sizes.size(); ++j) {
        const auto op = static_cast<KernelOp>(i);
        const KernelRun run = kernel_run(op, sizes[j]);
        const size_t at = static_cast<size_t>(i) * sizes.size() + j;
        bytes[at] = run.elements * plan::kernel_bytes_per_element(op);
        seconds[at].push_back(median_seconds(run.call));
      }
    }
  }
  std::vector<plan::KernelRate> out;
  for (int i = 0; i < plan::kKernelOpCount; ++i) {
    std::vector<double> b, s;
    for (size_t j = 0; j < sizes.size(); ++j) {
      const size_t at = static_cast<size_t>(i) * sizes.size() + j;
      b.push_back(bytes[at]);
      s.push_back(median(seconds[at]));
    }
    const LinearFit fit = fit_latency_bandwidth(b, s);
    out.push_back({static_cast<KernelOp>(i), Precision::fp32, fit.bytes_per_s, fit.intercept_s});
  }
  return out;
}

// How much slower a fixed set of fp32 products runs while two thread ranks all-reduce beside
// it (the way parallel/comm_thread reduces DP buckets during backward): the median product time
// with the collective running over the median without, at least 1.
double measure_comm_interference(bool quick, double timeout_s) {
  constexpr int64_t S = 256;
  std::vector<float> a(S * S), b(S * S), c(S * S);
  fill(a);
  fill(b);
  auto products = [&] {
    return median_seconds(
        [&] {
          model::sgemm(model::Trans::no, model::Trans::yes, S, S, S, 1.0f, a.data(), S, b.data(), S,
                       0.0f, c.data(), S);
        },
        quick ? 10 : 40, quick ? 0.02 : 0.2);
  };
  const double alone = products();
  std::atomic<bool> stop{false};
  std::exception_ptr failure;
  std::thread comm_thread([&] {
    try {
      comm::run_on_backend(
          comm::Backend::threads, 2,
          [&](comm::Communicator& comm) {
            std::vector<float> data(1 << 20, 1.0f);  // 4 MiB, a DP bucket's size
            for (;;) {
              comm::all_reduce(comm, data.data(), int64_t(data.size()), comm::ReduceOp::avg,
                               comm::Algorithm::ring);
              // Every rank runs the same number of all-reduces: they agree on when to stop.
              int64_t done = stop.load() ? 1 : 0;
              comm::all_reduce(comm, &done, 1, comm::ReduceOp::max);
              if (done != 0) break;
            }
          },
          comm::LaunchOptions{.timeout_s = timeout_s, .threads_inside_a_job = true});
    } catch (...) {
      failure = std::current_exception();
    }
  });
  const double beside = products();
  stop = true;
  comm_thread.join();
  if (failure) std::rethrow_exception(failure);
  return std::max(1.0, beside / alone);
}

// How much slower products run when every core runs them at once: fp32 512 x 512 x 256 products
// on operands from memory (as measure_gemm times them), alone on one thread, then while one copy
// per other core runs the same loop on its own operands; the median time beside over alone, at
// least 1. Ranks that each own a core share the last-level cache and the memory bus.
double measure_corun_slowdown(int cores, bool quick) {
  if (cores <= 1) return 1;
  constexpr int64_t M = 512, N = 512, K = 256;
  constexpr size_t kSet = static_cast<size_t>(M * K + N * K + M * N);
  const size_t sets = std::max<size_t>(2, kGemmPoolBytes / 4 / sizeof(float) / kSet);
  auto loop_on = [&](std::vector<float>& pool, size_t& next) {
    float* a = pool.data() + (next++ % sets) * kSet;
    float* b = a + M * K;
    float* c = b + N * K;
    model::sgemm(model::Trans::no, model::Trans::yes, M, N, K, 1.0f, a, K, b, K, 1.0f, c, N);
  };
  std::vector<float> mine(sets * kSet);
  fill(mine, 0.01f);
  size_t next = 0;
  const int calls = quick ? 5 : 20;
  const double min_s = quick ? 0.01 : 0.1;
  const double alone = median_seconds([&] { loop_on(mine, next); }, calls, min_s);
  std::atomic<bool> stop{false};
  std::vector<std::thread> others;
  for (int i = 1; i < cores; ++i) {
    others.emplace_back([&] {
      std::vector<float> pool(sets * kSet);
      fill(pool, 0.01f);
      size_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) loop_on(pool, n);
    });
  }
  // Let the others fill their pools and start multiplying before timing.
  std::this_thread::sleep_for(std::chrono::milliseconds(quick ? 20 : 100));
  const double beside = median_seconds([&] { loop_on(mine, next); }, calls, min_s);
  stop = true;
  for (std::thread& t : others) t.join();
  return std::max(1.0, beside / alone);
}

// How long a collective waits for its partner when the thread ranks outnumber the cores (TP's f
// and g on more ranks than cores, ZeRO-3's gathers beside busy compute threads): twice as many
// thread ranks as cores (at least 2), each multiplying 256^3 fp32 and then all-reducing 4 KiB
// (a small activation). The loop's median period, less the product's core-time shared over the
// cores (what the clock's oversubscription stretch already charges) and the same all-reduce
// between 2 idle ranks (its idle-machine price), is the wait per collective, at least 0.
double measure_oversubscribed_wait(int cores, bool quick, double timeout_s) {
  constexpr int64_t S = 256, kCount = 1024;
  std::vector<float> a(S * S), b(S * S);
  fill(a);
  fill(b);
  auto product = [&](std::vector<float>& c) {
    model::sgemm(model::Trans::no, model::Trans::yes, S, S, S, 1.0f, a.data(), S, b.data(), S, 0.0f,
                 c.data(), S);
  };
  std::vector<float> c0(S * S);
  const double product_s = median_seconds([&] { product(c0); }, quick ? 5 : 20, 0);
  double idle_s = 0;
  comm::run_on_backend(
      comm::Backend::threads, 2,
      [&](comm::Communicator& comm) {
        std::vector<float> v(kCount, 1.0f);
        const double s = median_seconds(
            [&] { comm::all_reduce(comm, v.data(), kCount, comm::ReduceOp::sum); }, 20, 0);
        if (comm.rank() == 0) idle_s = s;
      },
      comm::LaunchOptions{.timeout_s = timeout_s, .threads_inside_a_job = true});
  const int ranks = std::max(2, 2 * cores);
  const int iterations = quick ? 6 : 30;
  double period_s = 0;
  comm::run_on_backend(
      comm::Backend::threads, ranks,
      [&](comm::Communicator& comm) {
        std::vector<float> c(S * S), v(kCount, 1.0f);
        std::vector<double> periods;
        for (int i = 0; i <= iterations; ++i) {
          const Stopwatch one;
          product(c);
          comm::all_reduce(comm, v.data(), kCount, comm::ReduceOp::sum);
          if (i > 0) periods.push_back(one.elapsed_us() * 1e-6);  // the first: threads starting
        }
        // Every rank leaves the all-reduce within one hop of the others: rank 0's period is the
        // group's.
        if (comm.rank() == 0) period_s = median(periods);
      },
      comm::LaunchOptions{.timeout_s = timeout_s, .threads_inside_a_job = true});
  const double shared = product_s * ranks / std::max(1, cores);
  return std::max(0.0, period_s - shared - idle_s);
}

// Each collective algorithm of the threads backend at group sizes 2 and 4, fp32 and bf16
// elements (bf16 adds each hop in fp32 and rounds back: DP's gradients and TP's f and g under
// --precision bf16), three message sizes, fitted as latency + bytes / bandwidth with bytes the
// larger of what one rank sent and received (the counters'; equal but for direct, whose ranks
// read from their peers' memory).
void measure_collectives(bool quick, double timeout_s, std::vector<plan::CollectiveRate>& out) {
  const std::vector<int64_t> counts =
      quick ? std::vector<int64_t>{1024, 65536} : std::vector<int64_t>{4096, 65536, 1 << 20};
  struct Algo {
    const char* name;
    comm::Algorithm algorithm;
  };
  const Algo algos[] = {{"direct", comm::Algorithm::direct},
                        {"ring", comm::Algorithm::ring},
                        {"tree", comm::Algorithm::tree}};
  using Key = std::tuple<std::string, std::string, Precision>;
  for (int ranks : {2, 4}) {
    // Filled by rank 0: per (collective, algorithm, precision), the (bytes, seconds) points.
    std::map<Key, std::pair<std::vector<double>, std::vector<double>>> points;
    comm::run_on_backend(
        comm::Backend::threads, ranks,
        [&](comm::Communicator& comm) {
          auto measure = [&](auto element, Precision precision) {
            using T = decltype(element);
            std::vector<T> in(static_cast<size_t>(counts.back())),
                buf(static_cast<size_t>(counts.back()));
            for (size_t i = 0; i < in.size(); ++i) {
              const float v = 0.5f * static_cast<float>((i * 7919) % 1000) / 1000;
              if constexpr (std::is_same_v<T, bf16>) {
                in[i] = to_bf16(v);
              } else {
                in[i] = v;
              }
            }
            auto record = [&](const std::string& coll, const std::string& algo, auto&& call) {
              for (int64_t n : counts) {
                comm::Traffic traffic;
                const double s = median_seconds([&] { traffic = call(n); }, 5, 0);
                // Rank 0's median: the collective ends on every rank within one step of it.
                if (comm.rank() == 0) {
                  auto& xy = points[{coll, algo, precision}];
                  xy.first.push_back(double(std::max(traffic.bytes_sent, traffic.bytes_received)));
                  xy.second.push_back(s);
                }
              }
            };
            for (const Algo& a : algos) {
              record("all_reduce", a.name, [&](int64_t n) {
                return comm::all_reduce(comm, buf.data(), n, comm::ReduceOp::sum, a.algorithm);
              });
              record("reduce_scatter", a.name, [&](int64_t n) {
                return comm::reduce_scatter(comm, in.data(), buf.data(), n, comm::ReduceOp::sum,
                                            a.algorithm);
              });
              record("all_gather", a.name, [&](int64_t n) {
                const comm::Chunk mine = comm::chunk_of(n, comm.size(), comm.rank());
                return comm::all_gather(comm, in.data() + mine.offset, buf.data(), n, a.algorithm);
              });
            }
            if constexpr (std::is_same_v<T, float>) {
              // The pairwise all-to-all of EP's dispatch and combine (fp32 rows) and of Ulysses'
              // head switches: equal blocks of n / ranks elements.
              record("all_to_all", "pairwise", [&](int64_t n) {
                return comm::all_to_all<float>(comm, in.data(), buf.data(), n / comm.size(),
                                               comm::Algorithm::pairwise);
              });
              if (ranks != 4) return;
              // Two emulated nodes of two thread ranks each (fp32: the DP all-reduce that
              // --dp-all-reduce hierarchical runs).
              const comm::NodeTopology topology(ranks, 2);
              comm::NodeGroups groups = comm::make_node_groups(comm, topology);
              record("all_reduce", "hierarchical", [&](int64_t n) {
                return comm::hierarchical_all_reduce(groups, buf.data(), n, comm::ReduceOp::sum);
              });
            }
          };
          measure(float{}, Precision::fp32);
          measure(bf16{}, Precision::bf16);
        },
        comm::LaunchOptions{.timeout_s = timeout_s, .threads_inside_a_job = true});
    for (const auto& [key, xy] : points) {
      const LinearFit fit = fit_latency_bandwidth(xy.first, xy.second);
      out.push_back({std::get<0>(key), std::get<1>(key), "intra_node", ranks, fit.intercept_s,
                     fit.bytes_per_s, std::get<2>(key)});
    }
  }
}

// A cache's size as sysfs writes it ("48K", "1024K", "32M"); 0 when unreadable.
double sysfs_size_bytes(const std::string& path) {
  std::ifstream in(path);
  double value = 0;
  std::string unit;
  if (!(in >> value) || value <= 0) return 0;
  in >> unit;
  if (unit == "K") return value * 1024;
  if (unit == "M") return value * 1024 * 1024;
  if (unit == "G") return value * 1024 * 1024 * 1024;
  return unit.empty() ? value : 0;
}

// CPUs in a sysfs list such as "0-1,4,6-7".
int cpus_in_list(const std::string& list) {
  int count = 0;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    const std::string part = list.substr(pos, end - pos);
    const size_t dash = part.find('-');
    try {
      count += dash == std::string::npos
                   ? 1
                   : std::stoi(part.substr(dash + 1)) - std::stoi(part.substr(0, dash)) + 1;
    } catch (const std::exception&) {
      return 0;
    }
    pos = end + 1;
  }
  return count;
}

}  // namespace

plan::CacheSizes read_cache_sizes(const std::string& root) {
  plan::CacheSizes c;
  bool l3_seen = false;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = str(root, "/index", index, "/");
    std::ifstream level_in(dir + "level"), type_in(dir + "type");
    int level = 0;
    std::string type;
    if (!(level_in >> level) || !(type_in >> type)) continue;
    const double bytes = sysfs_size_bytes(dir + "size");
    if (level == 1 && type == "Data") c.l1d_bytes = bytes;
    if (level == 2 && type != "Instruction") c.l2_bytes = bytes;
    if (level == 3 && type != "Instruction") {
      c.l3_bytes = bytes;
      l3_seen = true;
      std::ifstream shared(dir + "shared_cpu_list");
      std::string list;
      if (shared >> list) c.l3_shared_by = std::max(1, cpus_in_list(list));
    }
  }
  // No sysfs (a container without it, another OS): sysconf's figures, which on a virtual machine
  // can be the host socket's whole L3 (shared by cores it does not give this machine).
  if (c.l1d_bytes == 0) c.l1d_bytes = std::max(0L, sysconf(_SC_LEVEL1_DCACHE_SIZE));
  if (c.l2_bytes == 0) c.l2_bytes = std::max(0L, sysconf(_SC_LEVEL2_CACHE_SIZE));
  if (!l3_seen) {
    c.l3_bytes = std::max(0L, sysconf(_SC_LEVEL3_CACHE_SIZE));
    c.l3_shared_by = int(std::max(1u, std::thread::hardware_concurrency()));
  }
  return c;
}

GemmGrid gemm_warm_grid(bool quick) {
  if (quick) return gemm_grid(true);
  return {{16, 64, 256, 1024, 4096}, {16, 64, 256, 1024}, {16, 64, 256, 1024}};
}

GemmGrid gemm_grid(bool quick) {
  if (quick) return {{16, 256}, {16, 256}, {16, 256}};
  // m: a micro-batch's tokens (B x T); n, k: the widths C, 3C, 4C, the vocabulary shard and the
  // attention's T and HS of the models dtrain trains on a CPU. Powers of 2 from 16: a small
  // product's time is flat (the fixed cost) and then grows with its size, so log(time) is convex
  // in log(size) and a chord over a factor of 8 (the earlier grid) lay well above the curve at
  // shapes such as an attention pair's 32 x 32 x 16; 8 x 7 x 7 shapes.
  return {{16, 32, 64, 128, 256, 512, 1024, 4096},
          {16, 32, 64, 128, 256, 512, 1024},
          {16, 32, 64, 128, 256, 512, 1024}};
}

LinearFit fit_latency_bandwidth(const std::vector<double>& bytes,
                                const std::vector<double>& seconds) {
  DTRAIN_CHECK(bytes.size() >= 2 && bytes.size() == seconds.size(),
               "fit_latency_bandwidth: needs 2 or more points, got ", bytes.size());
  // Weighted least squares, weight 1 / seconds^2: the relative errors are minimised, so a
  // 4 KiB point (where the fixed cost shows) counts as much as a 16 MiB one (which would
  // otherwise swamp it by its absolute size).
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    DTRAIN_CHECK(seconds[i] > 0, "fit_latency_bandwidth: a time is not positive: ", seconds[i]);
    const double w = 1 / (seconds[i] * seconds[i]);
    sw += w;
    sx += w * bytes[i];
    sy += w * seconds[i];
    sxx += w * bytes[i] * bytes[i];
    sxy += w * bytes[i] * seconds[i];
  }
  const double denominator = sw * sxx - sx * sx;
  DTRAIN_CHECK(denominator > 0 && std::isfinite(denominator),
               "fit_latency_bandwidth: the points need distinct byte counts");
  double slope = (sw * sxy - sx * sy) / denominator;
  double intercept = (sy - slope * sx) / sw;
  if (intercept < 0) {  // through the origin: seconds = bytes x slope
    intercept = 0;
    slope = sxy / sxx;
  }
  if (slope <= 0) {  // flat: the largest point's average rate, no fixed cost
    const size_t largest = size_t(std::max_element(bytes.begin(), bytes.end()) - bytes.begin());
    intercept = 0;
    slope = seconds[largest] / bytes[largest];
  }
  return {intercept, 1 / slope};
}

CoreSpeedProbe::CoreSpeedProbe(const plan::MeasuredRates& rates)
    : rates_(rates), pool_(kGemmPoolBytes / sizeof(float)) {
  fill(pool_, 0.01f);
}

namespace {
// The MLP's two products on a micro-batch of 512 rows (fc: 128 -> 512, proj: 512 -> 128), cold,
// as measure_gemm times them.
constexpr int64_t kProbeShapes[2][3] = {{512, 512, 128}, {512, 128, 512}};
}  // namespace

double core_speed(const plan::MeasuredRates& rates, Precision precision, double seconds) {
  DTRAIN_CHECK(seconds > 0, "core speed: the probe's products took ", seconds, " s");
  double predicted = 0;
  for (const auto& shape : kProbeShapes) {
    predicted += plan::gemm_seconds(rates, precision, 1, static_cast<double>(shape[0]),
                                    static_cast<double>(shape[1]), static_cast<double>(shape[2]));
  }
  return predicted / seconds;
}

double CoreSpeedProbe::product_seconds(Precision precision) {
  model::Compute cx;
  cx.precision = precision == Precision::bf16 ? model::Precision::bf16 : model::Precision::fp32;
  double measured = 0;
  for (const auto& shape : kProbeShapes) {
    measured += time_product(pool_, offset_, shape[0], shape[1], shape[2], cx, false, 2e-3);
  }
  return measured;
}

std::vector<CoreSpeed> CoreSpeedProbe::measure() {
  const SingleThreadedBlas single_threaded_blas;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  DTRAIN_CHECK(sched_getaffinity(0, sizeof(allowed), &allowed) == 0,
               "core speed probe: sched_getaffinity failed");
  const bool bf16 = std::any_of(rates_.gemm.begin(), rates_.gemm.end(),
                                [](const auto& g) { return g.precision == Precision::bf16; });
  std::vector<CoreSpeed> out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    CoreSpeed s;
    s.cpu = cpu;
    std::exception_ptr failed;
    std::thread probe([&] {
      try {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        DTRAIN_CHECK(pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0,
                     "core speed probe: cannot pin a thread to CPU ", cpu);
        s.fp32_seconds = product_seconds(Precision::fp32);
        s.fp32 = core_speed(rates_, Precision::fp32, s.fp32_seconds);
        if (bf16) {
          s.bf16_seconds = product_seconds(Precision::bf16);
          s.bf16 = core_speed(rates_, Precision::bf16, s.bf16_seconds);
        }
      } catch (...) {
        failed = std::current_exception();
      }
    });
    probe.join();
    if (failed) std::rethrow_exception(failed);
    out.push_back(s);
  }
  return out;
}

plan::MeasuredRates measure_compute_rates(const ComputeCalibrationOptions& options) {
  auto say = [&](std::string_view what) {
    if (options.progress) options.progress(what);
  };
  const SingleThreadedBlas single_threaded_blas;
  plan::MeasuredRates r;
  r.present = true;
  r.cpu = cpu_model_name();
  r.cores = int(std::max(1u, std::thread::hardware_concurrency()));
  r.cache = read_cache_sizes();
  const GemmGrid grid = gemm_grid(options.quick);
  const GemmGrid warm_grid = gemm_warm_grid(options.quick);
  std::vector<int> thread_counts = {1};
  if (options.threads > 1) thread_counts.push_back(options.threads);
  DTRAIN_CHECK(options.passes >= 1, "--passes must be at least 1 (got ", options.passes, ")");
  std::vector<std::vector<plan::GemmSample>> cold(options.passes), warm(options.passes);
  for (int pass = 0; pass < options.passes; ++pass) {
    const std::string of =
        options.passes > 1 ? str(" (pass ", pass + 1, " of ", options.passes, ")") : "";
    for (Precision precision : {Precision::fp32, Precision::bf16}) {
      for (int threads : thread_counts) {
        say(str("matrix products, ", plan::name(precision), ", ", threads, " thread",
                threads == 1 ? "" : "s", of));
        measure_gemm(grid, precision, threads, options.quick ? 2e-3 : 10e-3, false, cold[pass]);
        // The warm grid holds 80 of the cold grid's 392 shapes, each at half the time per point
        // and 3 calls at least where the cold takes 5 (warm calls vary less: no page walks, no
        // memory traffic from other work).
        measure_gemm(warm_grid, precision, threads, options.quick ? 2e-3 : 5e-3, true, warm[pass]);
      }
    }
  }
  r.gemm = median_over_passes(cold);
  r.gemm_warm = median_over_passes(warm);
  say("memory-bound kernels");
  r.kernels = measure_kernels(options.quick, options.passes);
  // The three slowdowns, each the median over the passes (one after the other in each pass): a
  // single figure is a ratio of two short timings, which one burst of other work can double.
  std::vector<double> interference, corun, wait;
  for (int pass = 0; pass < options.passes; ++pass) {
    const std::string of =
        options.passes > 1 ? str(" (pass ", pass + 1, " of ", options.passes, ")") : "";
    say("compute beside a communication thread" + of);
    interference.push_back(measure_comm_interference(options.quick, options.timeout_s));
    say("products on every core at once" + of);
    corun.push_back(measure_corun_slowdown(r.cores, options.quick));
    say("collectives with more thread ranks than cores" + of);
    wait.push_back(measure_oversubscribed_wait(r.cores, options.quick, options.timeout_s));
  }
  r.comm_interference = median(interference);
  r.corun_slowdown = median(corun);
  r.oversubscribed_wait_s = median(wait);
  say("collectives on thread ranks");
  measure_collectives(options.quick, options.timeout_s, r.collectives);
  return r;
}

std::vector<plan::GemmSample> median_over_passes(
    const std::vector<std::vector<plan::GemmSample>>& passes) {
  DTRAIN_CHECK(!passes.empty(), "median_over_passes: no passes");
  std::vector<plan::GemmSample> out = passes.front();
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<double> seconds;
    for (const auto& pass : passes) {
      DTRAIN_CHECK(pass.size() == out.size(), "median_over_passes: passes of ", pass.size(),
                   " and ", out.size(), " points");
      const plan::GemmSample& s = pass[i];
      DTRAIN_CHECK(s.precision == out[i].precision && s.threads == out[i].threads &&
                       s.m == out[i].m && s.n == out[i].n && s.k == out[i].k,
                   "median_over_passes: point ", i, " differs between passes");
      seconds.push_back(s.seconds);
    }
    out[i].seconds = median(seconds);
  }
  return out;
}

}  // namespace dtrain::calibrate
