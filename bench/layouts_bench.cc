// run_layouts_bench: every layout of the grid as a `dtrain train` subprocess (mpirun for the MPI
// ones), round-robin over the layouts for each repeat; then the errors, the repeat spreads and
// the per-group rankings from those figures alone (summarize_layouts). The report's verdicts,
// table and JSON are layouts_bench_report.cc's.
#include "bench/layouts_bench.h"
#include "bench/bench_util.h"

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
namespace {

// The train flags of `spec` on `model`, without the backend and output flags.
std::vector<std::string> layout_args(const LayoutModel& model, const LayoutSpec& spec) {
  std::vector<std::string> a = {"--model",        "bench",
                                "--layers",       std::to_string(model.layers),
                                "--hidden",       std::to_string(model.channels),
                                "--heads",        std::to_string(model.heads),
                                "--global-batch", std::to_string(model.batch),
                                "--seq-length",   std::to_string(model.seq),
                                "--dp",           std::to_string(spec.dp),
                                "--tp",           std::to_string(spec.tp),
                                "--pp",           std::to_string(spec.pp),
                                "--zero",         std::to_string(spec.zero),
                                "--recompute",    spec.recompute,
                                "--microbatches", std::to_string(spec.microbatches),
                                "--schedule",     spec.schedule,
                                "--precision",    spec.precision};
  if (spec.sequence_parallel) a.emplace_back("--sequence-parallel");
  if (spec.cp > 1) a.insert(a.end(), {"--cp", std::to_string(spec.cp), "--cp-algo", spec.cp_algo});
  if (spec.experts > 0) {
    a.insert(a.end(), {"--experts", std::to_string(spec.experts), "--top-k",
                       std::to_string(spec.top_k), "--ep", std::to_string(spec.ep)});
  }
  return a;
}

std::string join_quoted(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) {
    s += ' ';
    s += shell_quote(w);
  }
  return s;
}

// A run's measured steps, from its --metrics file: the median step time and page faults of
// the steps after the first `warmup` (first touches of every buffer, thread start-up); all of
// them when the run had no more steps than that. Faults are -1 where the lines carry none.
struct MeasuredSteps {
  double step_ms = 0, page_faults = -1;
};
MeasuredSteps measured_steps(const std::string& metrics_path, int warmup) {
  std::ifstream in(metrics_path);
  DTRAIN_CHECK(in.good(), "bench layouts: the run wrote no metrics file ", metrics_path);
  std::vector<double> steps, faults;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("type", "") != "step") continue;
    steps.push_back(j.at("step_ms"));
    if (j.contains("page_faults")) faults.push_back(j.at("page_faults"));
  }
  DTRAIN_CHECK(!steps.empty(), "bench layouts: no step in ", metrics_path);
  const size_t skip = steps.size() > static_cast<size_t>(warmup) ? static_cast<size_t>(warmup) : 0;
  steps.erase(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(skip));
  MeasuredSteps m{median(steps), -1};
  if (faults.size() == steps.size() + skip) {
    faults.erase(faults.begin(), faults.begin() + static_cast<std::ptrdiff_t>(skip));
    m.page_faults = median(faults);
  }
  return m;
}

// The clock's step for the run, ms: train's "clock.predicted.step_s", priced from the cluster
// file's rates before the first step. Empty when the report has no clock.
std::optional<double> clock_predicted_ms(const nlohmann::json& report) {
  if (!report.contains("clock") || !report["clock"].is_object()) return std::nullopt;
  const nlohmann::json& clock = report["clock"];
  if (!clock.contains("predicted") || !clock["predicted"].is_object()) return std::nullopt;
  return clock["predicted"].at("step_s").get<double>() * 1e3;
}

