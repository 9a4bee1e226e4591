// `dtrain calibrate`: measure the intra-node and inter-node links of the ranks it runs on (under
// mpirun, or threads for a dry run) and write a cluster file that `dtrain plan --cluster` reads.
// The measured links replace the preset's; the GPU fields come from --gpu, or with --compute from
// the CPU measured here (calibrate/compute_calibration.h), whose rates go into "gpu.measured".
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "command_registry.h"
#include "dtrain/calibrate/cluster_file.h"
#include "dtrain/calibrate/compute_calibration.h"
#include "dtrain/calibrate/link_calibration.h"
#include "dtrain/comm/launch.h"
#include "dtrain/core/check.h"
#include "dtrain/core/files.h"
#include "dtrain/core/timer.h"
#include "dtrain/core/units.h"
#include "dtrain/machine/hardware.h"
#include "dtrain/model/thread_team.h"
#include "file_roles.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct CalibrateFlags {
  calibrate::CalibrationOptions options;
  std::string backend = "threads", size = "4MiB", gpu = "H100", name, output;
  int ranks = 4;
  double timeout_s = 60;
  bool json = false;
  bool compute = false, quick = false;
  int threads = 1;
  int passes = 3;             // --passes; --quick makes it 1 unless given
  bool output_given = false;  // "-o ''" is a mistake, not "no file"
};

// The threads backend runs every rank on this machine, one node: the nodes are blocks of
// --ranks-per-node ranks, and a file needs two links, so at least 2 nodes of at least 2 ranks
// each. Checked before any measuring (the same rules refuse an mpirun job after it).
void check_thread_nodes(const CalibrateFlags& f) {
  const int per_node = f.options.ranks_per_node;
  if (per_node == 0) {
    DTRAIN_CHECK(!f.compute,
                 "--compute on --backend threads emulates two nodes of --ranks / 2 "
                 "thread ranks each, and a node needs at least 2 ranks (an intra-node "
                 "link to measure): --ranks ",
                 f.ranks,
                 " cannot make them; give an even --ranks of 4 or more, or --ranks-per-node G");
    throw Error(str("calibrate: --backend threads runs all ", f.ranks,
                    " ranks on this machine, one node, so there is no inter-node link to measure; "
                    "pass --ranks-per-node G to treat blocks of G ranks as nodes (at least 2 "
                    "ranks a node and 2 nodes, e.g. --ranks 4 --ranks-per-node 2), or --compute"));
  }
  DTRAIN_CHECK(per_node >= 2, "calibrate: --ranks-per-node ", per_node,
               ": one rank per node, so there is no intra-node link to measure; a node needs at "
               "least 2 ranks");
  DTRAIN_CHECK(f.ranks % per_node == 0, "--ranks-per-node ", per_node, " does not divide the ",
               f.ranks, " ranks into whole nodes");
  DTRAIN_CHECK(f.ranks >= 2 * per_node, "calibrate: --ranks ", f.ranks, " with --ranks-per-node ",
               per_node, " is one node, so there is no inter-node link to measure; give --ranks ",
               2 * per_node, " or more");
}

