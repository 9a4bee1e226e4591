// Expert parallelism inside the model (model/moe_dispatch.h over parallel::ExpertParallelGroup):
// on n rank threads, each rank's EP model runs forward and backward on its own rows, and is set
// beside a serial model (all experts) run on the same rows:
//   - the loss and every dense gradient (router included) equal the serial model's on the same
//     rows (the token-side sums run in the serial layer's order; tolerance 1e-5 relative to the
//     tensor's largest value, for the experts' outputs computed in products of other row counts);
//   - each rank's expert gradients equal the sum over the EP group of the serial models'
//     gradients of those experts (the owner computes every source's rows);
//   - every exchange's bytes equal plan::ep_dispatch_bytes / ep_combine_bytes /
//     ep_counts_bytes fed with the routing every rank measured;
// with random routing, and with a router of zeros (every logit ties: each token picks experts 0
// and 1, so EP rank 1 of 2 receives no rows at all and its experts get zero gradients).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/rng.h"
#include "dtrain/cost/moe.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/moe_dispatch.h"
#include "dtrain/parallel/expert_parallel.h"

namespace dtrain::parallel {
namespace {

constexpr int64_t kB = 2, kT = 8;  // rows per rank

model::GptConfig moe_model() {
  model::GptConfig g = model::gpt_preset("tiny").config;
  g.layers = 2;
  g.moe = {.experts = 4, .top_k = 2, .every = 1};
  return g;
}

struct RankResult {
  float loss = 0, serial_loss = 0;
  std::vector<float> grads;                // the EP model's, its local table
  std::vector<float> serial_grads;         // the serial model's on the same rows
  std::vector<std::vector<int64_t>> kept;  // per routed layer: (E) rows kept per expert
  EpCounters counters;
};

std::vector<int32_t> tokens_of(int rank, int64_t vocab, uint64_t seed) {
  Rng rng(seed + static_cast<uint64_t>(rank));
  std::vector<int32_t> t(static_cast<size_t>(kB * kT));
  for (int32_t& x : t) x = static_cast<int32_t>(rng.uniform_int(vocab));
  return t;
}

void zero_routers(model::GptModel& m) {
  const model::ParamTable& t = m.param_table();
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].name.ends_with("moe.router.w")) {
      std::span<float> p = m.param(static_cast<int>(i));
      std::fill(p.begin(), p.end(), 0.0f);
    }
  }
}

std::vector<RankResult> run(int n, bool zero_router) {
  const model::GptConfig g = moe_model();
  std::vector<RankResult> out(static_cast<size_t>(n));
  comm::threads::run_ranks(n, [&](comm::Communicator& world) {
    RankResult& r = out[static_cast<size_t>(world.rank())];
    const std::vector<int32_t> in = tokens_of(world.rank(), g.vocab, 1);
    const std::vector<int32_t> target = tokens_of(world.rank(), g.vocab, 100);
    MemoryTracker tracker;
    ExpertParallelGroup ep(world);
    model::GptModel m(g, &tracker, nullptr, nullptr, Recompute::none, &ep);
    model::GptModel s(g, &tracker);
    for (model::GptModel* x : {&m, &s}) {
      x->init_params(42);
      if (zero_router) zero_routers(*x);
      x->zero_grads();
    }
    r.loss = m.forward(in, target, kB, kT);
    m.backward();
    r.serial_loss = s.forward(in, target, kB, kT);
    s.backward();
    r.grads.assign(m.grads().begin(), m.grads().end());
    r.serial_grads.assign(s.grads().begin(), s.grads().end());
    for (int64_t l = 0; l < g.layers; ++l) {
      if (const model::MoeRouting* routing = m.moe_routing(m.activations(), l)) {
        r.kept.push_back(routing->kept);
      }
    }
    r.counters = ep.counters();
  });
  return out;
}