// One repeat of one layout, ms: predicted, measured, and for MoE the clock on the run's routing.
struct RunFigures {
  double predicted = 0, measured = 0;
  std::optional<double> given_routing;
  double page_faults = -1;       // per measured step (median); -1: not counted
  double other_load_cores = -1;  // other programs' load during the steps; -1: not measured
};
RunFigures run_layout_once(const LayoutsBenchOptions& o, const std::string& mpirun,
                           const LayoutModel& m, const LayoutSpec& s, const std::string& metrics,
                           const std::string& errors, std::string& source) {
  std::vector<std::string> a = {"train"};
  const std::vector<std::string> layout = layout_args(m, s);
  a.insert(a.end(), layout.begin(), layout.end());
  a.insert(a.end(), {"--steps", std::to_string(o.steps), "--eval-every", "0", "--eval-batches", "1",
                     "--cluster", o.cluster, "--metrics", metrics, "--json", "--backend",
                     s.mpi ? "mpi" : "threads"});
  std::string command = shell_quote(o.dtrain) + join_quoted(a);
  if (s.mpi) {
    // As root OpenMPI refuses to start without --allow-run-as-root; 4 ranks on fewer cores
    // need --oversubscribe (sharing the cores is part of what the clock models).
    // Idle ranks yield their core (as scripts/cluster runs them): busy-polling ranks on shared
    // cores would starve the rank that is computing.
    command = shell_quote(mpirun) + " -np " + std::to_string(s.ranks()) +
              " --oversubscribe --mca mpi_yield_when_idle 1" +
              (::geteuid() == 0 ? " --allow-run-as-root " : " ") + command;
  }
  const CommandResult ran = run_command(command + " 2>" + shell_quote(errors), false);
  if (!ran.started || ran.exit_code != 0) {
    std::ifstream err(errors);
    std::stringstream text;
    text << err.rdbuf();
    DTRAIN_CHECK(false, "bench layouts: ", describe(s), " failed (exit ", ran.exit_code,
                 "): ", command, "\n", text.str());
  }
  const nlohmann::json report = nlohmann::json::parse(ran.output, nullptr, false);
  DTRAIN_CHECK(report.is_object(), "bench layouts: ", describe(s),
               " printed no JSON report: ", command);
  const MeasuredSteps measured = measured_steps(metrics, o.warmup);
  const std::optional<double> clock = clock_predicted_ms(report);
  DTRAIN_CHECK(clock.has_value(), "bench layouts: ", describe(s),
               ": the train report has no clock prediction (does --cluster ", o.cluster,
               " carry gpu.measured? dtrain calibrate --compute writes it)");
  source = "clock";
  RunFigures f{*clock, measured.step_ms, std::nullopt, measured.page_faults};
  if (report["clock"].contains("given_routing")) {
    f.given_routing = report["clock"]["given_routing"].at("step_s").get<double>() * 1e3;
  }
  if (report["clock"].contains("other_load_cores") &&
      report["clock"]["other_load_cores"].is_number()) {
    f.other_load_cores = report["clock"]["other_load_cores"].get<double>();
  }
  return f;
}

LayoutSpec layout(int model, bool mpi, int dp, int tp, int pp, int zero = 0) {
  LayoutSpec s;
  s.model = model;
  s.mpi = mpi;
  s.dp = dp;
  s.tp = tp;
  s.pp = pp;
  s.zero = zero;
  return s;
}

LayoutSpec cp_layout(int dp, int tp, int cp, const std::string& algo) {
  LayoutSpec s = layout(0, false, dp, tp, 1);
  s.cp = cp;
  s.cp_algo = algo;
  return s;
}

// 4 experts, top 2, every block routed.
LayoutSpec moe_layout(int dp, int pp, int ep, int microbatches) {
  LayoutSpec s = layout(0, false, dp, 1, pp);
  s.experts = 4;
  s.top_k = 2;
  s.ep = ep;
  s.microbatches = microbatches;
  return s;
}

LayoutSpec with(LayoutSpec s, const std::string& recompute, int microbatches,
                const std::string& schedule, const std::string& precision, bool sp = false) {
  s.recompute = recompute;
  s.microbatches = microbatches;
  s.schedule = schedule;
  s.precision = precision;
  s.sequence_parallel = sp;
  return s;
}

}  // namespace

std::string describe(const LayoutSpec& s) {
  std::string d;
  auto word = [&](const std::string& w) { d += (d.empty() ? "" : " ") + w; };
  if (s.dp > 1) word("dp" + std::to_string(s.dp));
  if (s.tp > 1) word("tp" + std::to_string(s.tp));
  if (s.pp > 1) word("pp" + std::to_string(s.pp));
  if (s.cp > 1) word("cp" + std::to_string(s.cp) + " " + s.cp_algo);
  if (s.experts > 0) word("E" + std::to_string(s.experts) + "k" + std::to_string(s.top_k));
  if (s.ep > 1) word("ep" + std::to_string(s.ep));
  if (s.zero > 0) word("z" + std::to_string(s.zero));
  if (s.sequence_parallel) word("sp");
  if (s.recompute != "none") word(s.recompute == "selective" ? "sel" : s.recompute);
  if (s.pp > 1 || s.microbatches > 1) word("m" + std::to_string(s.microbatches));
  if (s.pp > 1) word(s.schedule);
  word(s.precision);
  word(s.mpi ? "mpi" : "threads");
  return d;
}

