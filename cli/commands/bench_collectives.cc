// `dtrain bench collectives`: busbw of each algorithm from 4 KiB to 256 MiB at N = 2 and 4,
// beside this machine's memcpy bandwidth (one thread, all threads) measured in the same run,
// in interleaved rounds, and optionally beside OpenMPI's time (--peer).
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/collectives_bench.h"
#include "build_info.h"
#include "command_registry.h"
#include "dtrain/comm/launch.h"
#include "dtrain/core/units.h"
#include "validators.h"

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
      "bandwidth (one thread, and all hardware threads at once) measured in the same run, and "
      "their ratios; with --peer, OpenMPI's time and busbw too, and dtrain's time / OpenMPI's");
  cmd->add_option(
         "--op", f->op,
         "Collective: all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, "
         "all_to_all_v")
      ->capture_default_str();
  cmd->add_option("--ranks", f->config.worlds, "World sizes to sweep")
      ->capture_default_str()
      ->check(whole_number(1, kMaxRanks));
  cmd->add_option("--algos", f->algos,
                  "Algorithms to sweep (default: ring tree naive direct; with --backend mpi "
                  "ring tree naive native, MPI's own; with --ranks-per-node: ring hierarchical "
                  "[native]; all_to_all: pairwise direct, under mpi pairwise native). "
                  "hierarchical: reduce-scatter inside each node, all-reduce across nodes, "
                  "all-gather inside (all_reduce only)");
  cmd->add_option("--ranks-per-node", f->config.ranks_per_node,
                  "Ranks k*G..k*G+G-1 share node k: adds the bytes each rank sent across nodes "
                  "per call, and the hierarchical algorithm")
      ->check(whole_number(1, kMaxRanks));
  cmd->add_option("--min-size", f->min_size, "Smallest S")->capture_default_str();
  cmd->add_option("--max-size", f->max_size, "Largest S (sizes grow by 4x)")->capture_default_str();
  cmd->add_option("--trials", f->config.trials, "Timed trials per point (median reported)")
      ->capture_default_str()
      ->check(whole_number(1, kMaxTrials));
  cmd->add_option("--trial-seconds", f->config.trial_seconds, "Length of one trial")
      ->capture_default_str()
      ->check(real_number(0, kMaxTrialSeconds, true));
  cmd->add_option("--rounds", f->config.rounds,
                  "Repeat every measurement (each size x algorithm, memcpy, the peer) this many "
                  "times, interleaved: round 1 of everything, then round 2, ...; each figure is "
                  "the median over rounds. Table rows print during the last round, a progress line "
                  "per row on stderr before it")
      ->capture_default_str()
      ->check(whole_number(1, kMaxTrials));
  cmd->add_option(
         "--peer", f->config.peer,
         "The OpenMPI peer's source (bench/peers/mpi_allreduce.c): built once with "
         "mpicc into a temporary directory, then run with mpirun -np N (as root also "
         "--allow-run-as-root) after dtrain's algorithms at every size of every round, with "
         "the same trials. Adds OpenMPI's time and busbw (\"mpi\") and dtrain's time / "
         "OpenMPI's per algorithm. all_reduce, reduce_scatter and all_gather only; "
         "--backend threads only (dtrain's ranks are threads, OpenMPI's are processes)")
      ->check(kNotEmpty);
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
    f->config.variable_counts = f->op == "all_to_all_v";
    const auto op = comm::parse_collective_op(f->config.variable_counts ? "all_to_all" : f->op);
    DTRAIN_CHECK(op.has_value(), "--op: unknown collective '", f->op, "'");
    f->config.op = *op;
    f->config.algorithms.clear();
    if (f->algos.empty()) {
      f->algos = {"ring", "tree", "naive"};
      if (*backend == comm::Backend::threads) f->algos.push_back("direct");
      if (f->config.ranks_per_node > 0) f->algos = {"ring", "hierarchical"};
      if (*backend == comm::Backend::mpi) f->algos.push_back("native");
      if (*op == comm::CollectiveOp::all_to_all) {  // its own algorithms (comm/all_to_all.h)
        f->algos = {"pairwise"};
        f->algos.push_back(
            *backend == comm::Backend::threads || f->config.variable_counts ? "direct" : "native");
      }
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
                   "algorithm '", a,
                   "' (use ring, tree, naive, direct, native, pairwise or hierarchical)");
      f->config.algorithms.push_back(*algo);
    }
    const int64_t lo = parse_bytes(f->min_size, "--min-size");
    const int64_t hi = parse_bytes(f->max_size, "--max-size");
    DTRAIN_CHECK(lo >= 4, "--min-size must be at least 4 bytes (got ", f->min_size, ")");
    DTRAIN_CHECK(lo <= hi, "--min-size ", f->min_size, " is larger than --max-size ", f->max_size);
    int world_max = 0;
    for (int world : f->config.worlds) {
      DTRAIN_CHECK(f->config.ranks_per_node == 0 || world % f->config.ranks_per_node == 0,
                   "--ranks-per-node ", f->config.ranks_per_node, " does not divide --ranks ",
                   world, " into whole nodes");
      world_max = std::max(world_max, world);
    }
    bench::CollectiveRunConfig largest;
    largest.backend = *backend;
    largest.ranks = world_max;
    largest.bytes = hi;
    check_fits_in_memory(bench::buffer_bytes(largest),
                         str("--max-size ", f->max_size, " on --ranks ", world_max));
    // Sizes grow by 4x up to hi, stopping before s * 4 could pass hi (or int64's end).
    for (int64_t s = lo;; s *= 4) {
      f->config.sizes.push_back(s / 4 * 4);
      if (s > hi / 4) break;
    }
    // The table prints each row as soon as its size is measured in the last round (a sweep to
    // 256 MiB takes minutes); the earlier rounds, and every round under --json (one document,
    // printed at the end), print a progress line per row on stderr, so the sweep is never silent.
    bool header_done = false;
    const bool json = f->json;
    const bench::SweepRowDone print_row = [&header_done, json](
                                              const bench::CollectiveSweepReport& so_far, int round,
                                              int world, int64_t bytes) {
      if (json || round + 1 < so_far.config.rounds) {
        bench::print_sweep_progress(so_far, round, world, bytes, std::cerr);
        std::cerr.flush();
        return;
      }
      if (!header_done) bench::print_sweep_header(so_far, std::cout);
      header_done = true;
      if (bytes == so_far.config.sizes.front()) bench::print_sweep_world(so_far, world, std::cout);
      bench::print_sweep_row(so_far, world, bytes, std::cout);
      std::cout.flush();
    };
    const bench::CollectiveSweepReport report = bench::run_collective_sweep(f->config, print_row);
    if (report.reporter && f->json) std::cout << with_build(bench::to_json(report)).dump(2) << "\n";
  });
}

const CommandRegistration kRegistration("bench", add_bench_collectives);

}  // namespace
}  // namespace dtrain::cli
