// search: ranks only valid, fitting layouts, misses none (checked against a brute-force
// enumeration on a small cluster), and explains its rejections, the node boundary among them.
// Pruned by the pipeline's lower bound, it returns what replaying every layout returns.
#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>

#include "dtrain/clock/engine_clock.h"
#include "dtrain/core/check.h"
#include "dtrain/machine/measured_rates.h"
#include "dtrain/plan/planner.h"
#include "dtrain/plan/pricing_memo.h"

namespace dtrain::plan {
namespace {

PlanInput input(std::string_view model, std::string_view cluster, int64_t batch) {
  PlanInput in;
  in.model = model_preset(model);
  in.cluster = parse_cluster(cluster);
  in.training.global_batch = batch;
  return in;
}

bool any_contains(const std::vector<std::string>& lines, const std::string& needle) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& s) { return s.find(needle) != std::string::npos; });
}

TEST(Search, Llama70bOnEightH100Nodes) {
  const PlanInput in = input("llama2-70b", "8x8xH100", 1024);
  const SearchResult r = search(in, {5});
  ASSERT_EQ(r.top.size(), 5u);
  EXPECT_GT(r.evaluated, r.fitting);
  EXPECT_GT(r.fitting, 0);
  for (size_t i = 0; i < r.top.size(); ++i) {
    const Plan& p = r.top[i].plan;
    EXPECT_EQ(layout_error(in, p.layout), "");
    EXPECT_TRUE(p.memory.fits());
    EXPECT_FALSE(r.top[i].why.empty());
    // What search reports is what evaluate says about the same layout.
    EXPECT_DOUBLE_EQ(evaluate(in, p.layout).time.step_s, p.time.step_s);
    if (i > 0) {
      EXPECT_LE(r.top[i - 1].plan.time.step_s, p.time.step_s);
    }
    // TP stays inside a node in the winners.
    EXPECT_LE(p.layout.tp, in.cluster.gpus_per_node);
  }
  EXPECT_TRUE(any_contains(r.explanations, "crosses the node boundary")) << r.explanations[0];
  EXPECT_TRUE(any_contains(r.explanations, "InfiniBand"));
  EXPECT_TRUE(any_contains(r.explanations, "do not fit"));
  // 80 layers: pp = 32 does not divide them, and runs the balanced split (no pp <= 64 is
  // above the layers, so no split is refused for them).
  for (const Rejection& j : r.invalid_splits) {
    EXPECT_EQ(j.reason.find("80 layers"), std::string::npos) << j.reason;
  }
}

// --search with --tp 8 (or any layout flag): the axis is held, the rest searched. The held
// search evaluates exactly the free search's layouts that have tp = 8, and ranks them alike.
TEST(Search, FixedAxesAreHeld) {
  const PlanInput in = input("megatron-1.7b", "1x8xA100", 32);
  const SearchResult all = search(in, {1'000'000});
  for (const auto& [what, fixed] :
       {std::pair{"tp=4", SearchConstraints{.tp = 4}},
        std::pair{"pp=2 zero=1", SearchConstraints{.pp = 2, .zero_stage = 1}},
        std::pair{"b=2 rc=selective",
                  SearchConstraints{.micro_batch = 2, .recompute = Recompute::selective}},
        std::pair{"dp=2 M=4", SearchConstraints{.dp = 2, .microbatches = 4}}}) {
    SCOPED_TRACE(what);
    EXPECT_EQ(describe(fixed), what);
    const SearchResult held = search(in, {1'000'000, fixed});
    EXPECT_EQ(held.fixed.any(), true);
    ASSERT_FALSE(held.top.empty());
    for (const RankedPlan& r : held.top) {
      EXPECT_TRUE(fixed.admits(r.plan.layout, in.training.global_batch)) << describe(r.plan.layout);
      if (fixed.microbatches) {
        EXPECT_EQ(r.plan.microbatches, *fixed.microbatches);
      }
    }
    int64_t admitted = 0;
    for (const RankedPlan& r : all.top)
      admitted += fixed.admits(r.plan.layout, in.training.global_batch) ? 1 : 0;
    EXPECT_EQ(held.fitting, admitted);  // all.top holds every fitting layout
    EXPECT_EQ(search_size(in, fixed).layouts, held.evaluated);
    // The best held layout is the best admitted one of the free search.
    for (const RankedPlan& r : all.top) {
      if (!fixed.admits(r.plan.layout, in.training.global_batch)) continue;
      EXPECT_DOUBLE_EQ(held.top.front().plan.time.step_s, r.plan.time.step_s);
      break;
    }
  }
  ASSERT_EQ(static_cast<int64_t>(all.top.size()), all.fitting);
  // An axis no split allows is an error naming it.
  try {
    search(in, {5, SearchConstraints{.tp = 3}});
    ADD_FAILURE() << "tp=3 on 8 GPUs was searched";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no valid layout has tp=3 on 8 GPUs"), std::string::npos)
        << e.what();
  }
}