std::vector<LayoutModel> layout_models() {
  const model::GptPreset& bench = model::gpt_preset("bench");
  LayoutModel small{"bench",
                    bench.config.layers,
                    bench.config.channels,
                    bench.config.heads,
                    bench.config.vocab,
                    bench.config.context,
                    bench.batch};
  // Twice the blocks and heads, 1.25x the width: about 3x the bench step (tens of ms per step on
  // two cores).
  LayoutModel large = small;
  large.name = "large";
  large.layers = 2 * small.layers;
  large.channels = 5 * small.channels / 4;
  large.heads = 2 * small.heads;
  return {small, large};
}

namespace {

// The grid's layouts of the groups `only` names (every group when empty).
std::vector<LayoutSpec> keep_groups(const std::vector<LayoutSpec>& grid,
                                    const std::vector<std::string>& only) {
  for (const std::string& g : only) {
    DTRAIN_CHECK(g == "dense" || g == "cp" || g == "moe", "--only ", g, ": no such group (",
                 kLayoutGroups, ")");
  }
  if (only.empty()) return grid;
  std::vector<LayoutSpec> kept;
  for (const LayoutSpec& s : grid) {
    if (std::find(only.begin(), only.end(), s.group()) != only.end()) kept.push_back(s);
  }
  return kept;
}

}  // namespace

std::vector<LayoutSpec> layout_grid(bool quick, bool mpi, const std::vector<std::string>& only) {
  if (quick) {
    return keep_groups({layout(0, false, 2, 1, 1), layout(0, false, 1, 2, 1),
                        with(layout(0, false, 1, 1, 2), "none", 2, "1f1b", "fp32"),
                        cp_layout(1, 1, 2, "ring"), moe_layout(2, 1, 2, 1)},
                       only.empty() ? std::vector<std::string>{"dense"} : only);
  }
  std::vector<LayoutSpec> grid;
  for (int m = 0; m < 2; ++m) {
    // 2 ranks: one axis at a time, each with its variants.
    grid.push_back(layout(m, false, 2, 1, 1));
    grid.push_back(with(layout(m, false, 2, 1, 1, 1), "none", 1, "1f1b", "bf16"));
    grid.push_back(with(layout(m, false, 2, 1, 1, 2), "selective", 2, "1f1b", "fp32"));
    grid.push_back(layout(m, false, 2, 1, 1, 3));
    grid.push_back(layout(m, false, 1, 2, 1));
    grid.push_back(with(layout(m, false, 1, 2, 1), "full", 1, "1f1b", "fp32", true));
    grid.push_back(with(layout(m, false, 1, 1, 2), "none", 4, "gpipe", "fp32"));
    grid.push_back(with(layout(m, false, 1, 1, 2), "none", 4, "1f1b", "bf16"));
    grid.push_back(with(layout(m, false, 1, 1, 2), "none", 4, "interleaved", "fp32"));
    grid.push_back(with(layout(m, false, 1, 1, 2), "none", 4, "zb-h1", "fp32"));
    if (mpi) {
      grid.push_back(layout(m, true, 2, 1, 1));
      grid.push_back(with(layout(m, true, 1, 2, 1), "none", 1, "1f1b", "fp32", true));
      grid.push_back(with(layout(m, true, 1, 1, 2), "none", 2, "1f1b", "fp32"));
    }
    // 4 ranks on the machine's cores: oversubscribed, which the clock has to price.
    grid.push_back(layout(m, false, 4, 1, 1));
    grid.push_back(layout(m, false, 2, 2, 1));
    grid.push_back(with(layout(m, false, 2, 1, 2), "none", 2, "1f1b", "fp32"));
    grid.push_back(with(layout(m, false, 1, 2, 2), "selective", 4, "interleaved", "fp32"));
    grid.push_back(with(layout(m, false, 2, 2, 1, 1), "none", 1, "1f1b", "bf16", true));
    grid.push_back(layout(m, false, 4, 1, 1, 3));
    grid.push_back(layout(m, false, 1, 4, 1));
    grid.push_back(with(layout(m, false, 1, 1, 4), "full", 4, "1f1b", "fp32"));
    if (mpi) {
      grid.push_back(layout(m, true, 2, 2, 1));
      grid.push_back(layout(m, true, 4, 1, 1, 2));
      grid.push_back(with(layout(m, true, 1, 2, 2), "none", 2, "zb-h1", "fp32"));
    }
  }
  // Context parallelism on the bench model (64 tokens): cp 2 by each algorithm, alone and with
  // dp or tp; cp 4 by the ring.
  for (const char* algo : {"ring", "all-gather", "ulysses"})
    grid.push_back(cp_layout(1, 1, 2, algo));
  grid.push_back(cp_layout(2, 1, 2, "ring"));
  grid.push_back(cp_layout(1, 2, 2, "all-gather"));
  grid.push_back(cp_layout(1, 1, 4, "ring"));
  // A mixture of experts (4 experts, top 2) on the bench model: dp 2 with the experts replicated
  // and with ep 2; ep 2 with pp 2, and dp 4 with ep 2.
  grid.push_back(moe_layout(2, 1, 1, 1));
  grid.push_back(moe_layout(2, 1, 2, 1));
  grid.push_back(with(moe_layout(2, 2, 2, 2), "none", 2, "1f1b", "fp32"));
  grid.push_back(moe_layout(4, 1, 2, 1));
  return keep_groups(grid, only);
}