void run_calibrate(CalibrateFlags& f) {
  const auto backend = comm::parse_backend(f.backend);
  DTRAIN_CHECK(backend.has_value(), "--backend: unknown backend '", f.backend,
               "' (use threads or mpi)");
  f.options.bandwidth_bytes = parse_bytes(f.size, "--size");
  DTRAIN_CHECK(f.options.bandwidth_bytes >= 1, "--size must be at least 1 byte");
  comm::check_timeout(f.timeout_s);
  // Every rank sends and receives --size at once; the threads backend holds all the ranks.
  const int ranks_here = *backend == comm::Backend::threads ? f.ranks : 1;
  check_fits_in_memory(2.0 * static_cast<double>(f.options.bandwidth_bytes) * ranks_here,
                       str("--size ", f.size, " on --ranks ", ranks_here));
  // The file is written after the measuring: a path that cannot take it fails first. Only the
  // process that writes it checks (the probe creates and removes the file; under mpirun two
  // processes probing one shared path would trip over each other).
  if (f.output_given && comm::launcher_world().rank == 0) check_output_file(f.output, "--output");
  // The GPU of the file: a preset's (checked before any measuring).
  plan::Cluster base;
  try {
    base = plan::parse_cluster("1x" + f.gpu);
  } catch (const Error&) {
    std::string known;
    for (const plan::NodePreset& p : plan::node_presets())
      known += (known.empty() ? "" : ", ") + p.name;
    throw Error(str("--gpu: unknown node type '", f.gpu, "' (known: ", known, ")"));
  }
  // Measuring this machine's compute needs no second machine: a threads run without a node
  // layout emulates two nodes of half the ranks each (the links between them are this machine's
  // shared memory, which is what a threads run's "inter-node" traffic crosses too).
  if (f.compute && *backend == comm::Backend::threads && f.options.ranks_per_node == 0 &&
      f.ranks >= 4 && f.ranks % 2 == 0) {
    f.options.ranks_per_node = f.ranks / 2;
    std::cerr << "calibrate: --ranks-per-node " << f.ranks / 2 << " (two emulated nodes of "
              << f.ranks / 2 << " thread ranks on this machine; pass it to choose another)\n";
  }
  if (*backend == comm::Backend::threads) check_thread_nodes(f);
  calibrate::Calibration result;
  bool reporter = true;
  comm::run_on_backend(
      *backend, *backend == comm::Backend::threads ? f.ranks : 0,
      [&](comm::Communicator& comm) {
        calibrate::Calibration mine = calibrate::calibrate_links(comm, f.options);
        // The threads backend's ranks share `result`: one writer, the rank that reports.
        if (comm.rank() == 0) result = std::move(mine);
      },
      comm::LaunchOptions{f.timeout_s}, &reporter);
  if (!reporter) return;
  DTRAIN_CHECK(result.nodes >= 2, "calibrate: all ", result.world, " ranks are on one node (",
               result.node_source, ": ", result.hosts.empty() ? "" : result.hosts[0],
               "), so there is no inter-node link to measure; run across nodes or pass "
               "--ranks-per-node G to treat blocks of G ranks as nodes");
  DTRAIN_CHECK(result.ranks_per_node >= 2,
               "calibrate: one rank per node, so there is no "
               "intra-node link to measure; start at least 2 ranks per node");

  plan::Cluster c = base;
  c.name = f.name.empty() ? str("calibrated ", result.nodes, "x", result.ranks_per_node) : f.name;
  double compute_s = 0;
  if (f.compute) {
    const Stopwatch watch;
    calibrate::ComputeCalibrationOptions options;
    options.threads = f.threads;
    options.quick = f.quick;
    options.passes = f.passes;
    options.timeout_s = f.timeout_s;
    if (!f.json)
      options.progress = [](std::string_view what) {
        std::cerr << "calibrate --compute: " << what << "\n";
      };
    calibrate::use_measured_cpu(c, calibrate::measure_compute_rates(options), f.threads,
                                result.ranks_per_node);
    compute_s = watch.elapsed_us() * 1e-6;
  }
  const nlohmann::json file =
      calibrate::cluster_file(c, result,
                              {.backend = f.backend,
                               .options = f.options,
                               .gpu_from_preset = f.compute ? "" : f.gpu,
                               .compute_seconds = compute_s,
                               .compute_passes = f.compute ? f.passes : 0,
                               .source = f.output.empty() ? "(calibrated)" : f.output});
  if (!f.output.empty()) calibrate::write_cluster_file(f.output, file, "--output");
  if (f.json) {
    std::cout << file.dump(2) << "\n";
    return;
  }
  std::cout << "calibrate: " << result.world << " ranks = " << result.nodes << " nodes x "
            << result.ranks_per_node << " (nodes from " << result.node_source << ")\n\n"
            << std::left << std::setw(12) << "link" << std::right << std::setw(14) << "latency us"
            << std::setw(16) << "GB/s per rank" << std::setw(8) << "pairs" << std::setw(16)
            << "GB/s one pair"
            << "\n"
            << std::fixed;
  for (const auto& [label, m] :
       {std::pair{"intra-node", result.intra_node}, std::pair{"inter-node", result.inter_node}}) {
    std::cout << std::left << std::setw(12) << label << std::right << std::setprecision(1)
              << std::setw(14) << m.latency_us << std::setprecision(3) << std::setw(16)
              << m.bandwidth_bytes_per_s * 1e-9 << std::setw(8) << m.pairs << std::setw(16)
              << m.single_pair_bandwidth_bytes_per_s * 1e-9 << "\n";
  }
  std::cout << "\nlatency: half the median round trip of " << f.options.latency_bytes
            << "-byte messages between two ranks; bandwidth: "
            << format_bytes(static_cast<double>(f.options.bandwidth_bytes))
            << " sent and received per exchange by every paired rank at once (GB = 1e9 B)\n";
  if (f.compute) calibrate::print_compute_rates(std::cout, c.gpu, f.threads, compute_s);
  if (!f.output.empty()) {
    std::cout << "wrote " << f.output << " (dtrain plan --cluster " << f.output << ")\n";
  }
}