TEST(Search, FindsTheBestOfABruteForceEnumeration) {
  // Every (dp, cp, tp, pp, v, zero, b, recompute, sp) of 8 GPUs for a small model, evaluated
  // here independently of search's loops (CP's algorithm automatic).
  const PlanInput in = input("megatron-1.7b", "1x8xA100", 32);
  double best = 1e300;
  int64_t fitting = 0;
  for (int tp : {1, 2, 4, 8}) {
    for (int cp : {1, 2, 4, 8}) {
      for (int pp : {1, 2, 4, 8}) {
        if (tp * pp * cp > 8) continue;
        for (int v = 1; v <= 24; ++v) {
          for (int b : {1, 2, 4, 8, 16, 32}) {
            for (int zero = 0; zero <= 3; ++zero) {
              for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
                for (bool sp : {false, true}) {
                  Layout l;
                  l.tp = tp;
                  l.pp = pp;
                  l.dp = 8 / (tp * pp * cp);
                  l.cp = cp;
                  l.vp = v;
                  l.micro_batch = b;
                  l.zero_stage = zero;
                  l.recompute = rc;
                  l.sequence_parallel = sp;
                  if (v > 1) l.schedule = ScheduleKind::interleaved;
                  if (!layout_error(in, l).empty()) continue;
                  if ((sp && tp == 1) || (zero > 0 && l.dp * cp == 1)) continue;  // as without
                  const Plan p = evaluate(in, l);
                  if (!p.memory.fits()) continue;
                  ++fitting;
                  best = std::min(best, p.time.step_s);
                }
              }
            }
          }
        }
      }
    }
  }
  const SearchResult r = search(in, {3});
  ASSERT_FALSE(r.top.empty());
  EXPECT_EQ(r.fitting, fitting);
  EXPECT_DOUBLE_EQ(r.top.front().plan.time.step_s, best);
}

TEST(Search, NothingFitsIsExplained) {
  const PlanInput in = input("megatron-1t", "1x8xA100", 64);
  const SearchResult r = search(in);
  EXPECT_TRUE(r.top.empty());
  EXPECT_EQ(r.fitting, 0);
  ASSERT_FALSE(r.explanations.empty());
  EXPECT_NE(r.explanations[0].find("no layout fits"), std::string::npos) << r.explanations[0];
}

// search_size walks the same layouts search() evaluates, without evaluating them.
TEST(Search, SizeCountsWhatTheSearchEvaluates) {
  for (const auto& [model, cluster, batch] :
       {std::tuple{"llama2-70b", "8x8xH100", 1024}, std::tuple{"megatron-1.7b", "1x8xA100", 32},
        std::tuple{"megatron-1t", "1x8xA100", 64}}) {
    const PlanInput in = input(model, cluster, batch);
    const SearchSize size = search_size(in);
    EXPECT_EQ(size.layouts, search(in).evaluated) << model << " on " << cluster;
    EXPECT_GT(size.seconds, 0);
    EXPECT_LT(size.seconds, 1);
  }
}

