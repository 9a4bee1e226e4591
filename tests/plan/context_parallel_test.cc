// context_parallel.h's formulas worked by hand on a small case (T = 8 tokens over cp = 2 ranks,
// b = 1, h = 8, a = 4 heads of d = 2, t = 1, e = 2 bytes), the causal work of the two splits, the
// ulysses refusal, the automatic choice's rule, and the planner and search with --cp.
#include "dtrain/cost/context_parallel.h"

#include <gtest/gtest.h>

#include <string>

#include "dtrain/core/check.h"
#include "dtrain/plan/planner.h"

namespace dtrain::plan {
namespace {

CpShape small() {
  CpShape s;
  s.seq = 8;
  s.micro_batch = 1;
  s.hidden = 8;
  s.heads = 4;
  s.tp = 1;
  s.cp = 2;
  s.bytes_per_element = 2;
  return s;
}

TEST(ContextParallel, KvBlockIsOneRanksKAndV) {
  // 2 (K and V) x b 1 x T/N 4 tokens x 4 K/V heads x d 2 x e 2 = 128 bytes.
  EXPECT_EQ(cp_local_tokens(small()), 4);
  EXPECT_DOUBLE_EQ(cp_kv_block_bytes(small()), 128);
  // GQA: 2 K/V heads over tp 2: one per TP rank, 2 x 4 x 1 x 2 x 2 = 32.
  CpShape g = small();
  g.kv_heads = 2;
  g.tp = 2;
  EXPECT_EQ(cp_kv_heads_per_tp_rank(g), 1);
  EXPECT_DOUBLE_EQ(cp_kv_block_bytes(g), 32);
  // More TP ranks than K/V heads: each keeps a copy of one head.
  g.tp = 4;
  EXPECT_EQ(cp_kv_heads_per_tp_rank(g), 1);
}

TEST(ContextParallel, RingSendsNMinus1BlocksForwardAnd2NMinus1Backward) {
  // cp 2: forward one hop of [K|V] (128); backward one hop of [K|V|dK|dV] (256) and the dK/dV
  // going home (128): 384 bytes in 2 messages.
  const CpLayerTraffic t = cp_ring_traffic_per_layer(small(), Recompute::none);
  EXPECT_EQ(t.forward.messages, 1);
  EXPECT_EQ(t.forward.steps, 1);
  EXPECT_DOUBLE_EQ(t.forward.bytes_sent, 128);
  EXPECT_DOUBLE_EQ(t.forward.bytes_received, 128);
  EXPECT_EQ(t.backward.messages, 2);
  EXPECT_DOUBLE_EQ(t.backward.bytes_sent, 384);
  // cp 4, T 16: block 2 x 4 x 4 x 2 x 2 = 128; forward 3 hops = 384; backward 3 + 4 blocks = 896.
  CpShape four = small();
  four.seq = 16;
  four.cp = 4;
  const CpLayerTraffic f = cp_ring_traffic_per_layer(four, Recompute::none);
  EXPECT_EQ(f.forward.messages, 3);
  EXPECT_DOUBLE_EQ(f.forward.bytes_sent, 384);
  EXPECT_EQ(f.backward.messages, 4);
  EXPECT_DOUBLE_EQ(f.backward.bytes_sent, 896);
  // Full recompute reruns the forward's hops in the backward; selective adds nothing.
  const CpLayerTraffic full = cp_ring_traffic_per_layer(four, Recompute::full);
  EXPECT_EQ(full.backward.messages, 7);
  EXPECT_DOUBLE_EQ(full.backward.bytes_sent, 896 + 384);
  EXPECT_DOUBLE_EQ(cp_ring_traffic_per_layer(four, Recompute::selective).bytes_sent(),
                   f.bytes_sent());
  // One rank: nothing.
  CpShape one = small();
  one.cp = 1;
  EXPECT_DOUBLE_EQ(cp_ring_traffic_per_layer(one, Recompute::none).bytes_sent(), 0);
}

TEST(ContextParallel, AllGatherGathersKvForwardAndReduceScattersBackward) {
  // S = 2 x b 1 x T 8 x 4 heads x d 2 x e 2 = 256 (the gathered [K|V]); a ring all-gather sends
  // (N-1)/N S = 128 in N-1 = 1 step, the reduce-scatter of dK, dV the same.
  const CpLayerTraffic t = cp_all_gather_traffic_per_layer(small(), Recompute::none);
  EXPECT_EQ(t.forward.messages, 1);
  EXPECT_EQ(t.forward.steps, 1);
  EXPECT_DOUBLE_EQ(t.forward.bytes_sent, 128);
  EXPECT_EQ(t.backward.messages, 1);
  EXPECT_DOUBLE_EQ(t.backward.bytes_sent, 128);
  // cp 4, T 16: S = 2 x 16 x 4 x 2 x 2 = 512; 3/4 of it = 384 each way, in 3 steps.
  CpShape four = small();
  four.seq = 16;
  four.cp = 4;
  const CpLayerTraffic f = cp_all_gather_traffic_per_layer(four, Recompute::none);
  EXPECT_EQ(f.forward.steps, 3);
  EXPECT_DOUBLE_EQ(f.forward.bytes_sent, 384);
  EXPECT_DOUBLE_EQ(f.backward.bytes_sent, 384);
  // Full recompute gathers again in the backward.
  EXPECT_DOUBLE_EQ(cp_all_gather_traffic_per_layer(four, Recompute::full).backward.bytes_sent, 768);
}

TEST(ContextParallel, UlyssesRunsFourAllToAllsEachWay) {
  // Q, O: b 1 x T/N 4 x a/t 4 x d 2 x e 2 = 64 bytes; K, V the same (4 K/V heads). Each
  // all-to-all sends (N-1)/N = half: 32; forward Q, K, V, O = 128, backward dO, dQ, dK, dV = 128.
  const CpLayerTraffic t = cp_ulysses_traffic_per_layer(small(), Recompute::none);
  EXPECT_EQ(t.forward.messages, 4);
  EXPECT_EQ(t.forward.steps, 4);  // pairwise: N-1 = 1 step each
  EXPECT_DOUBLE_EQ(t.forward.bytes_sent, 128);
  EXPECT_DOUBLE_EQ(t.forward.bytes_received, 128);
  EXPECT_EQ(t.backward.messages, 4);
  EXPECT_DOUBLE_EQ(t.backward.bytes_sent, 128);
  EXPECT_EQ(cp_ulysses_traffic_per_layer(small(), Recompute::full).backward.messages, 8);
  // GQA: 2 K/V heads, K and V of 32 bytes: forward 2 x 32 (Q, O) + 2 x 16 (K, V) = 96.
  CpShape g = small();
  g.kv_heads = 2;
  EXPECT_DOUBLE_EQ(cp_ulysses_traffic_per_layer(g, Recompute::none).forward.bytes_sent, 96);
  EXPECT_DOUBLE_EQ(cp_traffic_per_layer(g, CpAlgorithm::ulysses, Recompute::none).bytes_sent(),
                   192);
}

TEST(ContextParallel, UlyssesRefusesHeadsThatDoNotSplit) {
  CpShape g = small();
  g.kv_heads = 2;
  g.tp = 2;  // 4 heads, 2 K/V heads over cp 2 x tp 2 = 4
  EXPECT_EQ(cp_layout_error(g, CpAlgorithm::ulysses),
            "--cp-algo ulysses needs --heads 4 and --kv-heads 2 divisible by --cp 2 x --tp 2 = 4 "
            "(each rank attends over whole heads): --kv-heads 2 is not; use --cp-algo ring or "
            "all-gather");
  g.kv_heads = 0;
  g.heads = 6;
  g.hidden = 12;
  EXPECT_NE(cp_layout_error(g, CpAlgorithm::ulysses).find(": --heads 6 is not"), std::string::npos);
  EXPECT_EQ(cp_layout_error(small(), CpAlgorithm::ulysses), "");
}

TEST(ContextParallel, SequenceMustDivide) {
  CpShape s = small();
  s.seq = 6;  // divisible by cp 2, not by 2 x cp
  EXPECT_EQ(cp_layout_error(s, CpAlgorithm::ulysses), "");
  EXPECT_EQ(cp_layout_error(s, CpAlgorithm::ring),
            "--cp-algo ring needs --seq-length 6 divisible by 2 x --cp 2 = 4 (the load-balanced "
            "causal split cuts the sequence into 2 x cp chunks)");
  EXPECT_NE(cp_layout_error(s, CpAlgorithm::all_gather).find("divisible by 2 x --cp 2"),
            std::string::npos);
  s.seq = 7;
  EXPECT_EQ(cp_layout_error(s, CpAlgorithm::ulysses), "--cp 2 does not divide --seq-length 7");
}

ActivationShape small_layer() {
  ActivationShape a;
  a.seq = 8;
  a.micro_batch = 1;
  a.hidden = 8;
  a.heads = 4;
  a.tp = 1;
  a.bytes_per_element = 2;
  a.dropout = false;
  return a;
}

TEST(ContextParallel, ActivationsPerRankByAlgorithm) {
  // At T/N = 4 tokens (sbh = 32): LN inputs and QKV/MLP inputs 8 x 32 = 256, Q, K, V and the
  // projection input 2 x 4 x 32 = 256, GELU and fc2 inputs 4 x 32 x 4 = 512, one block of
  // scores 2 x (4 heads x 4 x 4) = 128: 1152 bytes, of which the score block 128.
  const ActivationShape a = small_layer();
  ActivationShape local = a;
  local.seq = 4;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(local), 1152);
  // Every algorithm computes blockwise: no scores kept, the log-sum-exp (4 bytes x 4 heads x 4
  // rows = 64) in their place. ring: nothing more.
  EXPECT_DOUBLE_EQ(cp_activation_bytes_per_layer(a, 2, CpAlgorithm::ring), 1152 - 128 + 64);
  EXPECT_DOUBLE_EQ(cp_attention_state_bytes_per_layer(a, 2, CpAlgorithm::ring), 64);
  // ulysses: Q, K, V and O again, split by heads: 4 x 4 tokens x 8 x 2 bytes = 256 more.
  EXPECT_DOUBLE_EQ(cp_activation_bytes_per_layer(a, 2, CpAlgorithm::ulysses), 1024 + 64 + 256);
  // all-gather: the gathered K, V of both ranks, 2 x 2 x 4 tokens x 8 x 2 bytes = 256 more.
  EXPECT_DOUBLE_EQ(cp_activation_bytes_per_layer(a, 2, CpAlgorithm::all_gather), 1024 + 64 + 256);
  // The whole layer without CP keeps its 8 x 8 scores: 2560, more than twice the ring's.
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(a), 2560);
  // Selective recompute changes nothing under CP (no score term to drop); full keeps the layer
  // input at T/N tokens.
  ActivationShape sel = a;
  sel.recompute = Recompute::selective;
  EXPECT_DOUBLE_EQ(cp_activation_bytes_per_layer(sel, 2, CpAlgorithm::ulysses), 1024 + 64 + 256);
  EXPECT_DOUBLE_EQ(cp_activation_bytes_per_layer(sel, 2, CpAlgorithm::ring), 1152 - 128 + 64);
  ActivationShape full = a;
  full.recompute = Recompute::full;
  EXPECT_DOUBLE_EQ(cp_activation_bytes_per_layer(full, 2, CpAlgorithm::ring), 2 * 32);
  EXPECT_DOUBLE_EQ(cp_activation_bytes_per_layer(full, 2, CpAlgorithm::all_gather), 2 * 32);
  // The ring's transient block: 4 heads x 4 x 4 x 2 bytes.
  EXPECT_DOUBLE_EQ(cp_ring_block_bytes(a, 2), 128);
  EXPECT_DOUBLE_EQ(cp_activation_bytes_per_layer(a, 1, CpAlgorithm::ring), 2560);
}

