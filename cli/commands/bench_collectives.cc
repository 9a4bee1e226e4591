// `dtrain bench collectives`: busbw of each algorithm from 4 KiB to 256 MiB at N = 2 and 4,
// beside this machine's memcpy bandwidth measured in the same run.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/collectives_bench.h"
#include "command_registry.h"
#include "dtrain/comm/launch.h"
#include "dtrain/core/units.h"

namespace dtrain::cli {
namespace {

struct BenchCollectivesFlags {
  bench::CollectiveSweepConfig config;
  std::string op = "all_reduce", backend = "threads";
  std::vector<std::string> algos;
  std::string min_size = "4KiB", max_size = "256MiB";
  bool json = false;
};

void add_bench_collectives(CLI::App& bench_app) {
  auto f = std::make_shared<BenchCollectivesFlags>();
  CLI::App* cmd = bench_app.add_subcommand(
      "collectives",
      "Sweep message sizes for N = 2 and 4: busbw per algorithm, beside this machine's memcpy "
      "bandwidth measured in the same run, and their ratio");
  cmd->add_option("--op", f->op, "Collective: all_reduce, reduce_scatter, all_gather, ...")
      ->capture_default_str();
  cmd->add_option("--ranks", f->config.worlds, "World sizes to sweep")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--algos", f->algos,
                  "Algorithms to sweep (default: ring tree naive; with --backend mpi also "
                  "native, MPI's own; with --ranks-per-node: ring hierarchical [native]). "
                  "hierarchical: reduce-scatter inside each node, all-reduce across nodes, "
                  "all-gather inside (all_reduce only)");
  cmd->add_option("--ranks-per-node", f->config.ranks_per_node,
                  "Ranks k*G..k*G+G-1 share node k: adds the bytes each rank sent across nodes "
                  "per call, and the hierarchical algorithm")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--min-size", f->min_size, "Smallest S")->capture_default_str();
  cmd->add_option("--max-size", f->max_size, "Largest S (sizes grow by 4x)")->capture_default_str();
  cmd->add_option("--trials", f->config.trials, "Timed trials per point (median reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--trial-seconds", f->config.trial_seconds, "Length of one trial")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--backend", f->backend,
                  "threads (ranks are threads of this process) or mpi (run under mpirun; the "
                  "first --ranks processes take part)")
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "Print the same figures as JSON");
  cmd->callback([f] {
    const auto backend = comm::parse_backend(f->backend);
    DTRAIN_CHECK(backend.has_value(), "--backend: unknown backend '", f->backend,
                 "' (use threads or mpi)");
    f->config.backend = *backend;
    comm::check_launch(*backend);  // before any output: mpirun -np 2 with threads is a mistake
    const auto op = comm::parse_collective_op(f->op);
    DTRAIN_CHECK(op.has_value(), "--op: unknown collective '", f->op, "'");
    f->config.op = *op;
    f->config.algorithms.clear();
    if (f->algos.empty()) {
      f->algos = {"ring", "tree", "naive"};
      if (f->config.ranks_per_node > 0) f->algos = {"ring", "hierarchical"};
      if (*backend == comm::Backend::mpi) f->algos.push_back("native");
    }
    for (const std::string& a : f->algos) {
      if (a == "hierarchical") {
        DTRAIN_CHECK(f->config.ranks_per_node > 0,
                     "--algos hierarchical needs --ranks-per-node G (ranks per node)");
        DTRAIN_CHECK(*op == comm::CollectiveOp::all_reduce,
                     "--algos hierarchical is an all_reduce; got --op ", f->op);
        f->config.hierarchical = true;
        continue;
      }
      const auto algo = comm::parse_algorithm(a);
      DTRAIN_CHECK(algo.has_value() && *algo != comm::Algorithm::automatic, "--algos: unknown ",
                   "algorithm '", a, "' (use ring, tree, naive, native or hierarchical)");
      f->config.algorithms.push_back(*algo);
    }
    const int64_t lo = parse_bytes(f->min_size, "--min-size");
    const int64_t hi = parse_bytes(f->max_size, "--max-size");
    DTRAIN_CHECK(lo >= 4 && lo <= hi, "--min-size must be at least 4 bytes and at most --max-size");
    for (int64_t s = lo; s <= hi; s *= 4) f->config.sizes.push_back(s / 4 * 4);
    for (int world : f->config.worlds) {
      DTRAIN_CHECK(f->config.ranks_per_node == 0 || world % f->config.ranks_per_node == 0,
                   "--ranks-per-node ", f->config.ranks_per_node, " does not divide --ranks ",
                   world, " into whole nodes");
    }
    const bench::CollectiveSweepReport report = bench::run_collective_sweep(f->config);
    if (!report.reporter) return;
    if (f->json) {
      std::cout << bench::to_json(report).dump(2) << "\n";
    } else {
      bench::print_report(report, std::cout);
    }
  });
}

const CommandRegistration kRegistration("bench", add_bench_collectives);

}  // namespace
}  // namespace dtrain::cli