// max |a - b| / max |b| over one tensor.
double relative_diff(std::span<const float> a, std::span<const float> b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

void expect_equal_to_serial(int n, bool zero_router) {
  SCOPED_TRACE(testing::Message() << "ep " << n << (zero_router ? " zero router" : ""));
  const model::GptConfig g = moe_model();
  const std::vector<RankResult> res = run(n, zero_router);
  const model::ParamTable serial = model::gpt_param_table(g);
  const model::ParamTable local = model::ep_local_table(serial, g.moe, n);
  double worst_dense = 0, worst_expert = 0;
  for (int r = 0; r < n; ++r) {
    const RankResult& k = res[static_cast<size_t>(r)];
    EXPECT_NEAR(k.loss, k.serial_loss, 1e-6) << "rank " << r;
    for (size_t i = 0; i < local.size(); ++i) {
      const model::ParamTensor& lt = local[i];
      const model::ParamTensor& st = serial[i];
      const std::span<const float> got(k.grads.data() + lt.offset, static_cast<size_t>(lt.count));
      std::vector<float> want(static_cast<size_t>(lt.count), 0.0f);
      if (model::is_expert_tensor(lt.name)) {
        // The rank's experts: one run of the stacked tensor, summed over the sources.
        for (int q = 0; q < n; ++q) {
          const float* src =
              res[static_cast<size_t>(q)].serial_grads.data() + st.offset + r * lt.count;
          for (int64_t e = 0; e < lt.count; ++e) want[static_cast<size_t>(e)] += src[e];
        }
        worst_expert = std::max(worst_expert, relative_diff(got, want));
      } else {
        std::copy_n(k.serial_grads.data() + st.offset, lt.count, want.begin());
        worst_dense = std::max(worst_dense, relative_diff(got, want));
      }
      EXPECT_LE(relative_diff(got, want), 1e-5) << "rank " << r << " " << lt.name;
      if (zero_router && n == 2 && r == 1 && model::is_expert_tensor(lt.name)) {
        // Experts 2 and 3 got no rows: no gradient at all.
        EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float x) { return x == 0.0f; }))
            << lt.name;
      }
    }
  }
  std::printf("ep %d%s: max relative diff dense %.2e, experts %.2e\n", n,
              zero_router ? " (zero router)" : "", worst_dense, worst_expert);

  // Counters = the plan's formulas, per rank, summed over the routed layers (one micro-batch).
  const int64_t C = g.channels;
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(testing::Message() << "rank " << r);
    double dispatch_sent = 0, dispatch_received = 0, combine_sent = 0, combine_received = 0;
    for (size_t l = 0; l < res[0].kept.size(); ++l) {
      std::vector<std::vector<int64_t>> kept;
      for (int q = 0; q < n; ++q) kept.push_back(res[static_cast<size_t>(q)].kept[l]);
      const plan::MoeA2aRank d = plan::ep_dispatch_bytes(kept, C, sizeof(float), r);
      const plan::MoeA2aRank c = plan::ep_combine_bytes(kept, C, sizeof(float), r);
      dispatch_sent += d.sent_total();
      dispatch_received += d.received_total();
      combine_sent += c.sent_total();
      combine_received += c.received_total();
    }
    const EpCounters& k = res[static_cast<size_t>(r)].counters;
    const double layers = static_cast<double>(res[0].kept.size());
    EXPECT_EQ(static_cast<double>(k.dispatch_forward.traffic.bytes_sent), dispatch_sent);
    EXPECT_EQ(static_cast<double>(k.dispatch_forward.traffic.bytes_received), dispatch_received);
    EXPECT_EQ(static_cast<double>(k.combine_forward.traffic.bytes_sent), combine_sent);
    EXPECT_EQ(static_cast<double>(k.combine_forward.traffic.bytes_received), combine_received);
    // Backward: the combine's gradient moves as the dispatch, the dispatch's as the combine.
    EXPECT_EQ(static_cast<double>(k.combine_backward.traffic.bytes_sent), dispatch_sent);
    EXPECT_EQ(static_cast<double>(k.dispatch_backward.traffic.bytes_sent), combine_sent);
    EXPECT_EQ(static_cast<double>(k.counts.traffic.bytes_sent),
              layers * plan::ep_counts_bytes(g.moe.experts, n));
    if (r == 0) {
      std::printf(
          "ep %d rank 0: dispatch forward sent %lld B (formula %.0f), combine %lld B "
          "(formula %.0f)\n",
          n, static_cast<long long>(k.dispatch_forward.traffic.bytes_sent), dispatch_sent,
          static_cast<long long>(k.combine_forward.traffic.bytes_sent), combine_sent);
    }
  }
}

TEST(ExpertParallel, ModelEqualsSerialAndCountersEqualThePlan) {
  expect_equal_to_serial(2, false);
  expect_equal_to_serial(4, false);
}

TEST(ExpertParallel, ARankThatReceivesNoRowsWorks) {
  expect_equal_to_serial(2, true);
}

TEST(ExpertParallel, GroupMembersAreCarvedFromDp) {
  EXPECT_EQ(ep_group_members(4, 2, 3), (std::vector<int>{2, 3}));
  EXPECT_EQ(expert_dp_group_members(4, 2, 3), (std::vector<int>{1, 3}));
  EXPECT_EQ(expert_dp_group_members(4, 4, 2), (std::vector<int>{2}));
}

TEST(ExpertParallel, ExactBytesFormula) {
  // 2 ranks, 4 experts (2 each), 8-element rows of 4 bytes: rank 0 keeps 3,1 rows for its own
  // experts and sends 2+0 to rank 1; rank 1 sends 1+4 to rank 0 and keeps 0+5.
  const std::vector<std::vector<int64_t>> kept = {{3, 1, 2, 0}, {1, 4, 0, 5}};
  const plan::MoeA2aRank d0 = plan::ep_dispatch_bytes(kept, 8, 4, 0);
  EXPECT_EQ(d0.sent, (std::vector<double>{0, 2 * 32}));
  EXPECT_EQ(d0.received, (std::vector<double>{0, 5 * 32}));
  const plan::MoeA2aRank c1 = plan::ep_combine_bytes(kept, 8, 4, 1);
  EXPECT_EQ(c1.sent, (std::vector<double>{2 * 32, 0}));
  EXPECT_EQ(c1.received, (std::vector<double>{5 * 32, 0}));
  EXPECT_EQ(plan::ep_counts_bytes(4, 2), 16.0);
}

}  // namespace
}  // namespace dtrain::parallel
