// `dtrain collectives`: one collective on N thread ranks; per-rank measured steps and bytes
// beside the formula, then time, algbw and busbw (bench/collectives_bench does the work).
#include <iostream>
#include <memory>
#include <string>

#include "bench/collectives_bench.h"
#include "build_info.h"
#include "command_registry.h"
#include "dtrain/comm/launch.h"
#include "dtrain/core/units.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct CollectivesFlags {
  bench::CollectiveRunConfig config;
  std::string size = "64MiB", op = "all_reduce", algo = "ring", backend = "threads";
  bool json = false;
};

void add_collectives(CLI::App& app) {
  auto f = std::make_shared<CollectivesFlags>();
  CLI::App* cmd = app.add_subcommand(
      "collectives",
      "Run one collective on N thread ranks: measured steps and bytes per rank beside the "
      "formula, then time, algbw and busbw (nccl-tests definitions)");
  cmd->add_option("--ranks", f->config.ranks, "Number of ranks (threads), 1..1024")
      ->capture_default_str()
      ->check(whole_number(1, kMaxRanks));
  cmd->add_option("--size", f->size,
                  "S as nccl-tests defines it: the buffer for all_reduce/broadcast/reduce, the "
                  "input per rank for reduce_scatter and all_to_all (N equal blocks), the output "
                  "per rank for all_gather. "
                  "Units B, KiB, MiB, GiB (or KB, MB, GB)")
      ->capture_default_str();
  cmd->add_option("--op", f->op,
                  "Collective: all_reduce, reduce_scatter, all_gather, broadcast, reduce, "
                  "all_to_all, all_to_all_v (uneven parts of 0 to 2 blocks of S/N, some empty, "
                  "and with more than 2 ranks the last rank sending nothing)")
      ->capture_default_str();
  cmd->add_option("--algo", f->algo,
                  "Algorithm: ring (bandwidth-optimal), tree (latency-optimal), naive (through "
                  "one root), direct (ranks that share memory read each other's buffers: the "
                  "threads backend, MPI ranks on one node), auto (direct where the ranks share "
                  "memory, else tree up to 64 KiB and ring above), native (MPI's own; --backend "
                  "mpi), pairwise (all_to_all: N-1 send/recv steps) or hierarchical (all_reduce "
                  "over nodes; --ranks-per-node). all_to_all runs pairwise, direct, native or "
                  "auto (direct where the ranks share memory, else pairwise)")
      ->capture_default_str();
  cmd->add_option("--ranks-per-node", f->config.ranks_per_node,
                  "Ranks k*G..k*G+G-1 share node k: bytes sent are split into intra-node and "
                  "inter-node, beside the formula")
      ->check(whole_number(1, kMaxRanks));
  cmd->add_option("--root", f->config.root, "Root rank of broadcast and reduce")
      ->capture_default_str()
      ->check(whole_number(0, kMaxRanks - 1));
  cmd->add_option("--trials", f->config.trials, "Timed trials; the median is reported")
      ->capture_default_str()
      ->check(whole_number(1, kMaxTrials));
  cmd->add_option("--trial-seconds", f->config.trial_seconds,
                  "Length of one trial of back-to-back calls")
      ->capture_default_str()
      ->check(real_number(0, kMaxTrialSeconds, true));
  cmd->add_option("--timeout", f->config.timeout_s,
                  "Seconds a rank waits for a peer before failing (under mpirun: before the "
                  "job is aborted with a message naming the peer)")
      ->capture_default_str();
  cmd->add_option("--backend", f->backend,
                  "threads (ranks are threads of this process) or mpi (run under mpirun; the "
                  "first --ranks processes take part)")
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "Print the same figures as JSON");
  cmd->callback([f, cmd] {
    const auto backend = comm::parse_backend(f->backend);
    DTRAIN_CHECK(backend.has_value(), "--backend: unknown backend '", f->backend,
                 "' (use threads or mpi)");
    f->config.backend = *backend;
    comm::check_timeout(f->config.timeout_s);
    comm::check_launch(*backend);  // before any output: mpirun -np 2 with threads is a mistake
    f->config.bytes = parse_bytes(f->size, "--size");
    // all_to_all_v: the all-to-all over the uneven parts of bench::v_part_count.
    f->config.variable_counts = f->op == "all_to_all_v";
    const auto op = comm::parse_collective_op(f->config.variable_counts ? "all_to_all" : f->op);
    DTRAIN_CHECK(op.has_value(), "--op: unknown collective '", f->op,
                 "' (use all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all or ",
                 "all_to_all_v)");
    // The all-to-all has no ring: without --algo it takes its automatic choice.
    if (*op == comm::CollectiveOp::all_to_all && cmd->count("--algo") == 0) f->algo = "auto";
    f->config.hierarchical = f->algo == "hierarchical";
    const auto algo = comm::parse_algorithm(f->config.hierarchical ? "ring" : f->algo);
    DTRAIN_CHECK(algo.has_value(), "--algo: unknown algorithm '", f->algo,
                 "' (use ring, tree, naive, direct, auto, native, pairwise or hierarchical)");
    f->config.op = *op;
    f->config.algorithm = *algo;
    check_fits_in_memory(bench::buffer_bytes(f->config),
                         str("--size ", f->size, " on --ranks ", f->config.ranks));
    const bench::CollectiveRunReport report = bench::run_collective(f->config);
    if (!report.reporter) return;
    if (f->json) {
      std::cout << with_build(bench::to_json(report)).dump(2) << "\n";
    } else {
      bench::print_report(report, std::cout);
    }
    DTRAIN_CHECK(report.verified, bench::op_label(f->config), " produced a wrong result");
  });
}

const CommandRegistration kRegistration("", add_collectives);

}  // namespace
}  // namespace dtrain::cli
