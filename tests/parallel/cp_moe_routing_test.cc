// An MoE router under context parallelism routes as the serial router does: the CP ranks of a
// micro-batch route their T/cp tokens of each sequence together (model/cp_route_group.h over
// ContextParallelGroup), so every token gets the serial routing's experts and gates, each
// assignment is kept or dropped as in the serial routing (capacity of the whole micro-batch, in
// its token order), and every rank's aux loss is the serial one (to the rounding of its sums'
// other order and of the router product's other shape). Each rank sends, per routing,
// plan::collective_traffic of the all-gather of plan::cp_moe_routing_gather_bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/rng.h"
#include "dtrain/cost/collective_cost.h"
#include "dtrain/cost/moe.h"
#include "dtrain/model/cp_route_group.h"
#include "dtrain/model/ops/moe.h"
#include "dtrain/parallel/context_parallel.h"

namespace dtrain::parallel {
namespace {

struct Shape {
  int64_t B = 3, T = 16, C = 8;
  model::MoeConfig moe{.experts = 4, .top_k = 2, .every = 1, .capacity_factor = 0.5};
};

std::vector<float> random_values(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(2 * rng.uniform() - 1);
  return v;
}

void expect_serial_routing(int cp, model::CpTokenSplit split, const Shape& s) {
  const int64_t N = s.B * s.T, E = s.moe.experts, k = s.moe.top_k;
  const std::vector<float> x = random_values(static_cast<size_t>(N * s.C), 3);
  const std::vector<float> w = random_values(static_cast<size_t>(E * s.C), 4);
  model::MoeRouting serial;
  model::moe_route(serial, x.data(), w.data(), N, s.C, s.moe);
  ASSERT_GT(serial.dropped, 0) << "the capacity must drop assignments for the test to cover it";
  const int64_t T_local = s.T / cp;
  std::vector<int64_t> kept(static_cast<size_t>(E), 0), dropped(static_cast<size_t>(cp), 0);
  std::vector<std::vector<int64_t>> kept_by_rank(static_cast<size_t>(cp));
  comm::threads::run_ranks(cp, [&](comm::Communicator& comm) {
    ContextParallelGroup group(comm, plan::CpAlgorithm::ring, nullptr, split);
    // This rank's tokens of each sequence, at their global positions.
    std::vector<float> mine(static_cast<size_t>(s.B * T_local * s.C));
    std::vector<int64_t> global(static_cast<size_t>(s.B * T_local));
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t t = 0; t < T_local; ++t) {
        const int64_t g = b * s.T + group.position(t, T_local), n = b * T_local + t;
        global[static_cast<size_t>(n)] = g;
        std::copy_n(x.begin() + g * s.C, s.C, mine.begin() + n * s.C);
      }
    }
    model::CpRouteGroup route_group(group, s.B, T_local);
    model::MoeRouting r;
    model::moe_route(r, mine.data(), w.data(), s.B * T_local, s.C, s.moe, {}, &route_group);
    for (int64_t n = 0; n < s.B * T_local; ++n) {
      const int64_t g = global[static_cast<size_t>(n)];
      for (int64_t j = 0; j < k; ++j) {
        const auto i = static_cast<size_t>(n * k + j), gi = static_cast<size_t>(g * k + j);
        EXPECT_EQ(r.expert[i], serial.expert[gi]) << "token " << g << " choice " << j;
        // BLAS promises no equal bits across shapes: the logits' product has N / cp rows here.
        EXPECT_NEAR(r.gate[i], serial.gate[gi], 1e-6) << "token " << g << " choice " << j;
        EXPECT_EQ(r.slot[i] >= 0, serial.slot[gi] >= 0) << "token " << g << " choice " << j;
      }
    }
    EXPECT_NEAR(r.aux_loss, serial.aux_loss, 1e-6 * serial.aux_loss);
    EXPECT_EQ(r.aux_tokens, N);
    EXPECT_EQ(r.aux_chosen, serial.chosen);
    kept_by_rank[static_cast<size_t>(comm.rank())] = r.kept;
    dropped[static_cast<size_t>(comm.rank())] = r.dropped;
    // Counters = formula: one all-gather of each rank's (runs x E + E) words.
    const int64_t runs = split == model::CpTokenSplit::balanced ? 2 : 1;
    const double S = plan::cp_moe_routing_gather_bytes(s.B, runs, E, cp);
    const comm::Algorithm algo =
        comm::resolve_algorithm(comm, comm::Algorithm::automatic, static_cast<long long>(S));
    const plan::CollectiveTraffic want =
        plan::collective_traffic(comm::CollectiveOp::all_gather, algo, S, cp, comm.rank());
    EXPECT_EQ(group.counters().routing.calls, 1);
    EXPECT_EQ(static_cast<double>(group.counters().routing.traffic.bytes_sent), want.bytes_sent);
    EXPECT_EQ(static_cast<double>(group.counters().routing.traffic.bytes_received),
              want.bytes_received);
  });
  int64_t total_dropped = 0;
  for (int q = 0; q < cp; ++q) {
    total_dropped += dropped[static_cast<size_t>(q)];
    for (int64_t e = 0; e < E; ++e) {
      kept[static_cast<size_t>(e)] += kept_by_rank[static_cast<size_t>(q)][static_cast<size_t>(e)];
    }
  }
  EXPECT_EQ(kept, serial.kept);
  EXPECT_EQ(total_dropped, serial.dropped);
}

TEST(ContextParallelMoeRouting, EqualsTheSerialRoutingForEverySplit) {
  for (int cp : {2, 4}) {
    for (model::CpTokenSplit split :
         {model::CpTokenSplit::balanced, model::CpTokenSplit::contiguous}) {
      SCOPED_TRACE(testing::Message()
                   << "cp " << cp << " split "
                   << (split == model::CpTokenSplit::balanced ? "balanced" : "contiguous"));
      expect_serial_routing(cp, split, Shape{});
    }
  }
}

TEST(ContextParallelMoeRouting, RoutingAloneTakesTheAuxOverItsOwnTokens) {
  // The serial router is its own group of one: aux over its N tokens, scale 1.
  const Shape s;
  const int64_t N = s.B * s.T;
  const std::vector<float> x = random_values(static_cast<size_t>(N * s.C), 5);
  const std::vector<float> w = random_values(static_cast<size_t>(s.moe.experts * s.C), 6);
  model::MoeRouting r;
  model::moe_route(r, x.data(), w.data(), N, s.C, s.moe);
  EXPECT_EQ(r.aux_tokens, N);
  EXPECT_EQ(r.aux_ranks, 1);
  EXPECT_EQ(r.aux_chosen, r.chosen);
}

}  // namespace
}  // namespace dtrain::parallel