TEST(ContextParallel, CausalWorkOfTheTwoSplits) {
  // T 8 over 2 ranks. Contiguous: rank 0 rows 0..3 attend to 1+2+3+4 = 10 keys, rank 1 rows 4..7
  // to 5+6+7+8 = 26. Balanced (4 chunks of 2): rank 0 chunks 0 and 3 (rows 0, 1, 6, 7):
  // 1+2+7+8 = 18; rank 1 chunks 1 and 2 (rows 2..5): 3+4+5+6 = 18.
  EXPECT_EQ(causal_attention_pairs(8, 2, 0, CpSplit::contiguous), 10);
  EXPECT_EQ(causal_attention_pairs(8, 2, 1, CpSplit::contiguous), 26);
  EXPECT_EQ(causal_attention_pairs(8, 2, 0, CpSplit::balanced), 18);
  EXPECT_EQ(causal_attention_pairs(8, 2, 1, CpSplit::balanced), 18);
  EXPECT_DOUBLE_EQ(causal_work_imbalance(8, 2, CpSplit::contiguous), 26.0 / 18.0);
  for (int n : {2, 3, 4, 8, 16}) {
    const int64_t t = int64_t{2} * n * 4096;
    // Balanced: every rank the same, 2N C^2 + C pairs (C = T/(2N)).
    const int64_t c = t / (2 * n);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(causal_attention_pairs(t, n, r, CpSplit::balanced), 2 * n * c * c + c);
    }
    EXPECT_DOUBLE_EQ(causal_work_imbalance(t, n, CpSplit::balanced), 1.0);
    // Contiguous: the busiest rank does 2 - 1/N times the mean as T grows.
    EXPECT_DOUBLE_EQ(cp_contiguous_imbalance_limit(n), 2.0 - 1.0 / n);
    EXPECT_NEAR(causal_work_imbalance(t, n, CpSplit::contiguous), 2.0 - 1.0 / n, 1e-3) << n;
    EXPECT_LT(causal_work_imbalance(t, n, CpSplit::contiguous), 2.0 - 1.0 / n);
  }
}

