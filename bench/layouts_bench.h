// `dtrain bench layouts`: the engine clock checked on layouts it never saw. Each layout (dp x tp
// x pp x ZeRO x SP x recompute x micro-batches x schedule x precision, two model sizes, the threads
// backend and MPI) runs as a `dtrain train --cluster FILE --json` subprocess; its predicted step
// comes from the clock (the run's "clock.predicted", priced from the cluster file's measured rates
// before any step), its measured step is the median of the run's steps after the warm-up ones
// (the first, unless --warmup says otherwise), beside their page faults per step. Repeats
// go round-robin over the layouts, and each layout's figure is the median over its repeats.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrain::bench {

// A model size the layouts run: the `bench` preset, or it with more layers and channels.
struct LayoutModel {
  std::string name;  // "bench", "large"
  int64_t layers = 0, channels = 0, heads = 0, vocab = 0, seq = 0, batch = 0;
};

struct LayoutSpec {
  int model = 0;     // index into LayoutsBenchReport::models
  bool mpi = false;  // mpirun -np ranks, else the threads backend
  int dp = 1, tp = 1, pp = 1, zero = 0;
  bool sequence_parallel = false;
  std::string recompute = "none";  // none, selective, full
  int microbatches = 1;
  std::string schedule = "1f1b";  // gpipe, 1f1b, interleaved, zb-h1
  std::string precision = "fp32";
  // Context parallelism (--cp, --cp-algo) and a mixture of experts (--experts, --top-k, --ep).
  int cp = 1;
  std::string cp_algo = "ring";  // ring, all-gather, ulysses
  int experts = 0, top_k = 2, ep = 1;
  int ranks() const { return dp * cp * tp * pp; }
  // The layout's group of the grid: "dense", "cp" (context parallelism) or "moe". Rankings are
  // per (model, ranks, group).
  std::string group() const { return experts > 0 ? "moe" : cp > 1 ? "cp" : "dense"; }
};
inline constexpr const char* kLayoutGroups = "dense, cp, moe";

// "dp2 tp2 z1 sp sel m4 1f1b bf16": the non-default settings of a layout, one word each
// ("cp2 ring", "E4k2 ep2" for CP and MoE).
std::string describe(const LayoutSpec& spec);

struct LayoutsBenchOptions {
  std::string cluster;  // a calibrated cluster file (measured rates)
  bool quick = false;   // 3 layouts, 1 step each: the structure, for the tests
  int repeats = 3;      // interleaved repeats per layout
  int steps = 4;        // per repeat
  int warmup = 1;       // the first steps of each repeat, not measured (fewer than steps)
  bool mpi = true;      // include the MPI layouts (needs mpirun)
  std::string dtrain;   // the dtrain binary the runs start (default: this process's)
  // Time each core's speed against the cluster file's rates before the first run and after
  // each (calibrate/compute_calibration.h's CoreSpeedProbe, about 10 ms a core); --no-probe skips
  // it.
  bool probe = true;
  // The groups to run (LayoutSpec::group): empty is every group, or dense alone with --quick.
  std::vector<std::string> only;
};

struct LayoutResult {
  LayoutSpec spec;
  std::vector<double> predicted_ms, measured_ms;  // per repeat, in the order they ran
  std::string predicted_source;                   // "clock": train's clock.predicted
  double predicted = 0, measured = 0;             // medians over the repeats, ms
  double error_pct = 0;                           // 100 (predicted - measured) / measured
  double spread_pct = 0;  // 100 (max - min) / median of the measured repeats
  // Per repeat, the median of the measured steps' page faults (the process's minor faults in the
  // step, train's --metrics "page_faults"; empty when the runs do not count them), and their
  // median: a layout that still faults pages in after its warm-up was not measured in a steady
  // state (a buffer whose size follows the routing reaching new sizes, for one), which the clock
  // does not price.
  std::vector<double> page_faults;
  double page_faults_per_step = 0;
  // Per repeat, the cores other programs kept busy during the run's measured steps (train's
  // clock.other_load_cores: threads layouts; empty under MPI, whose other ranks are processes
  // too), and their median (-1: none): the check that the machine was quiet.
  std::vector<double> other_load_cores;
  double other_load = -1;
  // MoE: train's clock.given_routing, the same clock priced after the run on the routing that
  // run measured (per repeat; empty for a dense layout), its median and its error.
  std::vector<double> given_routing_ms;
  double given_routing = 0, given_routing_error_pct = 0;
  bool has_given_routing() const { return !given_routing_ms.empty(); }
  // Per repeat, the slowest core's speed against the rates at the layout's precision (1: as
  // calibrated), the mean of the probes just before and just after the run; empty unprobed.
  // The layout's step is gated by its slowest core (its ranks wait for each other), so
  // predicted / speed is the clock's step at the speed the machine had during the run: its
  // error, beside the clock's own, tells the clock's miss from the machine's drift. It is a
  // diagnostic; the prediction and every target read the clock's own figure.
  std::vector<double> core_speeds;
  double core_speed = 0, speed_adjusted_error_pct = 0;
  bool probed() const { return !core_speeds.empty(); }
};

