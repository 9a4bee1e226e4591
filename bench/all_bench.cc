// run_all_bench: each benchmark's library call at its default shape, its ratios gathered with
// their targets; a benchmark that cannot run here (no PyTorch, no mpicc) is listed as skipped
// with why, and the others still run.
#include "bench/all_bench.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "bench/bench_util.h"
#include "bench/collectives_bench.h"
#include "bench/cp_bench.h"
#include "bench/dp_bench.h"
#include "bench/ep_bench.h"
#include "bench/plan_bench.h"
#include "bench/train_bench.h"
#include "dtrain/core/check.h"
#include "dtrain/machine/format.h"
#include "dtrain/model/bf16_gemm.h"

namespace dtrain::bench {
namespace {

// Where the targets come from.
constexpr const char* kIssueSpeed = "the project's speed target";
constexpr const char* kPlanBudget = "the held-tp search's budget";

bool wanted(const AllBenchOptions& o, const std::string& bench) {
  return o.only.empty() || std::find(o.only.begin(), o.only.end(), bench) != o.only.end();
}

std::vector<std::string> cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::vector<std::string> flags;
    for (std::string w; words >> w;) flags.push_back(w);
    return flags;
  }
  return {};
}

void add(AllBenchReport& r, std::string bench, std::string figure, double value, std::string unit,
         Want want = Want::none, double target = 0, std::string source = "") {
  r.figures.push_back({std::move(bench), std::move(figure), value, std::move(unit), want, target,
                       std::move(source)});
}

void plan_figures(AllBenchReport& r) {
  const PlanBenchReport p = run_plan_bench(PlanBenchConfig{});
  add(r, "plan",
      str("full search, ", p.config.model, " on ", p.gpus, " GPUs (", p.evaluated,
          " layouts), median CPU seconds"),
      p.median_cpu_seconds, "s", Want::at_most, 0.1, kIssueSpeed);
  add(r, "plan", str("search held at tp=", p.fixed_tp, ", median CPU seconds"),
      p.fixed_tp_median_cpu_seconds, "s", Want::at_most, 0.1, kPlanBudget);
}

void cp_figures(AllBenchReport& r) {
  for (plan::CpAlgorithm a :
       {plan::CpAlgorithm::ring, plan::CpAlgorithm::all_gather, plan::CpAlgorithm::ulysses}) {
    CpBenchOptions o;
    o.algorithm = a;
    const CpBenchReport c = run_cp_bench(o);
    const std::string shape = str("L", o.layers, " C", o.channels, " NH", o.heads, " T", o.seq);
    add(r, "cp", str("cp ", o.ranks, " / dp ", o.ranks, " step time, ", name(a), ", ", shape),
        c.time_ratio(), "x", Want::at_most, 1.2, kIssueSpeed);
    add(r, "cp", str("cp / dp activation peak per rank, ", name(a)), c.activation_ratio(), "x");
  }
}

void ep_figures(AllBenchReport& r) {
  const EpBenchOptions o;
  const EpBenchReport e = run_ep_bench(o);
  add(r, "ep", str("ep ", o.ranks, " / experts replicated, step time"), e.time_ratio(), "x");
  add(r, "ep", "ep / replicated, peak memory per rank", e.memory_ratio(), "x");
}

void dp_figures(AllBenchReport& r) {
  DpBenchOptions o;
  o.zero_stages.clear();
  o.rounds = 2;
  const DpBenchReport d = run_dp_bench(o);
  add(r, "dp", str("dp ", o.ranks, " tokens/s / (", o.ranks, " x one rank's), ", o.model),
      d.dp_efficiency, "x");
}

void train_figures(AllBenchReport& r, const AllBenchOptions& all, bool cpu_bf16) {
  const bool peer = !all.torch_peer.empty() && std::filesystem::exists(all.torch_peer);
  if (!peer) r.skipped.push_back(str("train: no PyTorch peer (", all.torch_peer, " not found)"));
  for (const char* model : {"bench", "wide"}) {
    TrainBenchOptions o;
    o.model = model;
    o.threads = {1};
    o.blas_threads.clear();
    o.steps = all.train_steps;
    o.warmup = 3;
    if (peer) {
      o.peer = all.torch_peer;
      o.python = all.python;
    }
    const TrainBenchReport t = run_train_bench(o);
    auto tokens = [&](model::Precision p) {
      for (const TrainBenchRow& row : t.rows) {
        if (!row.openblas && row.threads == 1 && row.precision == p) return row.tokens_per_s;
      }
      return 0.0;
    };
    const double fp32 = tokens(model::Precision::fp32), bf16 = tokens(model::Precision::bf16);
    add(r, "train", str(model, ": bf16 / fp32 tokens/s, 1 thread"), bf16 / fp32, "x",
        cpu_bf16 ? Want::at_least : Want::none, 1.8,
        cpu_bf16 ? kIssueSpeed : "no target: this CPU has no bf16 instructions");
    if (peer && !t.peer_error.empty()) r.skipped.push_back(str("train peer: ", t.peer_error));
    for (const TrainPeerRow& p : t.peer) {
      if (p.threads != 1 || p.tokens_per_s <= 0) continue;
      const bool is_bf16 = p.precision == model::Precision::bf16;
      add(r, "train",
          str(model, ": dtrain / PyTorch tokens/s, ", is_bf16 ? "bf16 (autocast)" : "fp32",
              ", 1 thread"),
          (is_bf16 ? bf16 : fp32) / p.tokens_per_s, "x", is_bf16 ? Want::at_least : Want::none, 1.3,
          is_bf16 ? kIssueSpeed : "");
    }
  }
}

