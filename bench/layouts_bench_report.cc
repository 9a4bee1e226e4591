// The layout benchmark's report: each scope's verdict against the clock's floors and goals, the
// table for people and the same figures as JSON (print_layouts_bench, layouts_bench_to_json).
// Running the layouts and summarizing them is layouts_bench.cc's.
#include "bench/bench_util.h"
#include "bench/layouts_bench.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "bench/clock_bench.h"
#include "bench/scratch_dir.h"
#include "dtrain/calibrate/compute_calibration.h"
#include "dtrain/clock/engine_clock.h"
#include "dtrain/core/check.h"
#include "dtrain/machine/hardware.h"
#include "dtrain/model/bf16_gemm.h"
#include "dtrain/model/gpt_config.h"

namespace dtrain::bench {

LayoutScope::Verdict LayoutScope::against(const ClockTargets& t) const {
  auto at_most = [](double value, double target) { return target < 0 || value <= target; };
  Verdict v;
  v.mean = at_most(mean_abs_error_pct, t.mean_abs_error_pct);
  v.p90 = at_most(p90_abs_error_pct, t.p90_abs_error_pct);
  v.worst = at_most(worst_abs_error_pct, t.worst_abs_error_pct);
  v.rank = t.rank_correlation < 0 || lowest_rank_correlation >= t.rank_correlation;
  v.pick = at_most(slowest_top_pick_pct, t.top_pick_slower_pct);
  return v;
}

namespace {

// "7.7 goal", "15.0 floor", "24.8 MISSED": a figure and the best target it meets.
std::string judged(const std::string& figure, bool goal, bool floor, bool floor_set) {
  return figure + (goal ? " goal" : !floor_set ? " above goal" : floor ? " floor" : " MISSED");
}

std::string target_text(double floor, double goal, int digits) {
  return (floor < 0 ? std::string("-") : fixed(floor, digits)) + " / " + fixed(goal, digits);
}

// The targets' table: each scope's figures against the floors and goals.
void print_targets(std::ostream& out, const LayoutsBenchReport& r) {
  if (r.scopes.empty()) return;
  constexpr size_t kFirst = 40, kColumn = 30;
  // Columns padded to a width, the line's trailing blanks dropped.
  auto line = [&](std::string text) {
    text.erase(text.find_last_not_of(' ') + 1);
    out << text << "\n";
  };
  std::string head = "\n  " + rpad("targets (floor / goal)", kFirst);
  for (const LayoutScope& sc : r.scopes) {
    const std::string name = sc.name == "ranks fit the cores" && r.cores > 0
                                 ? str("ranks fit the ", r.cores, " cores")
                                 : sc.name;
    head += rpad(str(name, ": ", sc.layouts, " / ", sc.groups), kColumn);
  }
  line(head);
  const ClockTargets& f = kClockFloors;
  const ClockTargets& g = kClockGoals;
  auto row = [&](const std::string& name, auto cell) {
    std::string text = "  " + rpad(name, kFirst);
    for (const LayoutScope& sc : r.scopes) text += rpad(cell(sc), kColumn);
    line(text);
  };
  // Each target: its row's words, its figure in a scope, and whether a verdict meets it.
  struct Target {
    const char *before, *after;
    int target_digits, figure_digits;
    double ClockTargets::*target;
    double LayoutScope::*figure;
    bool LayoutScope::Verdict::*met;
  };
  const Target targets[] = {
      {"mean |error| <= ", " %", 0, 1, &ClockTargets::mean_abs_error_pct,
       &LayoutScope::mean_abs_error_pct, &LayoutScope::Verdict::mean},
      {"90th percentile <= ", " %", 0, 1, &ClockTargets::p90_abs_error_pct,
       &LayoutScope::p90_abs_error_pct, &LayoutScope::Verdict::p90},
      {"worst |error| <= ", " %", 0, 1, &ClockTargets::worst_abs_error_pct,
       &LayoutScope::worst_abs_error_pct, &LayoutScope::Verdict::worst},
      {"each Spearman >= ", " (lowest)", 1, 2, &ClockTargets::rank_correlation,
       &LayoutScope::lowest_rank_correlation, &LayoutScope::Verdict::rank},
      {"top pick slower <= ", " % (most)", 0, 1, &ClockTargets::top_pick_slower_pct,
       &LayoutScope::slowest_top_pick_pct, &LayoutScope::Verdict::pick},
  };
  for (const Target& t : targets) {
    const std::string unit = t.figure_digits == 1 ? " %" : "";
    row(t.before + target_text(f.*t.target, g.*t.target, t.target_digits) + t.after,
        [&](const LayoutScope& sc) {
          return judged(fixed(sc.*t.figure, t.figure_digits) + unit, sc.against(g).*t.met,
                        sc.against(f).*t.met, f.*t.target >= 0);
        });
  }
  if (r.repeats >= 2) {
    row("repeats' own Spearman < " + target_text(f.rank_correlation, g.rank_correlation, 1),
        [&](const LayoutScope& sc) {
          return str(sc.repeats_below_floor, " / ", sc.repeats_below_goal, " groups");
        });
  }
  out << "  columns: layouts / groups; a figure is marked with the best target it meets (MISSED: "
         "not even the floor). The last row counts the ranked groups whose measured repeats rank "
         "each other below each target's Spearman: there the machine does not reproduce its own "
         "ranking that well.\n";
}

nlohmann::json verdict_json(const LayoutScope::Verdict& v) {
  return {{"mean_abs_error", v.mean},   {"p90_abs_error", v.p90},    {"worst_abs_error", v.worst},
          {"rank_correlation", v.rank}, {"top_pick_slower", v.pick}, {"all", v.all()}};
}

nlohmann::json targets_json(const ClockTargets& t) {
  auto opt = [](double x) { return x < 0 ? nlohmann::json(nullptr) : nlohmann::json(x); };
  return {{"mean_abs_error_pct", opt(t.mean_abs_error_pct)},
          {"p90_abs_error_pct", opt(t.p90_abs_error_pct)},
          {"worst_abs_error_pct", opt(t.worst_abs_error_pct)},
          {"rank_correlation", opt(t.rank_correlation)},
          {"top_pick_slower_pct", opt(t.top_pick_slower_pct)}};
}

}  // namespace

void print_layouts_bench(std::ostream& out, const LayoutsBenchReport& r) {
  out << "dtrain bench layouts: the clock's predicted step beside the measured one, "
      << r.results.size() << " layouts, median of " << r.repeats << " interleaved repeat"
      << (r.repeats == 1 ? "" : "s") << " of " << r.steps << " step" << (r.steps == 1 ? "" : "s")
      << (r.warmup == 1  ? " (the first skipped)"
          : r.warmup > 1 ? str(" (the first ", r.warmup, " skipped)")
                         : "")
      << "\n";
  out << "  CPU: " << r.cpu << "; rates: " << r.cluster << "\n";
  for (const LayoutModel& m : r.models) {
    out << "  model " << m.name << ": " << m.layers << " layers, " << m.channels << " channels, "
        << m.heads << " heads, vocab " << m.vocab << ", batch " << m.batch << " x seq " << m.seq
        << "\n";
  }
  out << "\n   #  model  ranks  layout                                    predicted ms  measured ms"
         "  error %  spread %  faults/step"
      << (r.probed ? "  core speed  at that speed %" : "") << "  predicted by\n";
  for (size_t i = 0; i < r.results.size(); ++i) {
    const LayoutResult& res = r.results[i];
    const std::string label = rpad(describe(res.spec), 40);
    out << lpad(std::to_string(i + 1), 4) << "  " << r.models[res.spec.model].name
        << std::string(7 - std::min<size_t>(6, r.models[res.spec.model].name.size()), ' ')
        << lpad(std::to_string(res.spec.ranks()), 5) << "  " << label
        << lpad(fixed(res.predicted, 2), 14) << lpad(fixed(res.measured, 2), 13)
        << lpad(fixed(res.error_pct, 1), 9) << lpad(fixed(res.spread_pct, 1), 10)
        << lpad(res.page_faults.empty() ? "-" : fixed(res.page_faults_per_step, 0), 13)
        << (r.probed ? lpad(fixed(res.core_speed, 2), 12) +
                           lpad(fixed(res.speed_adjusted_error_pct, 1), 17)
                     : "")
        << "  " << res.predicted_source << "\n";
  }
  out << "\n  |error|: mean " << fixed(r.mean_abs_error_pct, 1) << " %, 90th percentile "
      << fixed(r.p90_abs_error_pct, 1) << " %, worst " << fixed(r.worst_abs_error_pct, 1) << " %";
  if (r.worst >= 0) {
    out << " (#" << r.worst + 1 << " " << r.models[r.results[r.worst].spec.model].name << " "
        << describe(r.results[r.worst].spec) << ")";
  }
  out << "\n  repeat spread (max - min over median): median " << fixed(r.median_spread_pct, 1)
      << " %, largest " << fixed(r.max_spread_pct, 1) << " %\n";
  if (r.other_load_max_layout >= 0) {
    const LayoutResult& busiest = r.results[static_cast<size_t>(r.other_load_max_layout)];
    out << "  other programs during the measured steps (threads layouts, each repeat): median "
        << fixed(r.other_load_median, 2) << ", most " << fixed(r.other_load_max, 2) << " of the "
        << r.cores << " cores (#" << r.other_load_max_layout + 1 << " "
        << r.models[busiest.spec.model].name << " " << describe(busiest.spec) << ")\n";
  }
  if (r.probed) {
    out << "  core speed (the slowest core's, against the calibrated rates, probed before and "
           "after each run): least "
        << fixed(r.speed_min, 2) << ", median " << fixed(r.speed_median, 2) << ", most "
        << fixed(r.speed_max, 2) << "; the largest gap between cores in one probe "
        << fixed(r.core_gap_max_pct, 1) << " %\n"
        << "  |error| at that speed (each repeat's prediction over its core speed; a "
           "diagnostic, not the clock's figure): mean "
        << fixed(r.adjusted_mean_abs_error_pct, 1) << " %, 90th percentile "
        << fixed(r.adjusted_p90_abs_error_pct, 1) << " %, worst "
        << fixed(r.adjusted_worst_abs_error_pct, 1) << " %\n";
  }
  out << "\n  group (model, ranks, kind)  layouts  Spearman  repeats  top pick (least predicted)"
         "              measured best                          top pick slower\n";
  for (const LayoutGroup& g : r.groups) {
    const std::string pick =
        rpad(str("#", g.top_pick + 1, " ", describe(r.results[g.top_pick].spec)), 39);
    const std::string best =
        rpad(str("#", g.measured_best + 1, " ", describe(r.results[g.measured_best].spec)), 39);
    const std::string name = rpad(g.model + ", " + std::to_string(g.ranks) + ", " + g.kind, 26);
    out << "  " << name << lpad(std::to_string(g.members.size()), 9)
        << lpad(fixed(g.rank_correlation, 2), 10) << lpad(fixed(g.repeat_rank_correlation, 2), 9)
        << "  " << pick << best << lpad(fixed(g.top_pick_slower_pct, 1) + " %", 10) << "\n";
  }
  print_targets(out, r);
  if (r.moe_layouts > 0) {
    out << "\n  MoE layouts priced again on the routing each run measured (after the run):\n"
           "   #  layout                                    predicted ms  given routing ms"
           "  measured ms  error %  given routing error %\n";
    for (size_t i = 0; i < r.results.size(); ++i) {
      const LayoutResult& res = r.results[i];
      if (!res.has_given_routing()) continue;
      const std::string label = rpad(describe(res.spec), 40);
      out << lpad(std::to_string(i + 1), 4) << "  " << label << lpad(fixed(res.predicted, 2), 14)
          << lpad(fixed(res.given_routing, 2), 18) << lpad(fixed(res.measured, 2), 13)
          << lpad(fixed(res.error_pct, 1), 9) << lpad(fixed(res.given_routing_error_pct, 1), 23)
          << "\n";
    }
    out << "  |error| over them: before the run mean " << fixed(r.moe_mean_abs_error_pct, 1)
        << " %, worst " << fixed(r.moe_worst_abs_error_pct, 1) << " %; given the routing mean "
        << fixed(r.moe_given_routing_mean_abs_error_pct, 1) << " %, worst "
        << fixed(r.moe_given_routing_worst_abs_error_pct, 1) << " %\n";
    for (const LayoutGroup& g : r.groups) {
      if (!g.given_routing) continue;
      out << "  group " << g.model << ", " << g.ranks << ", " << g.kind
          << " given the routing: Spearman " << fixed(g.given_routing_rank_correlation, 2)
          << ", top pick #" << g.given_routing_top_pick + 1 << " "
          << describe(r.results[g.given_routing_top_pick].spec) << ", "
          << fixed(g.given_routing_top_pick_slower_pct, 1) << " % slower than the best\n";
    }
  }
  out << "\n  error: 100 (predicted - measured) / measured; predicted: the clock's step for the "
         "layout from the rates in the cluster file, before the run; measured: the run's median "
         "step.\n  Spearman: rank correlation of predicted and measured within the group; top "
         "pick slower: how much slower the least-predicted layout measures than the fastest "
         "measured.\n  repeats: Spearman of one repeat's measured steps against another's, "
         "mean over pairs of repeats: how well the machine reproduces its own ranking.\n";
  if (r.moe_layouts > 0) {
    out << "  given routing: the clock priced after the run on the experts' rows that run "
           "routed in each block (uniform routing before it); the figures above it are the "
           "prediction's.\n";
  }
}

nlohmann::json layouts_bench_to_json(const LayoutsBenchReport& r) {
  nlohmann::json j;
  j["bench"] = "layouts";
  j["cluster"] = r.cluster;
  j["cpu"] = r.cpu;
  j["cores"] = r.cores;
  j["repeats"] = r.repeats;
  j["steps"] = r.steps;
  j["warmup"] = r.warmup;
  nlohmann::json models = nlohmann::json::array();
  for (const LayoutModel& m : r.models) {
    models.push_back({{"name", m.name},
                      {"layers", m.layers},
                      {"channels", m.channels},
                      {"heads", m.heads},
                      {"vocab", m.vocab},
                      {"seq", m.seq},
                      {"batch", m.batch}});
  }
  j["models"] = models;
  nlohmann::json layouts = nlohmann::json::array();
  for (const LayoutResult& res : r.results) {
    const LayoutSpec& s = res.spec;
    layouts.push_back({{"model", r.models[s.model].name},
                       {"ranks", s.ranks()},
                       {"layout", describe(s)},
                       {"backend", s.mpi ? "mpi" : "threads"},
                       {"dp", s.dp},
                       {"tp", s.tp},
                       {"pp", s.pp},
                       {"zero", s.zero},
                       {"sequence_parallel", s.sequence_parallel},
                       {"recompute", s.recompute},
                       {"microbatches", s.microbatches},
                       {"schedule", s.schedule},
                       {"precision", s.precision},
                       {"group", s.group()},
                       {"cp", s.cp},
                       {"cp_algo", s.cp > 1 ? s.cp_algo : ""},
                       {"experts", s.experts},
                       {"top_k", s.experts > 0 ? s.top_k : 0},
                       {"ep", s.ep},
                       {"predicted_ms", res.predicted},
                       {"measured_ms", res.measured},
                       {"error_pct", res.error_pct},
                       {"spread_pct", res.spread_pct},
                       {"predicted_by", res.predicted_source},
                       {"repeats_predicted_ms", res.predicted_ms},
                       {"repeats_measured_ms", res.measured_ms}});
    if (!res.other_load_cores.empty()) {
      layouts.back()["other_load_cores"] = res.other_load;
      layouts.back()["repeats_other_load_cores"] = res.other_load_cores;
    }
    if (!res.page_faults.empty()) {
      layouts.back()["page_faults_per_step"] = res.page_faults_per_step;
      layouts.back()["repeats_page_faults"] = res.page_faults;
    }
    if (res.probed()) {
      layouts.back()["core_speed"] = res.core_speed;
      layouts.back()["repeats_core_speed"] = res.core_speeds;
      layouts.back()["speed_adjusted_error_pct"] = res.speed_adjusted_error_pct;
    }
    if (res.has_given_routing()) {
      layouts.back()["given_routing_ms"] = res.given_routing;
      layouts.back()["given_routing_error_pct"] = res.given_routing_error_pct;
      layouts.back()["repeats_given_routing_ms"] = res.given_routing_ms;
    }
  }
  j["layouts"] = layouts;
  j["summary"] = {
      {"mean_abs_error_pct", r.mean_abs_error_pct},   {"p90_abs_error_pct", r.p90_abs_error_pct},
      {"worst_abs_error_pct", r.worst_abs_error_pct}, {"worst_layout", r.worst},
      {"median_spread_pct", r.median_spread_pct},     {"max_spread_pct", r.max_spread_pct}};
  if (r.other_load_max_layout >= 0) {
    j["summary"]["other_load_cores"] = {{"median", r.other_load_median},
                                        {"max", r.other_load_max},
                                        {"max_layout", r.other_load_max_layout}};
  }
  if (r.moe_layouts > 0) {
    j["summary"]["moe"] = {
        {"layouts", r.moe_layouts},
        {"mean_abs_error_pct", r.moe_mean_abs_error_pct},
        {"worst_abs_error_pct", r.moe_worst_abs_error_pct},
        {"given_routing_mean_abs_error_pct", r.moe_given_routing_mean_abs_error_pct},
        {"given_routing_worst_abs_error_pct", r.moe_given_routing_worst_abs_error_pct}};
  }
  if (r.probed) {
    j["summary"]["core_speed"] = {{"min", r.speed_min},
                                  {"median", r.speed_median},
                                  {"max", r.speed_max},
                                  {"largest_core_gap_pct", r.core_gap_max_pct},
                                  {"adjusted_mean_abs_error_pct", r.adjusted_mean_abs_error_pct},
                                  {"adjusted_p90_abs_error_pct", r.adjusted_p90_abs_error_pct},
                                  {"adjusted_worst_abs_error_pct", r.adjusted_worst_abs_error_pct}};
  }
  j["targets"] = {{"floors", targets_json(kClockFloors)}, {"goals", targets_json(kClockGoals)}};
  nlohmann::json scopes = nlohmann::json::array();
  for (const LayoutScope& sc : r.scopes) {
    scopes.push_back({{"scope", sc.name},
                      {"layouts", sc.layouts},
                      {"groups", sc.groups},
                      {"mean_abs_error_pct", sc.mean_abs_error_pct},
                      {"p90_abs_error_pct", sc.p90_abs_error_pct},
                      {"worst_abs_error_pct", sc.worst_abs_error_pct},
                      {"lowest_rank_correlation", sc.lowest_rank_correlation},
                      {"slowest_top_pick_pct", sc.slowest_top_pick_pct},
                      {"repeats_below_floor", sc.repeats_below_floor},
                      {"repeats_below_goal", sc.repeats_below_goal},
                      {"meets_floors", verdict_json(sc.against(kClockFloors))},
                      {"meets_goals", verdict_json(sc.against(kClockGoals))}});
  }
  j["summary"]["scopes"] = scopes;
  nlohmann::json groups = nlohmann::json::array();
  for (const LayoutGroup& g : r.groups) {
    groups.push_back({{"model", g.model},
                      {"ranks", g.ranks},
                      {"kind", g.kind},
                      {"fits_cores", g.fits_cores},
                      {"layouts", g.members},
                      {"rank_correlation", g.rank_correlation},
                      {"top_pick", g.top_pick},
                      {"measured_best", g.measured_best},
                      {"top_pick_slower_pct", g.top_pick_slower_pct},
                      {"repeat_rank_correlation", g.repeat_rank_correlation}});
    if (g.given_routing) {
      groups.back()["given_routing"] = {
          {"rank_correlation", g.given_routing_rank_correlation},
          {"top_pick", g.given_routing_top_pick},
          {"top_pick_slower_pct", g.given_routing_top_pick_slower_pct}};
    }
  }
  j["groups"] = groups;
  return j;
}

}  // namespace dtrain::bench
