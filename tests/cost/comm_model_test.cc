// Communication per step: the DP/ZeRO, TP and PP volumes of comm_model.h against their closed
// forms (ZeRO paper §7, Narayanan et al. 2021 §3.2), the alpha-beta time, the hierarchical
// all-reduce's phases, and the overlap rule.
#include <gtest/gtest.h>

#include "dtrain/core/check.h"
#include "dtrain/cost/comm_model.h"

namespace dtrain::plan {
namespace {

using comm::Algorithm;
using comm::CollectiveOp;

Link link(double gbps, double latency_us) {
  return {"test", gbps * 1e9, latency_us};
}

TEST(CommModel, AlphaBetaTimeOfARingAllReduce) {
  const double s = 1e9;
  const int n = 8;
  const CommCost c = collective_cost(CollectiveOp::all_reduce, Algorithm::ring, s, n, link(100, 5));
  EXPECT_EQ(c.steps, 2 * (n - 1));
  EXPECT_DOUBLE_EQ(c.bytes_sent, 2.0 * (n - 1) / n * s);
  EXPECT_DOUBLE_EQ(c.time_s, 5e-6 * 2 * (n - 1) + 2.0 * (n - 1) / n * s / 100e9);
  // A call repeated k times costs k times as much.
  const CommCost three = collective_cost(CollectiveCall{CollectiveOp::all_reduce, s, 3, "x"},
                                         Algorithm::ring, n, link(100, 5));
  EXPECT_EQ(three.steps, 3 * c.steps);
  EXPECT_DOUBLE_EQ(three.time_s, 3 * c.time_s);
}

TEST(CommModel, DataParallelBytesPerStepByZeroStage) {
  const int64_t psi = 1'000'000'000;
  const int n = 16;
  const double elements = static_cast<double>(psi);
  for (int stage = 0; stage <= 2; ++stage) {
    // 2 Psi (N-1)/N elements: an all-reduce, or a reduce-scatter plus an all-gather.
    const CollectiveTraffic t = dp_traffic_per_step(psi, n, stage, kMixedPrecisionAdam);
    EXPECT_DOUBLE_EQ(t.bytes_sent, 2 * elements * (n - 1) / n * 2) << "stage " << stage;
    EXPECT_DOUBLE_EQ(t.bytes_received, t.bytes_sent);
    EXPECT_EQ(t.steps, 2 * (n - 1));
  }
  // ZeRO-3: all-gather forward, all-gather backward, reduce-scatter: 3 Psi (N-1)/N, 1.5x.
  const CollectiveTraffic z3 = dp_traffic_per_step(psi, n, 3, kMixedPrecisionAdam);
  EXPECT_DOUBLE_EQ(z3.bytes_sent, 3 * elements * (n - 1) / n * 2);
  EXPECT_DOUBLE_EQ(z3.bytes_sent / dp_traffic_per_step(psi, n, 0, kMixedPrecisionAdam).bytes_sent,
                   1.5);
  EXPECT_EQ(z3.steps, 3 * (n - 1));
}

TEST(CommModel, GradientsAndWeightsTravelInTheirOwnPrecision) {
  // Megatron's fp32 gradients (4 B) with fp16 weights (2 B): ZeRO-1 reduce-scatters 4-byte
  // gradients and all-gathers 2-byte weights.
  const int64_t psi = 1000;
  const int n = 4;
  const CollectiveTraffic t = dp_traffic_per_step(psi, n, 1, kMegatronMixedPrecisionAdam);
  EXPECT_DOUBLE_EQ(t.bytes_sent, (4.0 + 2.0) * psi * (n - 1) / n);
}

TEST(CommModel, BucketsAndMicroBatches) {
  const int64_t psi = 1'000'000;
  const int n = 4;
  // Pieces split the volume, not add to it; each piece pays the ring's steps.
  const CollectiveTraffic one = dp_traffic_per_step(psi, n, 0, kFp32Adam);
  const CollectiveTraffic ten = dp_traffic_per_step(psi, n, 0, kFp32Adam, 1, 10);
  EXPECT_NEAR(ten.bytes_sent, one.bytes_sent, one.bytes_sent * 1e-12);
  EXPECT_EQ(ten.steps, 10 * one.steps);
  // Gradient accumulation over M micro-batches: DP and ZeRO-1 reduce once per step; ZeRO-2
  // reduce-scatters per micro-batch; ZeRO-3 gathers and reduce-scatters per micro-batch.
  const int m = 4;
  const double e = 4, p = static_cast<double>(psi), f = (n - 1.0) / n;
  EXPECT_DOUBLE_EQ(dp_traffic_per_step(psi, n, 0, kFp32Adam, m).bytes_sent, 2 * p * f * e);
  EXPECT_DOUBLE_EQ(dp_traffic_per_step(psi, n, 1, kFp32Adam, m).bytes_sent, 2 * p * f * e);
  EXPECT_DOUBLE_EQ(dp_traffic_per_step(psi, n, 2, kFp32Adam, m).bytes_sent, (m + 1) * p * f * e);
  EXPECT_DOUBLE_EQ(dp_traffic_per_step(psi, n, 3, kFp32Adam, m).bytes_sent, 3 * m * p * f * e);
}

TEST(CommModel, GradientBucketsCloseOnceTheyHoldTheSize) {
  // 100 bytes at 4 per element: a bucket closes at 25 elements or more. 10 + 30 = 40 closes the
  // first; 5 + 50 = 55 the second; the last unit is a bucket of its own, under the size.
  const std::vector<int64_t> units = {10, 30, 5, 50, 1};
  const std::vector<UnitRun> b = gradient_buckets(units, 100);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].first, 0);
  EXPECT_EQ(b[0].last, 1);
  EXPECT_EQ(b[0].count, 40);
  EXPECT_EQ(b[1].first, 2);
  EXPECT_EQ(b[1].last, 3);
  EXPECT_EQ(b[1].count, 55);
  EXPECT_EQ(b[2].first, 4);
  EXPECT_EQ(b[2].last, 4);
  EXPECT_EQ(b[2].count, 1);
  // 2-byte elements: 50 per bucket; 10 + 30 + 5 = 45 stays open and takes the 50.
  const std::vector<UnitRun> half = gradient_buckets(units, 100, 2);
  ASSERT_EQ(half.size(), 2u);
  EXPECT_EQ(half[0].last, 3);
  EXPECT_EQ(half[0].count, 95);
  EXPECT_EQ(half[1].count, 1);
  EXPECT_TRUE(gradient_buckets({}, 100).empty());
  EXPECT_THROW(gradient_buckets(units, 0), Error);
}

