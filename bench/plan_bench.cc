// run_plan_bench: the timed searches and the published layout's evaluation.
#include "bench/plan_bench.h"

#include <algorithm>
#include <ostream>

#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/machine/format.h"
#include "dtrain/plan/report.h"

namespace dtrain::bench {
namespace {

plan::PlanInput bench_input(const PlanBenchConfig& config) {
  plan::PlanInput in;
  in.model = plan::model_preset(config.model);
  in.cluster = plan::parse_cluster(config.cluster);
  in.training.global_batch = in.model.default_global_batch;
  in.training.tokens = in.model.default_tokens;
  return in;
}

// The TP size the held search fixes: the paper's 8 when this cluster and model admit it (at most
// a node's GPUs, dividing the GPUs and the heads), else the largest power of two that does, with
// the reason, so that a small --cluster is not blamed for a tp=8 the user never gave.
int held_tp(const plan::PlanInput& in, std::string& why) {
  const plan::Cluster& c = in.cluster;
  const auto admits = [&](int tp) {
    return tp <= c.gpus_per_node && c.world() % tp == 0 && in.model.heads % tp == 0;
  };
  if (admits(8)) {
    why = "the paper's tp=8";
    return 8;
  }
  int tp = 4;
  while (tp > 1 && !admits(tp)) tp /= 2;
  if (8 > c.gpus_per_node) {
    why = str("the paper's tp=8 needs 8 GPUs per node; this cluster has ", c.gpus_per_node);
  } else if (c.world() % 8 != 0) {
    why = str("the paper's tp=8 does not divide this cluster's ", c.world(), " GPUs");
  } else {
    why = str("the paper's tp=8 does not divide ", in.model.heads, " heads");
  }
  return tp;
}

}  // namespace

PlanBenchReport run_plan_bench(const PlanBenchConfig& config) {
  DTRAIN_CHECK(config.repeats >= 1, "--repeats must be >= 1, got ", config.repeats);
  PlanBenchReport r;
  r.config = config;
  const plan::PlanInput in = bench_input(config);
  r.gpus = in.cluster.world();
  auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  for (int i = 0; i < config.repeats; ++i) {
    Stopwatch watch;
    const double cpu_start = thread_cpu_seconds();
    const plan::SearchResult result = plan::search(in);
    r.cpu_seconds.push_back(thread_cpu_seconds() - cpu_start);
    r.seconds.push_back(watch.elapsed_s());
    r.evaluated = result.evaluated;
    r.fitting = result.fitting;
    if (!result.top.empty()) r.best = result.top.front().plan;
    if (result.top.empty()) {
      r.no_best =
          result.explanations.empty() ? std::string("no layout fits") : result.explanations.front();
    }
  }
  r.median_seconds = median(r.seconds);
  r.median_cpu_seconds = median(r.cpu_seconds);
  // Held at one tp, as `dtrain plan --search --tp 8` (its budget: under 0.1 s).
  r.fixed_tp = held_tp(in, r.fixed_tp_why);
  std::vector<double> fixed, fixed_cpu;
  for (int i = 0; i < config.repeats; ++i) {
    Stopwatch watch;
    const double cpu_start = thread_cpu_seconds();
    plan::SearchOptions options;
    options.fixed.tp = r.fixed_tp;
    const plan::SearchResult result = plan::search(in, options);
    fixed_cpu.push_back(thread_cpu_seconds() - cpu_start);
    fixed.push_back(watch.elapsed_s());
    r.fixed_tp_evaluated = result.evaluated;
  }
  r.fixed_tp_median_seconds = median(fixed);
  r.fixed_tp_median_cpu_seconds = median(fixed_cpu);

  // The paper's layout for this row (Table 1: tp=8, pp=64 on 3072 GPUs; it trains with full
  // activation recompute), micro-batch 1, with the plain and the interleaved 1F1B schedules.
  if (config.model == "megatron-1t" && r.gpus == 3072) {
    for (int v : {1, 2}) {
      plan::Layout l;
      l.tp = 8;
      l.pp = 64;
      l.dp = 6;
      l.vp = v;
      l.recompute = plan::Recompute::full;
      l.schedule = v > 1 ? plan::ScheduleKind::interleaved : plan::ScheduleKind::one_f_one_b;
      r.published.push_back({v > 1 ? "tp=8 pp=64 dp=6, interleaved v=2" : "tp=8 pp=64 dp=6, 1F1B",
                             plan::evaluate(in, l)});
    }
  }
  return r;
}

void print_report(const PlanBenchReport& r, std::ostream& out) {
  out << "dtrain bench plan: full search for " << r.config.model << " on " << r.config.cluster
      << " (" << r.gpus << " GPUs)\n";
  out << "  runs (CPU):";
  for (double s : r.cpu_seconds) out << " " << plan::format_seconds(s);
  out << "\n  runs (wall):";
  for (double s : r.seconds) out << " " << plan::format_seconds(s);
  out << "\n  median " << plan::format_seconds(r.median_cpu_seconds) << " of CPU ("
      << plan::format_seconds(r.median_seconds) << " wall) for "
      << plan::format_count(static_cast<double>(r.evaluated)) << " layouts evaluated ("
      << plan::format_fixed(r.median_cpu_seconds / static_cast<double>(r.evaluated) * 1e6, 2)
      << " us each), " << plan::format_count(static_cast<double>(r.fitting)) << " fit\n";
  out << "  target: under 0.1 s of CPU for a full search (every axis searched); this run took "
      << plan::format_fixed(r.median_cpu_seconds / 0.1, 2) << "x that\n";
  out << "  held at tp=" << r.fixed_tp << " (--search --tp " << r.fixed_tp << ", " << r.fixed_tp_why
      << "): median " << plan::format_seconds(r.fixed_tp_median_cpu_seconds) << " of CPU for "
      << plan::format_count(static_cast<double>(r.fixed_tp_evaluated))
      << " layouts; budget under 0.1 s: "
      << plan::format_percent(r.fixed_tp_median_cpu_seconds / 0.1) << " of it\n";
  if (!r.no_best.empty()) {
    out << "  search's best: none: " << r.no_best << "\n";
  } else {
    out << "  search's best: " << plan::describe(r.best.layout) << ": "
        << plan::format_fixed(r.best.time.hardware_flops_per_gpu * 1e-12, 1)
        << " TFLOP/s per GPU with recompute, MFU " << plan::format_percent(r.best.time.mfu) << "\n";
  }
  for (const PublishedLayout& p : r.published) {
    const double tflops = p.plan.time.hardware_flops_per_gpu * 1e-12;
    out << "  " << p.label << " (full recompute, b=1): predicted " << plan::format_fixed(tflops, 1)
        << " TFLOP/s per GPU vs " << kPublishedTflopsPerGpu
        << " measured by Narayanan et al. 2021 (Table 1): ratio "
        << plan::format_fixed(tflops / kPublishedTflopsPerGpu, 2) << "\n";
  }
}

nlohmann::json to_json(const PlanBenchReport& r) {
  nlohmann::json published = nlohmann::json::array();
  for (const PublishedLayout& p : r.published) {
    published.push_back({{"label", p.label},
                         {"plan", plan::plan_json(p.plan)},
                         {"published_tflops_per_gpu", kPublishedTflopsPerGpu}});
  }
  return {{"model", r.config.model},
          {"cluster", r.config.cluster},
          {"gpus", r.gpus},
          {"seconds", r.seconds},
          {"median_seconds", r.median_seconds},
          {"cpu_seconds", r.cpu_seconds},
          {"median_cpu_seconds", r.median_cpu_seconds},
          {"evaluated", r.evaluated},
          {"fitting", r.fitting},
          {"best", r.no_best.empty() ? plan::plan_json(r.best) : nlohmann::json(nullptr)},
          {"no_best", r.no_best},
          {"published", published},
          {"fixed_tp",
           {{"tp", r.fixed_tp},
            {"why", r.fixed_tp_why},
            {"median_seconds", r.fixed_tp_median_seconds},
            {"median_cpu_seconds", r.fixed_tp_median_cpu_seconds},
            {"evaluated", r.fixed_tp_evaluated}}}};
}

}  // namespace dtrain::bench