LayoutsBenchReport run_layouts_bench(const LayoutsBenchOptions& options) {
  LayoutsBenchOptions o = options;
  DTRAIN_CHECK(o.repeats >= 1, "--repeats must be at least 1 (got ", o.repeats, ")");
  DTRAIN_CHECK(o.steps >= 1, "--steps must be at least 1 (got ", o.steps, ")");
  DTRAIN_CHECK(o.warmup >= 0, "--warmup must be at least 0 (got ", o.warmup, ")");
  // One step is measured whole (nothing to skip); otherwise at least one must be left.
  DTRAIN_CHECK(o.steps == 1 || o.warmup < o.steps, "--warmup ", o.warmup,
               " leaves no step of --steps ", o.steps, " to measure (it must be less)");
  if (o.quick) {
    o.steps = 1;
    o.warmup = 0;
  }
  if (o.dtrain.empty()) o.dtrain = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::vector<LayoutSpec> grid = layout_grid(o.quick, o.mpi, o.only);
  std::string mpirun;
  const bool any_mpi =
      std::any_of(grid.begin(), grid.end(), [](const LayoutSpec& s) { return s.mpi; });
  if (any_mpi) {
    mpirun = find_program("mpirun");
    DTRAIN_CHECK(!mpirun.empty(),
                 "bench layouts: mpirun is not on PATH (install OpenMPI, or pass --no-mpi)");
  }

  LayoutsBenchReport r;
  r.cluster = o.cluster;
  r.cpu = model::bf16_support().cpu_model;
  r.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  r.repeats = o.repeats;
  r.steps = o.steps;
  r.warmup = o.steps > o.warmup ? o.warmup : 0;
  r.models = layout_models();
  for (const LayoutSpec& s : grid) r.results.push_back(LayoutResult{s, {}, {}, "", 0, 0, 0, 0});

  // The probes: the slowest core's speed at each precision, and the gap between the cores.
  plan::Cluster cluster;
  std::optional<calibrate::CoreSpeedProbe> probe;
  if (o.probe) {
    cluster = plan::read_cluster_file(o.cluster);
    DTRAIN_CHECK(plan::has_measured_rates(cluster), "bench layouts: ", o.cluster,
                 " has no measured rates (gpu.measured) to probe the cores against (run dtrain "
                 "calibrate --compute, or pass --no-probe)");
    probe.emplace(cluster.gpu.measured);
  }
  struct Slowest {
    double fp32 = 0, bf16 = 0;
  };
  auto probe_now = [&] {
    const std::vector<calibrate::CoreSpeed> cores = probe->measure();
    Slowest s{cores.front().fp32, cores.front().bf16};
    double fast32 = s.fp32, fast16 = s.bf16;
    for (const calibrate::CoreSpeed& c : cores) {
      s.fp32 = std::min(s.fp32, c.fp32);
      s.bf16 = std::min(s.bf16, c.bf16);
      fast32 = std::max(fast32, c.fp32);
      fast16 = std::max(fast16, c.bf16);
    }
    r.core_gap_max_pct = std::max(r.core_gap_max_pct, 100 * (fast32 / s.fp32 - 1));
    if (s.bf16 > 0) r.core_gap_max_pct = std::max(r.core_gap_max_pct, 100 * (fast16 / s.bf16 - 1));
    return s;
  };
  Slowest before;
  if (probe) before = probe_now();

  // One run at a time: each reuses the same two files.
  ScratchDir scratch("dtrain-bench-layouts", {"metrics.jsonl", "stderr.txt"});
  const size_t runs = grid.size() * static_cast<size_t>(o.repeats);
  size_t done = 0;
  // Round-robin: repeat k of every layout before repeat k+1 of any, so that a burst of load from
  // elsewhere lands on one repeat of many layouts rather than on every repeat of one.
  for (int k = 0; k < o.repeats; ++k) {
    for (size_t i = 0; i < grid.size(); ++i) {
      LayoutResult& res = r.results[i];
      const std::string metrics = scratch.file("metrics.jsonl");
      // An empty file, not none: every MPI rank checks that --metrics can be written, and
      // where it does not exist each probes by creating it, which races between the ranks.
      std::ofstream(metrics, std::ios::trunc).close();
      const RunFigures f =
          run_layout_once(o, mpirun, r.models[static_cast<size_t>(res.spec.model)], res.spec,
                          metrics, scratch.file("stderr.txt"), res.predicted_source);
      res.predicted_ms.push_back(f.predicted);
      res.measured_ms.push_back(f.measured);
      if (f.given_routing) res.given_routing_ms.push_back(*f.given_routing);
      if (f.page_faults >= 0) res.page_faults.push_back(f.page_faults);
      if (f.other_load_cores >= 0) res.other_load_cores.push_back(f.other_load_cores);
      if (probe) {
        const Slowest after = probe_now();
        const bool bf16 = res.spec.precision == "bf16" && before.bf16 > 0 && after.bf16 > 0;
        res.core_speeds.push_back(bf16 ? (before.bf16 + after.bf16) / 2
                                       : (before.fp32 + after.fp32) / 2);
        before = after;
      }
      ++done;
      std::cerr << "[" << done << "/" << runs << "] " << r.models[res.spec.model].name << " "
                << describe(res.spec) << ": predicted " << fixed(f.predicted, 2) << " ms, measured "
                << fixed(f.measured, 2) << " ms"
                << (f.given_routing ? str(", given routing ", fixed(*f.given_routing, 2), " ms")
                                    : "")
                << (probe ? str(", slowest core at ", fixed(res.core_speeds.back(), 2),
                                " of its calibrated speed")
                          : "")
                << "\n";
    }
  }
  summarize_layouts(r);
  return r;
}