TEST(CommModel, TensorParallelPerLayer) {
  // 4 all-reduces of b s h elements per layer and micro-batch: 8 b s h (t-1)/t elements sent.
  const int64_t b = 2, s = 128, h = 256, e = 2;
  const double bsh = static_cast<double>(b * s * h);
  for (int t : {2, 4, 8}) {
    const CollectiveTraffic plain = tp_traffic_per_layer(b, s, h, e, t, false, Recompute::none);
    EXPECT_DOUBLE_EQ(plain.bytes_sent, 8 * bsh * (t - 1) / t * e) << "t=" << t;
    EXPECT_EQ(plain.steps, 4 * 2 * (t - 1));
    // Sequence parallelism: reduce-scatter + all-gather in place of each all-reduce, same bytes.
    const CollectiveTraffic sp = tp_traffic_per_layer(b, s, h, e, t, true, Recompute::none);
    EXPECT_DOUBLE_EQ(sp.bytes_sent, plain.bytes_sent);
    // Full recompute re-runs the forward's two all-reduces.
    const CollectiveTraffic full = tp_traffic_per_layer(b, s, h, e, t, false, Recompute::full);
    EXPECT_DOUBLE_EQ(full.bytes_sent, 12 * bsh * (t - 1) / t * e);
    EXPECT_DOUBLE_EQ(tp_traffic_per_layer(b, s, h, e, t, false, Recompute::selective).bytes_sent,
                     plain.bytes_sent);
  }
}

TEST(CommModel, PipelineBytesPerMicroBatch) {
  EXPECT_DOUBLE_EQ(pp_bytes_per_microbatch(2, 128, 256, 4, 4, false), 2.0 * 128 * 256 * 4);
  EXPECT_DOUBLE_EQ(pp_bytes_per_microbatch(2, 128, 256, 4, 4, true), 2.0 * 128 * 256 * 4 / 4);
}

TEST(CommModel, PipelineSendsPerStage) {
  // Virtual stages k = chunk x P + stage, 0..vP-1: each sends its activations to k + 1 unless it
  // is the last (vP - 1, on stage P - 1), and its input gradient to k - 1 unless it is the first
  // (0, on stage 0). Counted here by walking the virtual stages.
  for (int pp : {1, 2, 3, 4, 8}) {
    for (int vp : {1, 2, 3}) {
      int64_t total = 0;
      for (int stage = 0; stage < pp; ++stage) {
        int64_t sends = 0;
        for (int chunk = 0; chunk < vp; ++chunk) {
          const int k = chunk * pp + stage;
          if (pp > 1 && k + 1 < vp * pp) ++sends;
          if (pp > 1 && k > 0) ++sends;
        }
        EXPECT_EQ(pp_sends_per_microbatch(pp, vp, stage), sends) << pp << " " << vp << " " << stage;
        total += sends;
      }
      // Every boundary between consecutive virtual stages carries one send each way.
      EXPECT_EQ(total, pp > 1 ? 2 * (int64_t{vp} * pp - 1) : 0);
    }
  }
  EXPECT_THROW(pp_sends_per_microbatch(4, 1, 4), Error);
}

