// bench layouts' summary on figures chosen here (no timing): the scopes split by whether a
// group's ranks fit the machine's cores, each scope's errors, lowest Spearman and slowest top
// pick worked by hand, and the verdicts against the floors and goals.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "bench/layouts_bench.h"

namespace dtrain::bench {
namespace {

LayoutResult layout(int dp, int tp, std::vector<double> predicted, std::vector<double> measured) {
  LayoutResult r;
  r.spec.model = 0;
  r.spec.dp = dp;
  r.spec.tp = tp;
  r.predicted_ms = std::move(predicted);
  r.measured_ms = std::move(measured);
  r.predicted_source = "clock";
  return r;
}

// Two groups of the bench model, 3 repeats each, on a 2-core machine:
//  2 ranks: measured 10, 20, 30 ms in every repeat, predicted 11, 19, 33: errors +10, -5, +10 %,
//    the same order (Spearman 1), the top pick the fastest (0 % slower), repeats agree (1).
//  4 ranks (oversubscribed): measured repeats (10, 12, 11), (12, 10, 13), (20, 20, 20), medians
//    11, 12, 20; predicted 13, 12, 16: errors +18.18, 0, -20 %. Predicted order 2nd, 1st, 3rd
//    against 1st, 2nd, 3rd measured: rho = 1 - 6 (1 + 1) / (3 (9 - 1)) = 0.5; the top pick (12
//    predicted) measures 12 against the best 11: 9.09 % slower. The repeats rank (1,2,3),
//    (2,1,3), (1,2,3): pairs 0.5, 1, 0.5, mean 2/3, below both 0.8 and 0.9.
LayoutsBenchReport two_groups(int cores) {
  LayoutsBenchReport r;
  r.cores = cores;
  r.repeats = 3;
  r.steps = 4;
  r.models = layout_models();
  r.results.push_back(layout(2, 1, {11, 11, 11}, {10, 10, 10}));
  r.results.push_back(layout(1, 2, {19, 19, 19}, {20, 20, 20}));
  r.results.push_back(layout(2, 1, {33, 33, 33}, {30, 30, 30}));
  r.results.back().spec.zero = 1;
  r.results.push_back(layout(4, 1, {13, 13, 13}, {10, 12, 11}));
  r.results.push_back(layout(2, 2, {12, 12, 12}, {12, 10, 13}));
  r.results.push_back(layout(1, 4, {16, 16, 16}, {20, 20, 20}));
  summarize_layouts(r);
  return r;
}

TEST(LayoutsSummary, ScopesSplitWhereRanksOutnumberTheCores) {
  const LayoutsBenchReport r = two_groups(2);
  ASSERT_EQ(r.groups.size(), 2u);
  EXPECT_TRUE(r.groups[0].fits_cores);
  EXPECT_FALSE(r.groups[1].fits_cores);
  EXPECT_DOUBLE_EQ(r.groups[1].rank_correlation, 0.5);
  EXPECT_NEAR(r.groups[1].top_pick_slower_pct, 100.0 / 11, 1e-9);
  EXPECT_NEAR(r.groups[1].repeat_rank_correlation, 2.0 / 3, 1e-12);

  ASSERT_EQ(r.scopes.size(), 3u);
  const LayoutScope &all = r.scopes[0], &fit = r.scopes[1], &over = r.scopes[2];
  EXPECT_EQ(all.name, "all");
  EXPECT_EQ(fit.name, "ranks fit the cores");
  EXPECT_EQ(over.name, "oversubscribed");
  EXPECT_EQ(all.layouts, 6);
  EXPECT_EQ(fit.layouts, 3);
  EXPECT_EQ(over.layouts, 3);
  EXPECT_EQ(fit.groups, 1);

  const double b1 = 100 * (13.0 - 11) / 11;  // 18.18 %
  EXPECT_NEAR(all.mean_abs_error_pct, (10 + 5 + 10 + b1 + 0 + 20) / 6, 1e-9);
  EXPECT_NEAR(fit.mean_abs_error_pct, 25.0 / 3, 1e-9);
  EXPECT_NEAR(over.mean_abs_error_pct, (b1 + 20) / 3, 1e-9);
  EXPECT_NEAR(fit.p90_abs_error_pct, 10, 1e-9);  // the two largest are both 10
  EXPECT_NEAR(fit.worst_abs_error_pct, 10, 1e-9);
  EXPECT_NEAR(over.worst_abs_error_pct, 20, 1e-9);
  EXPECT_DOUBLE_EQ(fit.lowest_rank_correlation, 1);
  EXPECT_DOUBLE_EQ(over.lowest_rank_correlation, 0.5);
  EXPECT_DOUBLE_EQ(all.lowest_rank_correlation, 0.5);
  EXPECT_DOUBLE_EQ(fit.slowest_top_pick_pct, 0);
  EXPECT_NEAR(all.slowest_top_pick_pct, 100.0 / 11, 1e-9);
  EXPECT_EQ(fit.repeats_below_floor, 0);
  EXPECT_EQ(over.repeats_below_floor, 1);
  EXPECT_EQ(over.repeats_below_goal, 1);

  // Floors 10 % mean, 25 % worst, 0.8, 5 %; goals 5, 10, 15 %, 0.9, 3 %.
  const LayoutScope::Verdict fit_floor = fit.against(kClockFloors);
  const LayoutScope::Verdict fit_goal = fit.against(kClockGoals);
  EXPECT_TRUE(fit_floor.all());
  EXPECT_FALSE(fit_goal.mean);  // 8.3 % > 5 %
  EXPECT_TRUE(fit_goal.p90 && fit_goal.worst && fit_goal.rank && fit_goal.pick);
  const LayoutScope::Verdict over_floor = over.against(kClockFloors);
  EXPECT_FALSE(over_floor.mean);  // 12.7 % > 10 %
  EXPECT_TRUE(over_floor.p90);    // no floor on the 90th percentile
  EXPECT_TRUE(over_floor.worst);  // 20 % <= 25 %
  EXPECT_FALSE(over_floor.rank);
  EXPECT_FALSE(over_floor.pick);
  EXPECT_FALSE(all.against(kClockFloors).mean);  // 10.53 % > 10 %

  std::ostringstream text;
  print_layouts_bench(text, r);
  const std::string t = text.str();
  EXPECT_NE(t.find("ranks fit the 2 cores: 3 / 1"), std::string::npos) << t;
  EXPECT_NE(t.find("8.3 % floor"), std::string::npos) << t;
  EXPECT_NE(t.find("12.7 % MISSED"), std::string::npos) << t;
  EXPECT_NE(t.find("0.50 MISSED"), std::string::npos) << t;
  EXPECT_NE(t.find("0 / 0 groups"), std::string::npos) << t;

  const nlohmann::json j = layouts_bench_to_json(r);
  EXPECT_EQ(j["cores"], 2);
  EXPECT_EQ(j["groups"][1]["fits_cores"], false);
  EXPECT_EQ(j["summary"]["scopes"].size(), 3u);
  EXPECT_EQ(j["summary"]["scopes"][1]["meets_floors"]["all"], true);
  EXPECT_EQ(j["summary"]["scopes"][2]["meets_floors"]["rank_correlation"], false);
  EXPECT_TRUE(j["targets"]["floors"]["p90_abs_error_pct"].is_null());
  EXPECT_EQ(j["targets"]["goals"]["p90_abs_error_pct"], 10.0);
}

TEST(LayoutsSummary, EveryGroupFitsOnEnoughCores) {
  for (int cores : {4, 0}) {  // 0: unknown, every group taken to fit
    const LayoutsBenchReport r = two_groups(cores);
    EXPECT_TRUE(r.groups[0].fits_cores && r.groups[1].fits_cores) << cores;
    ASSERT_EQ(r.scopes.size(), 1u) << cores;
    EXPECT_EQ(r.scopes[0].layouts, 6);
  }
}

TEST(LayoutsSummary, OtherProgramsLoadOverEveryRepeatThatMeasuredIt) {
  // Two layouts measured it (0, 0.02, 0.3 and 0.04, 0.01, 0.0 cores), the others did not (MPI):
  // the median of the six is (0.01 + 0.02) / 2 = 0.015, the most 0.3, in the first layout.
  LayoutsBenchReport r = two_groups(2);
  r.results[0].other_load_cores = {0, 0.02, 0.3};
  r.results[3].other_load_cores = {0.04, 0.01, 0.0};
  summarize_layouts(r);
  EXPECT_DOUBLE_EQ(r.other_load_median, 0.015);
  EXPECT_DOUBLE_EQ(r.other_load_max, 0.3);
  EXPECT_EQ(r.other_load_max_layout, 0);
  EXPECT_DOUBLE_EQ(r.results[0].other_load, 0.02);
  EXPECT_EQ(r.results[1].other_load, -1);
  const LayoutsBenchReport none = two_groups(2);
  EXPECT_EQ(none.other_load_max_layout, -1);
  EXPECT_EQ(none.other_load_median, -1);
}

}  // namespace
}  // namespace dtrain::bench
