// CP under bf16 sends K and V (Ulysses: Q, K, V and O) as bf16 and the gradients as fp32: the
// attention output and every input gradient equal, bit for bit, those of the same group sending
// everything in fp32 (the products that read K and V round them to bf16 anyway; Ulysses's output
// equals the fp32 wire's rounded to bf16), and the bytes
// each rank sends per pass equal cost/context_parallel.h's with plan::cp_wire_bytes(bf16).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/rng.h"
#include "dtrain/parallel/context_parallel.h"

namespace dtrain::parallel {
namespace {

struct PassResult {
  std::vector<float> out, dqkv;
  SiteCounter forward, backward;
};

// One layer's attention forward and backward on this rank's T_local tokens with bf16 compute.
PassResult run_pass(comm::Communicator& comm, plan::CpAlgorithm algo, CpWire wire, int64_t B,
                    int64_t T_local, int64_t C, int64_t NH) {
  Rng rng(1234 + static_cast<uint64_t>(comm.rank()));
  std::vector<float> qkv(static_cast<size_t>(B * T_local * 3 * C)),
      dout(static_cast<size_t>(B * T_local * C));
  for (float& x : qkv) x = static_cast<float>(2 * rng.uniform() - 1);
  for (float& x : dout) x = static_cast<float>(2 * rng.uniform() - 1);
  ContextParallelGroup group(comm, algo, nullptr, model::CpTokenSplit::balanced, wire);
  model::Compute cx;
  cx.precision = model::Precision::bf16;
  PassResult r;
  r.out.assign(static_cast<size_t>(B * T_local * C), 0.0f);
  r.dqkv.assign(qkv.size(), 0.0f);
  const int key = 0;
  group.attention_forward(r.out.data(), qkv.data(), &key, B, T_local, C, NH, cx);
  group.attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), &key, B, T_local,
                           C, NH, cx);
  r.forward = group.counters().forward;
  r.backward = group.counters().backward;
  return r;
}

TEST(ContextParallelWire, Bf16KvEqualsTheFp32WireBitForBitWithFewerBytes) {
  constexpr int64_t B = 2, C = 16, NH = 4;
  for (int n : {2, 4}) {
    const int64_t T_local = 4;
    for (plan::CpAlgorithm algo :
         {plan::CpAlgorithm::ring, plan::CpAlgorithm::all_gather, plan::CpAlgorithm::ulysses}) {
      SCOPED_TRACE(testing::Message() << "cp " << n << " " << plan::name(algo));
      std::vector<PassResult> bf16(static_cast<size_t>(n)), fp32(static_cast<size_t>(n));
      comm::threads::run_ranks(n, [&](comm::Communicator& comm) {
        const auto r = static_cast<size_t>(comm.rank());
        bf16[r] = run_pass(comm, algo, CpWire::by_precision, B, T_local, C, NH);
        fp32[r] = run_pass(comm, algo, CpWire::fp32, B, T_local, C, NH);
      });
      plan::CpShape s;
      s.seq = T_local * n;
      s.micro_batch = B;
      s.hidden = C;
      s.heads = NH;
      s.cp = n;
      const plan::CpLayerTraffic want_bf16 = plan::cp_traffic_per_layer(
          plan::with_engine_wire(s, plan::Precision::bf16), algo, Recompute::none);
      const plan::CpLayerTraffic want_fp32 = plan::cp_traffic_per_layer(
          plan::with_engine_wire(s, plan::Precision::fp32), algo, Recompute::none);
      for (int r = 0; r < n; ++r) {
        const PassResult& a = bf16[static_cast<size_t>(r)];
        const PassResult& b = fp32[static_cast<size_t>(r)];
        if (algo == plan::CpAlgorithm::ulysses) {
          // Ulysses's output comes back over the wire in bf16: the fp32 wire's rounded, which is
          // all the model reads of it (the projection's product and bf16 activation storage).
          std::vector<float> rounded(b.out.size());
          for (size_t i = 0; i < rounded.size(); ++i) rounded[i] = round_to_bf16(b.out[i]);
          EXPECT_EQ(std::memcmp(a.out.data(), rounded.data(), a.out.size() * sizeof(float)), 0)
              << "rank " << r << ": attention output";
        } else {
          EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(float)), 0)
              << "rank " << r << ": attention output";
        }
        EXPECT_EQ(std::memcmp(a.dqkv.data(), b.dqkv.data(), a.dqkv.size() * sizeof(float)), 0)
            << "rank " << r << ": dQ, dK, dV";
        EXPECT_EQ(static_cast<double>(a.forward.traffic.bytes_sent), want_bf16.forward.bytes_sent);
        EXPECT_EQ(static_cast<double>(a.backward.traffic.bytes_sent),
                  want_bf16.backward.bytes_sent);
        EXPECT_EQ(static_cast<double>(b.forward.traffic.bytes_sent), want_fp32.forward.bytes_sent);
        EXPECT_EQ(static_cast<double>(b.backward.traffic.bytes_sent),
                  want_fp32.backward.bytes_sent);
      }
      // K/V (Q, O) halve; the gradients do not: the ring's backward hops carry both, all-gather's
      // and Ulysses's backward only gradients.
      EXPECT_EQ(2 * want_bf16.forward.bytes_sent, want_fp32.forward.bytes_sent);
      if (algo == plan::CpAlgorithm::ring) {
        EXPECT_LT(want_bf16.backward.bytes_sent, want_fp32.backward.bytes_sent);
        EXPECT_GT(2 * want_bf16.backward.bytes_sent, want_fp32.backward.bytes_sent);
      } else {
        EXPECT_EQ(want_bf16.backward.bytes_sent, want_fp32.backward.bytes_sent);
      }
      std::printf("  cp %d %-10s bytes/rank fwd %6.0f (fp32 %6.0f)  bwd %6.0f (fp32 %6.0f)\n", n,
                  std::string(plan::name(algo)).c_str(), want_bf16.forward.bytes_sent,
                  want_fp32.forward.bytes_sent, want_bf16.backward.bytes_sent,
                  want_fp32.backward.bytes_sent);
    }
  }
}

}  // namespace
}  // namespace dtrain::parallel