void add_calibrate(CLI::App& app) {
  auto f = std::make_shared<CalibrateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Measure the latency and bandwidth of the intra-node and inter-node links between the "
      "ranks (run under mpirun across nodes) and write a cluster file for `dtrain plan "
      "--cluster FILE.json`");
  cmd->add_option("--backend", f->backend,
                  "mpi (run under mpirun; every process takes part) or threads (a dry run on "
                  "one machine: blocks of --ranks-per-node ranks act as nodes; the file needs 2 "
                  "nodes of at least 2 ranks each, so --ranks 4 or more; --compute sets "
                  "--ranks-per-node to half an even --ranks when not given)")
      ->capture_default_str();
  cmd->add_option("--ranks", f->ranks,
                  "Ranks for --backend threads (mpi: every process): at least 2 nodes of at "
                  "least 2 ranks each (--ranks-per-node)")
      ->capture_default_str()
      ->check(whole_number(2, kMaxRanks));
  cmd->add_option("--ranks-per-node", f->options.ranks_per_node,
                  "Ranks k*G..k*G+G-1 share node k (default: ranks with the same hostname do); "
                  "at least 2, for an intra-node link to measure")
      ->check(whole_number(1, kMaxRanks));
  cmd->add_option("--size", f->size, "Bandwidth message, sent and received by each rank")
      ->capture_default_str();
  cmd->add_option("--latency-bytes", f->options.latency_bytes, "Ping-pong message size")
      ->capture_default_str()
      ->check(whole_number(1, int64_t{1} << 20));
  cmd->add_option("--iterations", f->options.latency_iterations, "Round trips per latency trial")
      ->capture_default_str()
      ->check(whole_number(1, 1000000));
  cmd->add_option("--seconds", f->options.bandwidth_seconds,
                  "About how long a bandwidth trial runs")
      ->capture_default_str()
      ->check(real_number(0, kMaxTrialSeconds, true));
  cmd->add_option("--trials", f->options.trials, "Trials per figure (median reported)")
      ->capture_default_str()
      ->check(whole_number(1, kMaxTrials));
  cmd->add_option("--gpu", f->gpu, "Node preset whose GPU fields the file carries (H100, A100)")
      ->capture_default_str();
  cmd->add_flag("--one-way", f->options.one_way,
                "Measure bandwidth with one-way streams (a ring's pattern) instead of two-way "
                "exchanges");
  cmd->add_flag("--compute", f->compute,
                "Also measure this machine's compute (matrix products by shape in fp32 and bf16, "
                "the engine's memory-bound kernels, collectives on thread ranks, compute slowed by "
                "a communication thread; about 40 s with 3 --passes) and write it as the "
                "file's CPU (\"gpu.measured\", docs/clock.md) in place of --gpu's. With "
                "--backend threads and no --ranks-per-node: two emulated nodes of --ranks / 2 "
                "ranks (an even --ranks of 4 or more)");
  cmd->add_flag("--quick", f->quick,
                "With --compute: a small product grid and two sizes per kernel (a second or two; "
                "for tests)");
  cmd->add_option("--threads", f->threads,
                  "With --compute: products are measured on 1 thread and on this many (a run's "
                  "--threads per rank)")
      ->capture_default_str()
      ->check(whole_number(1, model::kMaxTeamSize));
  CLI::Option* passes =
      cmd->add_option("--passes", f->passes,
                      "With --compute: measure the products, kernels and slowdowns this many "
                      "times over, each pass through the whole grid, keeping each figure's "
                      "median (steadier figures on a shared machine; 1 with --quick unless "
                      "given)")
          ->capture_default_str()
          ->check(whole_number(1, 20));
  cmd->add_option("--name", f->name, "Cluster name in the file");
  CLI::Option* output = cmd->add_option("--output,-o", f->output, "Write the cluster file here");
  cmd->add_option("--timeout", f->timeout_s, "Seconds a rank waits for a peer before failing")
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "Print the cluster file (JSON) instead of the table");
  cmd->callback([f, output, passes, cmd] {
    DTRAIN_CHECK(f->compute || !f->quick, "--quick applies to --compute only");
    DTRAIN_CHECK(f->compute || passes->count() == 0, "--passes applies to --compute only");
    if (f->quick && passes->count() == 0) f->passes = 1;
    f->output_given = output->count() > 0;
    if (f->output_given) refuse_outputs_that_are_inputs(*cmd, {}, {{"--output", f->output}});
    run_calibrate(*f);
  });
}

const CommandRegistration kRegistration("", add_calibrate);

}  // namespace
}  // namespace dtrain::cli