TEST(ContextParallel, AutomaticChoiceFollowsItsRule) {
  // MHA, cp 4: ulysses' 8 all-to-alls send 8 x 3/4 x 64 = 384 bytes... fewer than the ring's
  // and the all-gather's: ulysses.
  CpShape s = small();
  s.seq = 16;
  s.cp = 4;
  s.heads = 4;
  CpChoice c = choose_cp_algorithm(s, Recompute::none, true);
  EXPECT_EQ(c.algorithm, CpAlgorithm::ulysses) << c.why;
  EXPECT_LT(cp_traffic_per_layer(s, CpAlgorithm::ulysses, Recompute::none).bytes_sent(),
            cp_traffic_per_layer(s, CpAlgorithm::all_gather, Recompute::none).bytes_sent());
  // Heads that do not split over cp x tp: ring when its hops hide, all-gather when not.
  s.tp = 2;
  c = choose_cp_algorithm(s, Recompute::none, true);
  EXPECT_EQ(c.algorithm, CpAlgorithm::ring) << c.why;
  EXPECT_NE(c.why.find("hides behind"), std::string::npos) << c.why;
  c = choose_cp_algorithm(s, Recompute::none, false);
  EXPECT_EQ(c.algorithm, CpAlgorithm::all_gather) << c.why;
  EXPECT_NE(c.why.find("ulysses cannot split 4 heads"), std::string::npos) << c.why;
  // GQA with few K/V heads: the all-gather moves less than ulysses (Q and O travel whole).
  CpShape g;
  g.seq = 64;
  g.hidden = 64;
  g.heads = 32;
  g.kv_heads = 2;
  g.cp = 2;
  EXPECT_GT(cp_traffic_per_layer(g, CpAlgorithm::ulysses, Recompute::none).bytes_sent(),
            cp_traffic_per_layer(g, CpAlgorithm::all_gather, Recompute::none).bytes_sent());
  EXPECT_EQ(choose_cp_algorithm(g, Recompute::none, false).algorithm, CpAlgorithm::all_gather);
  // A sequence only ulysses can split (not divisible by 2 x cp).
  CpShape odd = small();
  odd.seq = 6;
  EXPECT_EQ(choose_cp_algorithm(odd, Recompute::none, true).algorithm, CpAlgorithm::ulysses);
  odd.tp = 4;  // and heads that do not split either: refused
  EXPECT_THROW(choose_cp_algorithm(odd, Recompute::none, true), Error);
}