// A search estimated at minutes is refused before it starts, with its size.
TEST(Search, TooLargeIsRefusedBeforeItStarts) {
  PlanInput in = input("megatron-1.7b", "1000x1000xH100", 1000000000);
  in.model.layers = 10000;
  EXPECT_GT(search_size(in).seconds, kMaxSearchSeconds);
  try {
    search(in);
    FAIL() << "a search of " << search_size(in).layouts << " layouts ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--search would evaluate"), std::string::npos) << e.what();
  }
}

// The pruned search (memory bounded before it is priced, steps bounded before they are replayed)
// against the exhaustive one (every layout's memory priced, every fitting layout replayed): the
// same ten best layouts with the same step times to the bit, the same reasons and the same
// families' best members and closest misses, on dense GPT and Llama models, Mixtral and
// DeepSeek-V3 (expert parallelism), a 128K-token Llama (context parallelism), clusters of 8 to
// 256 GPUs, 4 or 8 per node: at least 20 (model, cluster) pairs rank ten layouts, two fit
// nothing (their closest misses compared); and it does prune.
TEST(Search, PrunedIsTheExhaustiveSearch) {
  struct Case {
    const char* model;
    const char* cluster;
    int64_t batch;
    int top = 10;
    SearchConstraints fixed = {};
    int64_t seq = 0;  // the preset's unless set
  };
  const Case cases[] = {
      {"megatron-1.7b", "1x8xA100", 32, 1},
      {"megatron-1.7b", "1x8xA100", 32},
      {"megatron-1.7b", "2x8xA100", 64},
      {"megatron-1.7b", "3x8xA100", 96},
      {"megatron-3.6b", "2x8xA100", 64},
      {"megatron-7.5b", "4x8xA100", 128},
      {"megatron-18.4b", "4x8xA100", 256},
      {"megatron-39.1b", "8x8xA100", 512},
      {"megatron-76.1b", "2x8xA100", 64},  // families none of whose members fit
      {"gpt3-175b", "4x8xA100", 128},      // nothing fits
      {"gpt3-175b", "8x8xA100", 256},
      {"gpt3-175b", "16x8xA100", 512},
      {"llama2-7b", "1x8xH100", 64},
      {"llama2-7b", "2x8xH100", 64, 10, {}, 32768},
      {"llama2-7b", "4x8xH100", 256},
      {"llama2-13b", "2x8xH100", 128},
      {"llama2-13b", "3x4xA100", 48},
      {"llama2-70b", "8x8xH100", 1024},
      {"llama2-70b", "8x8xH100", 1024, 4, SearchConstraints{.tp = 8, .zero_stage = 1}},
      {"llama2-70b", "4x8xA100", 256},
      {"mixtral-8x7b", "4x8xH100", 256},
      {"mixtral-8x7b", "8x8xH100", 512},
      {"deepseek-v3", "16x8xH100", 512},  // nothing fits
      {"deepseek-v3", "32x8xH100", 512},
      {"llama3-405b-128k", "16x8xH100", 16},
  };
  int64_t simulated = 0, fitting = 0, priced_all = 0, priced_pruned = 0;
  size_t ranked = 0;
  std::set<std::string> ten_best;  // the (model, cluster) pairs compared on ten layouts
  for (const Case& k : cases) {
    SCOPED_TRACE(testing::Message()
                 << k.model << " on " << k.cluster << " top " << k.top << " " << describe(k.fixed));
    PlanInput in = input(k.model, k.cluster, k.batch);
    if (k.seq > 0) in.model.seq = k.seq;
    const SearchResult pruned = search(in, {k.top, k.fixed});
    const SearchResult all = search(in, {k.top, k.fixed, true});
    EXPECT_EQ(all.simulated, all.fitting);
    EXPECT_LE(pruned.simulated, all.simulated);
    simulated += pruned.simulated;
    fitting += pruned.fitting;
    EXPECT_EQ(pruned.evaluated, all.evaluated);
    EXPECT_EQ(pruned.fitting, all.fitting);
    EXPECT_EQ(pruned.splits, all.splits);
    EXPECT_EQ(all.priced, all.evaluated);
    EXPECT_LE(pruned.priced, all.priced);
    priced_all += all.priced;
    priced_pruned += pruned.priced;
    ASSERT_EQ(pruned.top.size(), all.top.size());
    ranked += all.top.empty() ? 0 : 1;
    if (all.top.size() == 10) ten_best.insert(std::string(k.model) + " on " + k.cluster);
    for (size_t i = 0; i < all.top.size(); ++i) {
      const Plan& a = pruned.top[i].plan;
      const Plan& b = all.top[i].plan;
      EXPECT_EQ(describe(a.layout), describe(b.layout)) << "#" << i + 1;
      EXPECT_EQ(a.time.step_s, b.time.step_s) << "#" << i + 1;
      EXPECT_EQ(a.time.bubble_s, b.time.bubble_s) << "#" << i + 1;
      EXPECT_EQ(a.memory.total(), b.memory.total()) << "#" << i + 1;
      EXPECT_EQ(pruned.top[i].why, all.top[i].why);
      // And both are what evaluate says of the layout.
      EXPECT_EQ(evaluate(in, a.layout).time.step_s, a.time.step_s);
    }
    // The families' best members and the closest misses, with their figures, are in these.
    EXPECT_EQ(pruned.explanations, all.explanations);
  }
  // Every case but the two where nothing fits ranked layouts; most fitting layouts never had
  // their schedule replayed, and some layouts were not priced.
  EXPECT_EQ(ranked, std::size(cases) - 2);
  EXPECT_GE(ten_best.size(), 20u);
  EXPECT_LT(simulated * 4, fitting) << simulated << " of " << fitting << " replayed";
  EXPECT_LT(priced_pruned, priced_all);
}