TEST(CommModel, HierarchicalAllReducePhases) {
  const double s = 8e9;
  const int k = 8, nodes = 4;
  const Link intra = link(300, 3), inter = link(25, 10);
  const HierarchicalCost h = hierarchical_all_reduce_cost(s, k, nodes, intra, inter);
  // Inside: reduce-scatter and all-gather of S over k ranks, (k-1)/k S each.
  EXPECT_DOUBLE_EQ(h.intra_first.bytes_sent, (k - 1.0) / k * s);
  EXPECT_DOUBLE_EQ(h.intra_last.bytes_sent, (k - 1.0) / k * s);
  EXPECT_EQ(h.intra_first.steps, k - 1);
  // Across: all-reduce of the S/k shard over the nodes, 2 (n-1)/n S/k.
  EXPECT_DOUBLE_EQ(h.inter.bytes_sent, 2.0 * (nodes - 1) / nodes * s / k);
  EXPECT_EQ(h.inter.steps, 2 * (nodes - 1));
  EXPECT_DOUBLE_EQ(h.time_s, h.intra_first.time_s + h.inter.time_s + h.intra_last.time_s);
  EXPECT_DOUBLE_EQ(h.inter.time_s, 10e-6 * 2 * (nodes - 1) + h.inter.bytes_sent / 25e9);
  // Against a flat ring over all k * n ranks at the inter-node link, k times fewer bytes cross.
  const CommCost flat =
      collective_cost(CollectiveOp::all_reduce, Algorithm::ring, s, k * nodes, inter);
  EXPECT_LT(h.inter.bytes_sent * k, flat.bytes_sent * 1.0001);
  EXPECT_LT(h.time_s, flat.time_s);
  // One rank per node: the hierarchy is just the inter-node ring.
  const HierarchicalCost one = hierarchical_all_reduce_cost(s, 1, nodes, intra, inter);
  EXPECT_DOUBLE_EQ(
      one.time_s,
      collective_cost(CollectiveOp::all_reduce, Algorithm::ring, s, nodes, inter).time_s);
}

TEST(CommModel, HierarchicalReduceScatterAndAllGather) {
  const double s = 1e6;
  const Link intra = link(100, 1), inter = link(10, 1);
  const HierarchicalCost rs =
      hierarchical_cost(CollectiveOp::reduce_scatter, s, 4, 2, intra, inter);
  EXPECT_DOUBLE_EQ(rs.intra_first.bytes_sent, 0.75 * s);
  EXPECT_DOUBLE_EQ(rs.inter.bytes_sent, 0.5 * s / 4);
  EXPECT_EQ(rs.intra_last.steps, 0);
  const HierarchicalCost ag = hierarchical_cost(CollectiveOp::all_gather, s, 4, 2, intra, inter);
  EXPECT_EQ(ag.intra_first.steps, 0);
  EXPECT_DOUBLE_EQ(ag.inter.bytes_sent, 0.5 * s / 4);
  EXPECT_DOUBLE_EQ(ag.intra_last.bytes_sent, 0.75 * s);
}

TEST(CommModel, ExposedTimeKeepsTheLastPiece) {
  EXPECT_DOUBLE_EQ(exposed_time(10, 1, 20), 1);  // hidden but for the last bucket
  EXPECT_DOUBLE_EQ(exposed_time(10, 1, 4), 6);   // longer than the window
  EXPECT_DOUBLE_EQ(exposed_time(0, 0, 4), 0);
}