PlanInput gpt_input(int64_t seq) {
  PlanInput in;
  in.model = model_preset("megatron-1.7b");
  in.model.seq = seq;
  in.cluster = parse_cluster("1x8xH100");
  in.training.global_batch = 8;
  return in;
}

TEST(ContextParallelPlanner, CpSplitsActivationsAndPricesItsTraffic) {
  const PlanInput in = gpt_input(16384);
  Layout base;
  base.dp = 8;
  Layout cp = base;
  cp.dp = 4;
  cp.cp = 2;
  cp.cp_algo = CpAlgorithm::ring;
  const Plan p1 = evaluate(in, base);
  const Plan p2 = evaluate(in, cp);
  EXPECT_EQ(p2.layout.cp_algo, CpAlgorithm::ring);
  // The ring keeps no scores: far less than half of the activations.
  EXPECT_LT(p2.memory.activation_per_layer, p1.memory.activation_per_layer / 2);
  // The CP rows carry the formula's bytes: per layer x 24 layers x 2 micro-batches (B 8 / dp 4).
  CpShape s;
  s.seq = 16384;
  s.hidden = 2304;
  s.heads = 24;
  s.cp = 2;
  const double per_layer = cp_ring_traffic_per_layer(s, Recompute::none).bytes_sent();
  double cp_bytes = 0;
  for (const GroupTraffic& g : p2.traffic) {
    if (g.group == "CP") cp_bytes += g.bytes_per_rank;
  }
  EXPECT_DOUBLE_EQ(cp_bytes, per_layer * 24 * 2);
  EXPECT_DOUBLE_EQ(p2.cp.bytes_per_step, cp_bytes);
  EXPECT_DOUBLE_EQ(p2.cp.imbalance_balanced, 1.0);
  EXPECT_GT(p2.time.cp_total_s, 0);
  EXPECT_LE(p2.time.cp_s, p2.time.cp_total_s);
  // ZeRO shards over dp x cp = 8: the same optimizer bytes as dp 8 without CP.
  Layout z1 = base, z2 = cp;
  z1.zero_stage = z2.zero_stage = 1;
  EXPECT_DOUBLE_EQ(evaluate(in, z1).memory.optimizer, evaluate(in, z2).memory.optimizer);
  // The gradients are reduced over dp x cp: the DP rows' group has 8 ranks.
  for (const GroupTraffic& g : p2.traffic) {
    if (g.group == "DP") {
      EXPECT_EQ(g.size, 8);
    }
  }
}