void collective_figures(AllBenchReport& r, const AllBenchOptions& all) {
  CollectiveSweepConfig c;
  c.worlds = {2};
  c.sizes = {int64_t{64} << 20};
  c.algorithms = {comm::Algorithm::ring};
  c.rounds = 2;
  const bool peer = !all.mpi_peer.empty() && std::filesystem::exists(all.mpi_peer);
  if (peer) c.peer = all.mpi_peer;
  CollectiveSweepReport s;
  try {
    s = run_collective_sweep(c);
  } catch (const std::exception& e) {
    if (!peer) throw;
    r.skipped.push_back(str("collectives: the OpenMPI peer: ", e.what()));
    c.peer.clear();
    s = run_collective_sweep(c);
  }
  if (!peer)
    r.skipped.push_back(str("collectives: no OpenMPI peer (", all.mpi_peer, " not found)"));
  for (const CollectiveSweepRow& row : s.rows) {
    add(r, "collectives", "all-reduce ring, 2 ranks, 64 MiB: busbw / one thread's memcpy",
        row.busbw_gbps / s.memcpy_gbps, "x");
    for (const PeerSweepRow& p : s.peer_rows) {
      if (!p.measured || p.world != row.world || p.bytes != row.bytes) continue;
      add(r, "collectives", "all-reduce ring, 2 ranks, 64 MiB: OpenMPI's time / dtrain's",
          p.time_us / row.time_us, "x");
    }
  }
}

}  // namespace

int AllBenchReport::missed() const {
  return static_cast<int>(std::count_if(figures.begin(), figures.end(),
                                        [](const TargetFigure& f) { return !f.met(); }));
}

AllBenchReport run_all_bench(const AllBenchOptions& options) {
  for (const std::string& b : options.only) {
    DTRAIN_CHECK(std::find(kAllBenches.begin(), kAllBenches.end(), b) != kAllBenches.end(),
                 "--only: no benchmark named '", b, "' (plan, cp, ep, dp, train, collectives)");
  }
  AllBenchReport r;
  const model::Bf16Support support = model::bf16_support();
  r.cpu = support.cpu_model;
  r.hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  const std::vector<std::string> flags = cpu_flags();
  for (const char* f : {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"}) {
    if (std::find(flags.begin(), flags.end(), f) != flags.end()) r.instructions.push_back(f);
  }
  const bool cpu_bf16 = support.cpu_avx512_bf16 || support.cpu_amx_bf16;
  const std::vector<std::pair<std::string, std::function<void()>>> runs = {
      {"plan", [&] { plan_figures(r); }},
      {"cp", [&] { cp_figures(r); }},
      {"ep", [&] { ep_figures(r); }},
      {"dp", [&] { dp_figures(r); }},
      {"train", [&] { train_figures(r, options, cpu_bf16); }},
      {"collectives", [&] { collective_figures(r, options); }},
  };
  for (const auto& [bench, run] : runs) {
    if (wanted(options, bench)) run();
  }
  return r;
}

void print_all_bench(std::ostream& out, const AllBenchReport& r) {
  out << "dtrain bench all: " << r.cpu << ", " << r.hardware_threads << " hardware threads; "
      << "instructions:";
  for (const std::string& i : r.instructions) out << " " << i;
  out << (r.instructions.empty() ? " none of AVX2, AVX-512, AVX512_BF16, AMX\n" : "\n");
  size_t width = 6;
  for (const TargetFigure& f : r.figures) width = std::max(width, f.figure.size());
  out << "  " << rpad("bench", 12) << rpad("figure", width + 2) << lpad("value", 9) << "  target\n";
  for (const TargetFigure& f : r.figures) {
    const int digits = f.unit == "s" ? 3 : 2;
    std::string target = "none set";
    if (f.want != Want::none) {
      target = str(f.want == Want::at_least ? ">= " : "<= ", plan::format_fixed(f.target, digits),
                   f.unit, f.met() ? "  met" : "  MISSED", " (", f.source, ")");
    } else if (!f.source.empty()) {
      target = str("none: ", f.source);
    }
    out << "  " << rpad(f.bench, 12) << rpad(f.figure, width + 2)
        << lpad(plan::format_fixed(f.value, digits) + f.unit, 9) << "  " << target << "\n";
  }
  for (const std::string& s : r.skipped) out << "  skipped: " << s << "\n";
  out << "  " << r.missed() << " target(s) missed; ratios are measured within one run on a shared "
      << "machine, whose time ratios move between runs\n";
}

nlohmann::json all_bench_to_json(const AllBenchReport& r) {
  nlohmann::json figures = nlohmann::json::array();
  for (const TargetFigure& f : r.figures) {
    nlohmann::json j = {
        {"bench", f.bench}, {"figure", f.figure}, {"value", f.value}, {"unit", f.unit}};
    if (f.want != Want::none) {
      j["target"] = f.target;
      j["want"] = f.want == Want::at_least ? "at_least" : "at_most";
      j["met"] = f.met();
    }
    if (!f.source.empty()) j["source"] = f.source;
    figures.push_back(std::move(j));
  }
  return {{"cpu", r.cpu},
          {"instructions", r.instructions},
          {"hardware_threads", r.hardware_threads},
          {"figures", figures},
          {"skipped", r.skipped},
          {"missed", r.missed()}};
}

}  // namespace dtrain::bench