// One stage's DP bytes per rank, worked by hand on zero.h's example: Psi = 10 over N = 4 ranks,
// shard 3, rank 0 owns [0, 3), 1 [3, 6), 2 [6, 9), 3 [9, 10). Bucket A = [4, 10) holds the
// pieces {0, 2, 3, 1} and bucket B = [0, 4) the pieces {3, 1, 0, 0}.
TEST(CommModel, StageDataParallelBytesPerRankFromTheShardPieces) {
  StageDataParallelRank s;
  s.params = 10;
  s.ranks = 4;
  s.buckets = {{4, 6}, {0, 4}};
  auto sent = [&](int zero, int rank, int microbatches = 1) {
    StageDataParallelRank x = s;
    x.zero_stage = zero;
    x.rank = rank;
    x.microbatches = microbatches;
    return stage_dp_bytes_moved(x, 1, 1);
  };
  // ZeRO 0, a ring all-reduce over chunk_of's chunks (A: {2, 2, 1, 1}, B: {1, 1, 1, 1}): every
  // chunk but the rank's own, then every chunk but the next rank's.
  EXPECT_EQ(sent(0, 0), (6 - 2) + (6 - 2) + (4 - 1) + (4 - 1));
  EXPECT_EQ(sent(0, 2), (6 - 1) + (6 - 1) + (4 - 1) + (4 - 1));
  // ZeRO 1: reduce-scatter each bucket (every piece but the rank's), then the parameters'
  // all-gather of [0, 10) with pieces {3, 3, 3, 1} (every piece but the next rank's).
  EXPECT_EQ(sent(1, 0), (6 - 0) + (4 - 3) + (10 - 3));
  EXPECT_EQ(sent(1, 2), (6 - 3) + (4 - 0) + (10 - 1));
  EXPECT_EQ(sent(1, 3), (6 - 1) + (4 - 0) + (10 - 3));
  // ZeRO 2 with 3 micro-batches reduce-scatters per micro-batch, the deferred bucket once.
  EXPECT_EQ(sent(2, 1, 3), 3 * ((6 - 2) + (4 - 1)) + (10 - 3));
  s.deferred_bucket = 1;
  EXPECT_EQ(sent(2, 1, 3), 3 * (6 - 2) + (4 - 1) + (10 - 3));
  // ZeRO 3: the same reduce-scatters, and each listed gather per micro-batch (every piece but
  // the next rank's): forward both buckets, backward only A, no rerun.
  s.forward_gathers = s.buckets;
  s.backward_gathers = {{4, 6}};
  EXPECT_EQ(sent(3, 1, 2), 2 * (6 - 2) + (4 - 1) + 2 * ((6 - 3) + (4 - 0)) + 2 * (6 - 3));
  // The group's mean is the continuous formula's: at ZeRO 1 without deferral, sum over the
  // ranks of (bucket - own piece) + (Psi - next piece) = (N - 1) (Psi + Psi).
  s.deferred_bucket = -1;
  int64_t total = 0;
  for (int r = 0; r < 4; ++r) total += sent(1, r);
  EXPECT_EQ(total, 3 * (10 + 10));
  EXPECT_DOUBLE_EQ(
      static_cast<double>(total) / 4,
      traffic_of(stage_dp_collectives({.params = 10, .zero_stage = 1}, {1, 1, 0}), 4).bytes_sent);
  // One rank sends nothing.
  s.ranks = 1;
  EXPECT_EQ(sent(3, 0, 4), 0);
}

// plan::stage_dp_collectives is dp_collectives for a whole stage, and its deferred and
// gathered elements change only what they say.
TEST(CommModel, StageDataParallelCollectives) {
  const StateBytes b{4, 4, 8};
  for (int zero = 0; zero <= 3; ++zero) {
    const double want = traffic_of(dp_collectives(1000, zero, b, 2), 4).bytes_sent;
    EXPECT_DOUBLE_EQ(
        traffic_of(stage_dp_collectives({.params = 1000, .zero_stage = zero, .microbatches = 2}, b),
                   4)
            .bytes_sent,
        want)
        << "zero " << zero;
  }
  // ZeRO-3 with 2 micro-batches, 100 deferred elements, 200 not gathered for the backward, 300
  // gathered again for W: (N-1)/N of 4 bytes x (gathers 2 x (1000 + 800 + 300) + reduce-scatter
  // 900 x 2 + 100).
  const std::vector<CollectiveCall> calls = stage_dp_collectives({.params = 1000,
                                                                  .zero_stage = 3,
                                                                  .microbatches = 2,
                                                                  .deferred = 100,
                                                                  .backward_gathered = 800,
                                                                  .rerun_gathered = 300},
                                                                 b);
  EXPECT_DOUBLE_EQ(traffic_of(calls, 4).bytes_sent,
                   0.75 * 4 * (2 * (1000 + 800 + 300) + (900 * 2 + 100)));
}

// SP's re-gathers: 2 all-gathers of b*s*h a layer, (N-1)/N of each sent.
TEST(CommModel, SequenceParallelRegathers) {
  const std::vector<CollectiveCall> calls = sp_regather_collectives(2, 8, 16, 4);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].count, 2);
  EXPECT_DOUBLE_EQ(calls[0].bytes, 2.0 * 8 * 16 * 4);
  EXPECT_DOUBLE_EQ(traffic_of(calls, 4).bytes_sent, 2 * 0.75 * 2 * 8 * 16 * 4);
}

}  // namespace
}  // namespace dtrain::plan