// Memory's lower bound (what search sets layouts aside by) is never above evaluate's total, on
// every layout of a search over a dense, a grouped-query, an MoE model and more TP ranks than
// K/V heads.
TEST(Search, MemoryLowerBoundIsBelowTheTotal) {
  int64_t checked = 0;
  for (const auto& [model, cluster, batch] :
       {std::tuple{"megatron-18.4b", "4x8xA100", 256}, std::tuple{"llama2-70b", "4x8xH100", 256},
        std::tuple{"mixtral-8x7b", "4x8xH100", 256},
        std::tuple{"llama3-405b-128k", "4x8xH100", 8}}) {
    const PlanInput in = input(model, cluster, batch);
    for (const Layout& l : search_layouts(in)) {
      const double bound = memory_lower_bound(in, l);
      const double total = evaluate_memory(in, l).memory.total();
      ASSERT_LE(bound, total) << model << " " << describe(l);
      EXPECT_GT(bound, 0) << model << " " << describe(l);
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
}

// What search prices with its memo (the pieces shared by layouts alike in some axes) is what
// evaluate prices layout by layout, to the bit: memory, its lower bounds and the step's bound,
// with one memo over every layout of each search, in its order (so a piece is reused by every
// layout after the first that needed it). The step's compute bound is never above the step's
// bound, nor above the replayed step. Dense, grouped-query, MoE, more TP ranks than K/V heads,
// CP searched, and the 6ND convention's rescaled times.
TEST(Search, MemoPricesAsEvaluateDoes) {
  int64_t checked = 0, replayed = 0;
  for (const auto& [model, cluster, batch, six_nd] :
       {std::tuple{"megatron-18.4b", "4x8xA100", 256, false},
        std::tuple{"llama2-70b", "4x8xH100", 256, false},
        std::tuple{"mixtral-8x7b", "4x8xH100", 256, false},
        std::tuple{"llama3-405b-128k", "4x8xH100", 8, false},
        std::tuple{"gpt3-175b", "8x8xA100", 64, true}}) {
    PlanInput in = input(model, cluster, batch);
    if (six_nd) in.training.flops = FlopsConvention::six_nd;
    detail::PricingMemo memo;
    int64_t i = 0;
    for (const Layout& l : search_layouts(in)) {
      const std::string where = std::string(model) + " " + describe(l);
      const double states = detail::first_stage_states(in, l, memo);
      ASSERT_EQ(states, memory_lower_bound(in, l)) << where;
      const MemoryBreakdown memoized = detail::layout_memory(in, l, memo);
      const MemoryBreakdown alone = evaluate_memory(in, l).memory;
      ASSERT_EQ(detail::evaluate_memory(in, l, memo).memory.total(), alone.total()) << where;
      ASSERT_EQ(memoized.total(), alone.total()) << where;
      ASSERT_EQ(memoized.activations, alone.activations) << where;
      ASSERT_EQ(memoized.temporary, alone.temporary) << where;
      ASSERT_EQ(memoized.stage, alone.stage) << where;
      const double bound = detail::memory_lower_bound(in, l, memo, states);
      ASSERT_LE(bound, alone.total()) << where;
      ASSERT_GE(bound, states) << where;
      const double step_bound = step_lower_bound(in, l);
      ASSERT_EQ(detail::step_lower_bound(in, l, memo), step_bound) << where;
      const double compute_bound = detail::step_compute_bound(in, l, memo);
      ASSERT_LE(compute_bound, step_bound) << where;
      ASSERT_GT(compute_bound, 0) << where;
      if (i++ % 37 == 0) {
        ASSERT_LE(compute_bound, evaluate(in, l).time.step_s) << where;
        ++replayed;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 2000);
  EXPECT_GT(replayed, 50);
}

// On a cluster file with measured rates the engine clock prices the step with its own replay,
// which the search does not bound: it replays every fitting layout and ranks as before.
TEST(Search, EngineClockReplaysEveryFittingLayout) {
  PlanInput in = input("megatron-1.7b", "1x8xA100", 32);
  MeasuredRates& r = in.cluster.gpu.measured;
  r.present = true;
  r.cpu = "unit";
  r.cores = 64;
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    for (int threads : {1, 2}) r.gemm.push_back({p, threads, 64, 64, 64, 2.0 * 64 * 64 * 64 / 1e9});
  }
  for (int i = 0; i < kKernelOpCount; ++i) {
    const auto op = static_cast<KernelOp>(i);
    r.kernels.push_back({op, Precision::fp32, kernel_bytes_per_element(op) * 1e9, 1e-6});
  }
  for (const char* c : {"all_reduce", "reduce_scatter", "all_gather"}) {
    r.collectives.push_back({c, "ring", "intra_node", 2, 1e-5, 1e9});
  }
  r.collectives.push_back({"send_recv", "direct", "intra_node", 2, 1e-5, 1e9});
  ASSERT_TRUE(has_measured_rates(in.cluster));
  const SearchResult pruned = search(in, {3});
  const SearchResult all = search(in, {3, {}, true});
  ASSERT_FALSE(pruned.top.empty());
  EXPECT_EQ(pruned.simulated, pruned.fitting);
  EXPECT_EQ(pruned.top.front().plan.time.clock, "engine (measured rates)");
  ASSERT_EQ(pruned.top.size(), all.top.size());
  for (size_t i = 0; i < all.top.size(); ++i) {
    EXPECT_EQ(describe(pruned.top[i].plan.layout), describe(all.top[i].plan.layout));
    EXPECT_EQ(pruned.top[i].plan.time.step_s, all.top[i].plan.time.step_s);
  }
  EXPECT_EQ(pruned.explanations, all.explanations);
}

TEST(Search, TopIsHonoured) {
  const PlanInput in = input("megatron-1.7b", "1x8xA100", 32);
  EXPECT_EQ(search(in, {1}).top.size(), 1u);
  EXPECT_EQ(search(in, {7}).top.size(), 7u);
}

}  // namespace
}  // namespace dtrain::plan