void summarize_layouts(LayoutsBenchReport& r) {
  std::vector<double> errors;
  std::vector<double> spreads;
  for (LayoutResult& res : r.results) {
    DTRAIN_CHECK(!res.measured_ms.empty() && res.measured_ms.size() == res.predicted_ms.size(),
                 "bench layouts: ", describe(res.spec), " has no repeats");
    res.predicted = median(res.predicted_ms);
    res.measured = median(res.measured_ms);
    DTRAIN_CHECK(res.measured > 0, "bench layouts: ", describe(res.spec),
                 " measured a step of 0 ms");
    res.error_pct = 100 * (res.predicted - res.measured) / res.measured;
    const auto [lo, hi] = std::minmax_element(res.measured_ms.begin(), res.measured_ms.end());
    res.spread_pct = 100 * (*hi - *lo) / res.measured;
    errors.push_back(res.error_pct);
    spreads.push_back(res.spread_pct);
    res.page_faults_per_step = res.page_faults.empty() ? 0 : median(res.page_faults);
    res.other_load = res.other_load_cores.empty() ? -1 : median(res.other_load_cores);
    if (res.has_given_routing()) {
      DTRAIN_CHECK(res.given_routing_ms.size() == res.measured_ms.size(),
                   "bench layouts: ", describe(res.spec),
                   " has a routing-given price for only some repeats");
      res.given_routing = median(res.given_routing_ms);
      res.given_routing_error_pct = 100 * (res.given_routing - res.measured) / res.measured;
    }
  }
  // The probes: each layout's prediction at the speed its slowest core had during its runs.
  std::vector<double> adjusted_errors, speeds;
  r.probed = !r.results.empty() && std::all_of(r.results.begin(), r.results.end(),
                                               [](const LayoutResult& x) { return x.probed(); });
  for (LayoutResult& res : r.results) {
    if (!r.probed) break;
    DTRAIN_CHECK(res.core_speeds.size() == res.measured_ms.size(),
                 "bench layouts: ", describe(res.spec), " has ", res.core_speeds.size(),
                 " core speeds for ", res.measured_ms.size(), " repeats");
    std::vector<double> adjusted;
    for (size_t k = 0; k < res.core_speeds.size(); ++k) {
      DTRAIN_CHECK(res.core_speeds[k] > 0, "bench layouts: ", describe(res.spec),
                   " has a core speed of ", res.core_speeds[k]);
      adjusted.push_back(res.predicted_ms[k] / res.core_speeds[k]);
      speeds.push_back(res.core_speeds[k]);
    }
    res.core_speed = median(res.core_speeds);
    res.speed_adjusted_error_pct = 100 * (median(adjusted) - res.measured) / res.measured;
    adjusted_errors.push_back(res.speed_adjusted_error_pct);
  }
  if (r.probed) {
    const ErrorSummary a = summarize_errors(adjusted_errors);
    r.adjusted_mean_abs_error_pct = a.mean_abs;
    r.adjusted_p90_abs_error_pct = a.p90_abs;
    r.adjusted_worst_abs_error_pct = a.max_abs;
    r.speed_min = *std::min_element(speeds.begin(), speeds.end());
    r.speed_max = *std::max_element(speeds.begin(), speeds.end());
    r.speed_median = median(speeds);
  }
  std::vector<double> moe_errors, moe_given;
  for (const LayoutResult& res : r.results) {
    if (!res.has_given_routing()) continue;
    moe_errors.push_back(res.error_pct);
    moe_given.push_back(res.given_routing_error_pct);
  }
  r.moe_layouts = static_cast<int>(moe_errors.size());
  if (!moe_errors.empty()) {
    const ErrorSummary a = summarize_errors(moe_errors), g = summarize_errors(moe_given);
    r.moe_mean_abs_error_pct = a.mean_abs;
    r.moe_worst_abs_error_pct = a.max_abs;
    r.moe_given_routing_mean_abs_error_pct = g.mean_abs;
    r.moe_given_routing_worst_abs_error_pct = g.max_abs;
  }
  const ErrorSummary e = summarize_errors(errors);
  r.mean_abs_error_pct = e.mean_abs;
  r.p90_abs_error_pct = e.p90_abs;
  r.worst_abs_error_pct = e.max_abs;
  r.worst = -1;
  for (size_t i = 0; i < r.results.size(); ++i) {
    if (r.worst < 0 ||
        std::fabs(r.results[i].error_pct) > std::fabs(r.results[r.worst].error_pct)) {
      r.worst = static_cast<int>(i);
    }
  }
  r.median_spread_pct = median(spreads);
  r.max_spread_pct = spreads.empty() ? 0 : *std::max_element(spreads.begin(), spreads.end());
  std::vector<double> loads;
  r.other_load_max = -1;
  r.other_load_max_layout = -1;
  for (size_t i = 0; i < r.results.size(); ++i) {
    const std::vector<double>& l = r.results[i].other_load_cores;
    loads.insert(loads.end(), l.begin(), l.end());
    for (double x : l) {
      if (x > r.other_load_max) {
        r.other_load_max = x;
        r.other_load_max_layout = static_cast<int>(i);
      }
    }
  }
  r.other_load_median = loads.empty() ? -1 : median(loads);

  r.groups.clear();
  for (size_t i = 0; i < r.results.size(); ++i) {
    const LayoutSpec& s = r.results[i].spec;
    const std::string& model = r.models.at(static_cast<size_t>(s.model)).name;
    auto g = std::find_if(r.groups.begin(), r.groups.end(), [&](const LayoutGroup& x) {
      return x.model == model && x.ranks == s.ranks() && x.kind == s.group();
    });
    if (g == r.groups.end()) {
      LayoutGroup fresh;
      fresh.model = model;
      fresh.ranks = s.ranks();
      fresh.kind = s.group();
      fresh.fits_cores = r.cores <= 0 || s.ranks() <= r.cores;
      r.groups.push_back(fresh);
      g = r.groups.end() - 1;
    }
    g->members.push_back(static_cast<int>(i));
  }
  for (LayoutGroup& g : r.groups) {
    std::vector<double> predicted, measured;
    for (int i : g.members) {
      predicted.push_back(r.results[i].predicted);
      measured.push_back(r.results[i].measured);
    }
    g.rank_correlation = spearman(predicted, measured);
    const auto pick = std::min_element(predicted.begin(), predicted.end()) - predicted.begin();
    const auto best = std::min_element(measured.begin(), measured.end()) - measured.begin();
    g.top_pick = g.members[static_cast<size_t>(pick)];
    g.measured_best = g.members[static_cast<size_t>(best)];
    g.top_pick_slower_pct =
        100 * (r.results[g.top_pick].measured / r.results[g.measured_best].measured - 1);
    std::vector<double> given;
    for (int i : g.members) {
      const LayoutResult& res = r.results[static_cast<size_t>(i)];
      g.given_routing |= res.has_given_routing();
      given.push_back(res.has_given_routing() ? res.given_routing : res.predicted);
    }
    if (g.given_routing) {
      g.given_routing_rank_correlation = spearman(given, measured);
      g.given_routing_top_pick = g.members[static_cast<size_t>(
          std::min_element(given.begin(), given.end()) - given.begin())];
      g.given_routing_top_pick_slower_pct =
          100 *
          (r.results[g.given_routing_top_pick].measured / r.results[g.measured_best].measured - 1);
    }
    double pairs = 0, sum = 0;
    for (int a = 0; a < r.repeats; ++a) {
      for (int b = a + 1; b < r.repeats; ++b) {
        std::vector<double> ma, mb;
        for (int i : g.members) {
          ma.push_back(r.results[i].measured_ms.at(static_cast<size_t>(a)));
          mb.push_back(r.results[i].measured_ms.at(static_cast<size_t>(b)));
        }
        sum += spearman(ma, mb);
        ++pairs;
      }
    }
    g.repeat_rank_correlation = pairs > 0 ? sum / pairs : 0;
  }

  r.scopes.clear();
  auto scope = [&](const std::string& name, auto keep) {
    LayoutScope sc;
    sc.name = name;
    std::vector<double> errs;
    for (const LayoutGroup& g : r.groups) {
      if (!keep(g)) continue;
      ++sc.groups;
      for (int i : g.members) errs.push_back(r.results[static_cast<size_t>(i)].error_pct);
      if (g.members.size() < 2) continue;
      sc.lowest_rank_correlation = std::min(sc.lowest_rank_correlation, g.rank_correlation);
      sc.slowest_top_pick_pct = std::max(sc.slowest_top_pick_pct, g.top_pick_slower_pct);
      if (r.repeats >= 2) {
        sc.repeats_below_floor += g.repeat_rank_correlation < kClockFloors.rank_correlation;
        sc.repeats_below_goal += g.repeat_rank_correlation < kClockGoals.rank_correlation;
      }
    }
    if (errs.empty()) return;
    sc.layouts = static_cast<int>(errs.size());
    const ErrorSummary es = summarize_errors(errs);
    sc.mean_abs_error_pct = es.mean_abs;
    sc.p90_abs_error_pct = es.p90_abs;
    sc.worst_abs_error_pct = es.max_abs;
    r.scopes.push_back(sc);
  };
  scope("all", [](const LayoutGroup&) { return true; });
  const bool mixed = std::any_of(r.groups.begin(), r.groups.end(),
                                 [](const LayoutGroup& g) { return !g.fits_cores; });
  if (mixed) {
    scope("ranks fit the cores", [](const LayoutGroup& g) { return g.fits_cores; });
    scope("oversubscribed", [](const LayoutGroup& g) { return !g.fits_cores; });
  }
}

}  // namespace dtrain::bench
