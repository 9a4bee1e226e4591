// `dtrain calibrate`: measure the intra-node and inter-node links of the ranks it runs on (under
// mpirun, or threads for a dry run) and write a cluster file that `dtrain plan --cluster` reads.
// The measured links replace the preset's; the GPU fields come from --gpu (CPU ranks have none).
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "command_registry.h"
#include "dtrain/comm/calibrate.h"
#include "dtrain/comm/launch.h"
#include "dtrain/core/check.h"
#include "dtrain/core/files.h"
#include "dtrain/core/units.h"
#include "dtrain/plan/hardware.h"
#include "file_roles.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct CalibrateFlags {
  comm::CalibrationOptions options;
  std::string backend = "threads", size = "4MiB", gpu = "H100", name, output;
  int ranks = 4;
  double timeout_s = 60;
  bool json = false;
  bool output_given = false;  // "-o ''" is a mistake, not "no file"
};

nlohmann::json link_detail(const comm::LinkMeasurement& m) {
  return {{"latency_pair", {m.ping_rank, m.pong_rank}},
          {"latency_us", m.latency_us},
          {"pairs_at_once", m.pairs},
          {"bandwidth_bytes_per_s", m.bandwidth_bytes_per_s},
          {"single_pair_bandwidth_bytes_per_s", m.single_pair_bandwidth_bytes_per_s}};
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
  comm::Calibration result;
  bool reporter = true;
  comm::run_on_backend(
      *backend, *backend == comm::Backend::threads ? f.ranks : 0,
      [&](comm::Communicator& comm) {
        comm::Calibration mine = comm::calibrate_links(comm, f.options);
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
  c.nodes = result.nodes;
  c.gpus_per_node = result.ranks_per_node;
  c.intra_node = {"measured intra-node", result.intra_node.bandwidth_bytes_per_s,
                  result.intra_node.latency_us};
  c.inter_node = {"measured inter-node", result.inter_node.bandwidth_bytes_per_s,
                  result.inter_node.latency_us};
  plan::validate(c);
  nlohmann::json file = plan::to_json(c);
  // Extra fields the reader ignores: how the figures were taken.
  file["calibration"] = {{"backend", f.backend},
                         {"ranks", result.world},
                         {"nodes_from", result.node_source},
                         {"hosts", result.hosts},
                         {"latency_bytes", f.options.latency_bytes},
                         {"bandwidth_bytes", f.options.bandwidth_bytes},
                         {"gpu_from_preset", f.gpu},
                         {"intra_node", link_detail(result.intra_node)},
                         {"inter_node", link_detail(result.inter_node)}};
  if (!f.output.empty()) {
    std::ofstream out(f.output);
    DTRAIN_CHECK(out.good(), "--output: cannot write '", f.output, "'");
    out << file.dump(2) << "\n";
    DTRAIN_CHECK(out.good(), "--output: writing '", f.output, "' failed");
  }
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
                  "one machine; needs --ranks-per-node)")
      ->capture_default_str();
  cmd->add_option("--ranks", f->ranks, "Ranks for --backend threads (mpi: every process)")
      ->capture_default_str()
      ->check(whole_number(2, kMaxRanks));
  cmd->add_option("--ranks-per-node", f->options.ranks_per_node,
                  "Ranks k*G..k*G+G-1 share node k (default: ranks with the same hostname do)")
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
  cmd->add_option("--name", f->name, "Cluster name in the file");
  CLI::Option* output = cmd->add_option("--output,-o", f->output, "Write the cluster file here");
  cmd->add_option("--timeout", f->timeout_s, "Seconds a rank waits for a peer before failing")
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "Print the cluster file (JSON) instead of the table");
  cmd->callback([f, output, cmd] {
    f->output_given = output->count() > 0;
    if (f->output_given) refuse_outputs_that_are_inputs(*cmd, {}, {{"--output", f->output}});
    run_calibrate(*f);
  });
}

const CommandRegistration kRegistration("", add_calibrate);

}  // namespace
}  // namespace dtrain::cli