TEST(ContextParallelPlanner, LayoutErrorsNameTheFlag) {
  const PlanInput in = gpt_input(2048);
  Layout l;
  l.dp = 2;
  l.cp = 4;
  EXPECT_EQ(layout_error(in, l), "");
  l.cp = 16;
  l.dp = 1;
  EXPECT_EQ(layout_error(in, l), "--cp 16 is more than the cluster's 8 GPUs");
  PlanInput odd = gpt_input(2050);  // 2 divides it, 2 x 2 does not; 24 heads split over 2
  l.cp = 2;
  l.dp = 4;
  l.cp_algo = CpAlgorithm::ring;
  EXPECT_NE(layout_error(odd, l).find("--cp-algo ring needs --seq-length 2050 divisible by 2 x "
                                      "--cp 2 = 4"),
            std::string::npos);
  l.cp_algo = CpAlgorithm::automatic;
  EXPECT_EQ(layout_error(odd, l), "");
  EXPECT_EQ(evaluate(odd, l).layout.cp_algo, CpAlgorithm::ulysses);
  l.dp = 1;
  EXPECT_NE(layout_error(in, l).find("--dp 1 x --cp 2 x --tp 1 x --pp 1 = 2 GPUs does not match"),
            std::string::npos);
}

TEST(ContextParallelPlanner, SearchRespectsTheConstraints) {
  // 24 heads: ulysses needs cp x tp dividing 24; seq 2050 is not divisible by 2 x cp for any
  // cp > 1, so only ulysses layouts with cp dividing 2050 (2) and 24 / tp can appear.
  PlanInput in = gpt_input(2050);
  in.model.heads = 24;
  SearchOptions o;
  o.top = 1000;
  o.fixed.cp = 2;
  const SearchResult r = search(in, o);
  ASSERT_FALSE(r.top.empty());
  for (const RankedPlan& p : r.top) {
    EXPECT_EQ(p.plan.layout.cp, 2);
    EXPECT_EQ(p.plan.layout.cp_algo, CpAlgorithm::ulysses);
    EXPECT_EQ(in.model.heads % (2 * p.plan.layout.tp), 0);
  }
  // The free search: every cp > 1 layout it ranks is one the constraints allow.
  const PlanInput even = gpt_input(4096);
  o.top = 1000000;  // every fitting layout
  o.fixed = {};
  const SearchResult free = search(even, o);
  bool any_cp = false;
  for (const RankedPlan& p : free.top) {
    const Layout& l = p.plan.layout;
    if (l.cp == 1) continue;
    any_cp = true;
    EXPECT_EQ(layout_error(even, l), "") << describe(l);
    EXPECT_EQ(4096 % (2 * l.cp), 0);
  }
  EXPECT_TRUE(any_cp);
  EXPECT_EQ(search_size(even).layouts, free.evaluated);
}

}  // namespace
}  // namespace dtrain::plan
