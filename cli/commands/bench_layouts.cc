// `dtrain bench layouts`: the engine clock's predicted step beside the measured one on 30+
// layouts it never saw (bench/layouts_bench.h); parses the flags and prints the table or JSON.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "dtrain/machine/hardware.h"

#include "bench/layouts_bench.h"
#include "build_info.h"
#include "command_registry.h"
#include "dtrain/core/check.h"
#include "dtrain/core/files.h"

namespace dtrain::cli {
namespace {

struct BenchLayoutsFlags {
  bench::LayoutsBenchOptions options;
  bool no_mpi = false;
  bool no_probe = false;
  bool json = false;
};

// A cluster file to price with: it must exist and be a cluster description (JSON with "gpu").
void check_cluster_file(const std::string& path) {
  const std::string how =
      "; make one on this machine with `dtrain calibrate --compute --ranks 4 --ranks-per-node "
      "2 -o cluster.json` and pass --cluster cluster.json";
  if (path.empty())
    throw Error("bench layouts needs --cluster FILE (a calibrated cluster file)" + how);
  if (!std::filesystem::is_regular_file(path))
    throw Error("--cluster " + path + ": no such file" + how);
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("gpu")) {
    throw Error("--cluster " + path + ": not a cluster file (JSON with a \"gpu\" object)" + how);
  }
  // The clock prices dtrain's engine only from rates measured on this machine.
  if (!plan::read_cluster_file(path).gpu.measured.present) {
    throw Error("--cluster " + path + ": has no field 'gpu.measured' (this machine's rates)" + how);
  }
}

void add_bench_layouts(CLI::App& bench_app) {
  auto f = std::make_shared<BenchLayoutsFlags>();
  bench::LayoutsBenchOptions& o = f->options;
  CLI::App* cmd = bench_app.add_subcommand(
      "layouts",
      "The clock's predicted step beside the measured one on 30+ held-out layouts (dp x tp x pp "
      "x ZeRO x SP x recompute x micro-batches x schedule x precision, two model sizes, threads "
      "and MPI): error, repeat spread, and per (model, ranks) group the rank correlation and how "
      "much slower the planner's top pick measures than the best");
  cmd->add_option("--cluster", o.cluster,
                  "Calibrated cluster file whose measured rates the clock prices with "
                  "(dtrain calibrate --compute -o FILE)");
  cmd->add_option("--repeats", o.repeats,
                  "Repeats per layout, round-robin over the layouts (each figure is their median)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->add_option("--steps", o.steps, "Training steps per repeat")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", o.warmup,
                  "The first steps of each repeat, run but not measured (fewer than --steps); the "
                  "faults/step column shows whether the measured ones still fault pages in")
      ->capture_default_str()
      ->check(CLI::Range(0, 999));
  cmd->add_flag("--quick", o.quick,
                "3 dense layouts of the bench model on 2 ranks (with --only, one layout per group "
                "named), 1 step each (tests)");
  cmd->add_option("--only", o.only,
                  std::string("Run only these groups of layouts, comma-separated: ") +
                      bench::kLayoutGroups +
                      " (cp: context parallelism, moe: mixture of experts; default: all)")
      ->delimiter(',');
  cmd->add_flag("--no-mpi", f->no_mpi, "Leave out the layouts that run under mpirun");
  cmd->add_flag("--no-probe", f->no_probe,
                "Do not time each core's speed against the cluster file's rates before the first "
                "run and after each (about 10 ms a core; the core speed columns say how far the "
                "machine drifted from its calibration during each run)");
  cmd->add_flag("--json", f->json, "Print the same figures as JSON");
  cmd->callback([f] {
    check_cluster_file(f->options.cluster);
    f->options.mpi = !f->no_mpi;
    f->options.probe = !f->no_probe;
    const bench::LayoutsBenchReport report = bench::run_layouts_bench(f->options);
    if (f->json) {
      std::cout << with_build(bench::layouts_bench_to_json(report)).dump(2) << "\n";
    } else {
      bench::print_layouts_bench(std::cout, report);
    }
  });
}

const CommandRegistration kRegistration("bench", add_bench_layouts);

}  // namespace
}  // namespace dtrain::cli