// One (model, ranks) group: does the clock rank its layouts as they measure?
struct LayoutGroup {
  std::string model;
  int ranks = 0;
  std::string kind;                // LayoutSpec::group
  bool fits_cores = true;          // ranks <= the machine's cores (LayoutsBenchReport::cores)
  std::vector<int> members;        // indices into results
  double rank_correlation = 0;     // Spearman's, predicted vs measured
  int top_pick = -1;               // the member with the least predicted time
  int measured_best = -1;          // the member with the least measured time
  double top_pick_slower_pct = 0;  // 100 (measured[top_pick] / measured[best] - 1)
  // The machine against itself: Spearman's of one repeat's measured steps against another's,
  // averaged over every pair of repeats (0 with fewer than 2). How well the group's ranking
  // reproduces from run to run, a ceiling the clock's rank_correlation cannot be held above
  // (the medians are steadier than single repeats, so it is a conservative one).
  double repeat_rank_correlation = 0;
  // The same ranking with each MoE layout priced on its own run's routing (given_routing); the
  // other layouts keep their prediction. Filled for groups with an MoE layout only.
  bool given_routing = false;
  double given_routing_rank_correlation = 0;
  int given_routing_top_pick = -1;
  double given_routing_top_pick_slower_pct = 0;
};

// What the project holds the clock to on this benchmark (docs/clock-validation.md, "Validation
// on this machine"): floors every run has to meet, goals it aims at. A target below 0 is not set.
struct ClockTargets {
  double mean_abs_error_pct = 0, p90_abs_error_pct = 0, worst_abs_error_pct = 0;
  double rank_correlation = 0;     // every group's Spearman at least this
  double top_pick_slower_pct = 0;  // every group's top pick at most this much slower
};
inline constexpr ClockTargets kClockFloors{10, -1, 25, 0.8, 5};
inline constexpr ClockTargets kClockGoals{5, 10, 15, 0.9, 3};

// The figures over a part of the layouts: all of them; the groups whose ranks fit the machine's
// cores; the oversubscribed ones (more thread ranks than cores, so the scheduler time-slices
// each core between ranks and a rank can wait for a peer that is off its core). Rankings are
// judged on groups of 2 layouts or more.
struct LayoutScope {
  std::string name;  // "all", "ranks fit the cores", "oversubscribed"
  int layouts = 0, groups = 0;
  double mean_abs_error_pct = 0, p90_abs_error_pct = 0, worst_abs_error_pct = 0;
  double lowest_rank_correlation = 1;  // over the ranked groups
  double slowest_top_pick_pct = 0;     // the largest top_pick_slower_pct
  // Ranked groups whose own repeats rank each other below the target's correlation: the machine
  // does not reproduce its ranking that well, so no clock can be held to it there.
  int repeats_below_floor = 0, repeats_below_goal = 0;
  // Each target met: mean, p90, worst, rank correlation, top pick.
  struct Verdict {
    bool mean = true, p90 = true, worst = true, rank = true, pick = true;
    bool all() const { return mean && p90 && worst && rank && pick; }
  };
  Verdict against(const ClockTargets& t) const;
};

struct LayoutsBenchReport {
  std::string cluster, cpu;
  int cores = 0;  // the machine's cores (0: unknown, every group taken to fit)
  int repeats = 0, steps = 0, warmup = 0;
  std::vector<LayoutModel> models;
  std::vector<LayoutResult> results;
  std::vector<LayoutGroup> groups;
  double mean_abs_error_pct = 0, p90_abs_error_pct = 0, worst_abs_error_pct = 0;
  int worst = -1;  // index of the layout with the worst |error|
  double median_spread_pct = 0, max_spread_pct = 0;
  // Other programs' load over the repeats that measured it (LayoutResult::other_load_cores):
  // the median and the most, in cores, and the layout with the most (-1: none measured).
  double other_load_median = -1, other_load_max = -1;
  int other_load_max_layout = -1;
  // Over the MoE layouts only: |error| of the a-priori prediction and of given_routing.
  int moe_layouts = 0;
  double moe_mean_abs_error_pct = 0, moe_worst_abs_error_pct = 0;
  double moe_given_routing_mean_abs_error_pct = 0, moe_given_routing_worst_abs_error_pct = 0;
  // "all", then "ranks fit the cores" and "oversubscribed" when there are layouts of each.
  std::vector<LayoutScope> scopes;
  // The core speed probes (LayoutResult::core_speeds), when the layouts were probed: the
  // slowest core's speed over every run (least, median, most), the largest gap between a
  // probe's fastest and slowest core (100 (fastest / slowest - 1), either precision), and the
  // |error| of predicted / speed over every layout.
  bool probed = false;
  double speed_min = 0, speed_median = 0, speed_max = 0, core_gap_max_pct = 0;
  double adjusted_mean_abs_error_pct = 0, adjusted_p90_abs_error_pct = 0,
         adjusted_worst_abs_error_pct = 0;
};

// The default grid (>= 30 dense layouts, each (model, ranks) group >= 5; a handful of CP and MoE
// layouts of the bench model in groups of their own) or the quick one (3 dense layouts, one CP
// and one MoE), keeping the groups `only` names (empty: every group; with quick, dense alone).
// Throws Error naming --only for a group that does not exist.
std::vector<LayoutModel> layout_models();
std::vector<LayoutSpec> layout_grid(bool quick, bool mpi,
                                    const std::vector<std::string>& only = {});

LayoutsBenchReport run_layouts_bench(const LayoutsBenchOptions& options);
// Errors, spreads, groups and the overall figures from each result's repeats (no timing: the
// tests call it on figures they choose).
void summarize_layouts(LayoutsBenchReport& report);
void print_layouts_bench(std::ostream& out, const LayoutsBenchReport& report);
nlohmann::json layouts_bench_to_json(const LayoutsBenchReport& report);

}  // namespace dtrain::bench
