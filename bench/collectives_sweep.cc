// run_collective_sweep: rounds of (memcpy on one thread and on all, then every world x size x
// column, then the OpenMPI peer there), each figure the median over rounds, and the sweep's
// table and JSON. One run of one collective is collectives_bench.cc's.
#include "bench/bench_util.h"
#include "bench/collectives_bench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <memory>
#include <new>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "dtrain/comm/all_to_all.h"
#include "dtrain/comm/collectives.h"
#include "dtrain/comm/hierarchical.h"
#include "dtrain/core/buffer.h"
#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/core/units.h"

namespace dtrain::bench {

using comm::Algorithm;
using comm::CollectiveOp;

std::string_view peer_op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce:
      return "allreduce";
    case CollectiveOp::reduce_scatter:
      return "reduce_scatter";
    case CollectiveOp::all_gather:
      return "allgather";
    default:
      return "";
  }
}

namespace {

// The columns of a sweep's table: each algorithm, then the hierarchical all-reduce if asked for.
std::vector<std::pair<Algorithm, bool>> sweep_columns(const CollectiveSweepConfig& config) {
  std::vector<std::pair<Algorithm, bool>> columns;
  for (Algorithm a : config.algorithms) columns.emplace_back(a, false);
  if (config.hierarchical) columns.emplace_back(Algorithm::ring, true);
  return columns;
}

// The OpenMPI peer (bench/peers/mpi_allreduce.c): built once into a temporary directory,
// removed with this object; run() starts it under mpirun for one op, np and size.
class MpiPeer {
 public:
  explicit MpiPeer(const std::string& source) {
    DTRAIN_CHECK(std::filesystem::is_regular_file(source), "--peer ", source,
                 ": no such file (give the OpenMPI peer's source, mpi_allreduce.c)");
    const std::string mpicc = find_program("mpicc");
    mpirun_ = find_program("mpirun");
    DTRAIN_CHECK(!mpicc.empty(), "--peer ", source,
                 ": mpicc (OpenMPI's compiler wrapper) is not on PATH; install OpenMPI "
                 "(Debian: openmpi-bin libopenmpi-dev)");
    DTRAIN_CHECK(!mpirun_.empty(), "--peer ", source, ": mpirun is not on PATH; install OpenMPI");
    std::string dir_template =
        (std::filesystem::temp_directory_path() / "dtrain-mpi-peer-XXXXXX").string();
    DTRAIN_CHECK(::mkdtemp(dir_template.data()) != nullptr, "--peer ", source,
                 ": could not make a temporary directory to build it in (", dir_template, ")");
    dir_ = dir_template;
    binary_ = (std::filesystem::path(dir_) / "mpi_allreduce").string();
    // -lm after the source: Debian links with --as-needed.
    const std::string compile =
        str(shell_quote(mpicc), " -O2 ", shell_quote(source), " -o ", shell_quote(binary_), " -lm");
    const CommandResult built = run_command(compile);
    if (!built.started || built.exit_code != 0) {
      remove_dir();
      DTRAIN_CHECK(false, "--peer ", source, ": compiling it failed (", compile, "):\n",
                   built.output);
    }
  }
  MpiPeer(const MpiPeer&) = delete;
  MpiPeer& operator=(const MpiPeer&) = delete;
  ~MpiPeer() { remove_dir(); }

  // The peer's time and busbw for `op` on `np` processes and S = `bytes`, its trials as ours.
  // Sets `library` from the peer's header line.
  PeerSweepRow run(CollectiveOp op, int np, int64_t bytes, int trials, double trial_seconds,
                   std::string& library) const {
    // As root OpenMPI refuses to start without --allow-run-as-root.
    const std::string command = str(shell_quote(mpirun_), " -np ", np, " --oversubscribe",
                                    ::geteuid() == 0 ? " --allow-run-as-root " : " ",
                                    shell_quote(binary_), " -o ", peer_op_name(op), " -b ", bytes,
                                    " -e ", bytes, " -n ", trials, " -s ", fixed(trial_seconds, 6));
    const CommandResult ran = run_command(command);
    DTRAIN_CHECK(ran.started && ran.exit_code == 0, "--peer: ", command, " failed (exit ",
                 ran.exit_code, "):\n", ran.output);
    PeerSweepRow row;
    row.world = np;
    row.bytes = bytes;
    std::istringstream lines(ran.output);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("bench=mpi ", 0) != 0) continue;
      const size_t lib = line.find("library=\"");
      if (lib != std::string::npos) {
        const size_t from = lib + 9;
        library = line.substr(from, line.find_first_of(",\"", from) - from);
      }
      if (field(line, "op") != peer_op_name(op) || field(line, "bytes") != std::to_string(bytes)) {
        continue;
      }
      DTRAIN_CHECK(field(line, "check") == "ok", "--peer: OpenMPI's ", peer_op_name(op), " on ", np,
                   " processes of ", bytes, " bytes gave a wrong result: ", line);
      row.measured = true;
      row.time_us = std::stod(field(line, "time_us"));
      row.busbw_gbps = std::stod(field(line, "busbw_GBps"));
    }
    DTRAIN_CHECK(row.measured, "--peer: no result line for ", bytes, " bytes from ", command, ":\n",
                 ran.output);
    return row;
  }

 private:
  void remove_dir() {
    if (dir_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    dir_.clear();
  }

  std::string mpirun_, dir_, binary_;
};

// The peer's block collectives skip sizes whose float count np does not divide.
bool peer_runs(int64_t bytes, int world) {
  return (bytes / 4) % world == 0;
}

// One round's figure of one (world, size, column).
CollectiveRunReport measure_point(const CollectiveSweepConfig& sweep, int world, int64_t bytes,
                                  Algorithm algo, bool hierarchical) {
  CollectiveRunConfig c;
  c.ranks_per_node = sweep.ranks_per_node;
  c.hierarchical = hierarchical;
  c.backend = sweep.backend;
  c.ranks = world;
  c.bytes = bytes;
  c.op = sweep.op;
  c.variable_counts = sweep.variable_counts;
  c.algorithm = algo;
  c.trials = sweep.trials;
  c.trial_seconds = sweep.trial_seconds;
  c.warmup = 1;
  CollectiveRunReport r = run_collective(c);
  DTRAIN_CHECK(!r.reporter || r.verified, "bench collectives: ", op_label(c), " ",
               algorithm_label(c, algo), " on ", world, " ranks of ", bytes,
               " bytes gave a wrong result");
  return r;
}

// A row's reported figures from its rounds: the median time, and busbw from that time.
void finish_row(CollectiveSweepRow& row, CollectiveOp op) {
  row.time_us = median(row.round_time_us);
  row.busbw_gbps = row.time_us > 0 ? static_cast<double>(row.bytes) / (row.time_us * 1e3) *
                                         plan::bus_bandwidth_factor(op, row.world)
                                   : 0;
}

std::unique_ptr<MpiPeer> make_peer(const CollectiveSweepConfig& sweep) {
  if (sweep.peer.empty()) return nullptr;
  DTRAIN_CHECK(sweep.backend == comm::Backend::threads,
               "--peer needs --backend threads (the sweep starts the peer's mpirun itself)");
  DTRAIN_CHECK(!peer_op_name(sweep.op).empty(), "--peer: the OpenMPI peer has no ",
               comm::name(sweep.op), " (it runs all_reduce, reduce_scatter and all_gather)");
  return std::make_unique<MpiPeer>(sweep.peer);
}

}  // namespace

CollectiveSweepReport run_collective_sweep(CollectiveSweepConfig config,
                                           const SweepRowDone& row_done) {
  if (config.sizes.empty()) {
    for (int64_t s = 4 << 10; s <= int64_t{256} << 20; s *= 4) config.sizes.push_back(s);
  }
  DTRAIN_CHECK(config.rounds >= 1, "--rounds must be at least 1, got ", config.rounds);
  CollectiveSweepReport report;
  report.config = std::move(config);
  const CollectiveSweepConfig& sweep = report.config;
  const std::unique_ptr<MpiPeer> peer = make_peer(sweep);
  report.memcpy_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto columns = sweep_columns(sweep);
  // Rows in order (world, size, column), made in round 1 and given one time per round.
  for (int round = 0; round < sweep.rounds; ++round) {
    const bool last = round + 1 == sweep.rounds;
    report.round_memcpy_gbps.push_back(measure_memcpy_gbps(kSweepMemcpyBytes));
    report.round_memcpy_all_threads_gbps.push_back(
        measure_memcpy_all_threads_gbps(report.memcpy_threads, kSweepMemcpyBytes));
    report.memcpy_gbps = median(report.round_memcpy_gbps);
    report.memcpy_all_threads_gbps = median(report.round_memcpy_all_threads_gbps);
    size_t row_index = 0, peer_index = 0;
    for (int world : sweep.worlds) {
      for (int64_t bytes : sweep.sizes) {
        for (const auto& [algo, hierarchical] : columns) {
          const CollectiveRunReport r = measure_point(sweep, world, bytes, algo, hierarchical);
          report.reporter = r.reporter;
          if (!r.reporter) continue;
          if (round == 0) {
            CollectiveSweepRow row;
            row.world = world;
            row.bytes = bytes;
            row.algorithm = algo;
            row.hierarchical = hierarchical;
            row.max_inter_node_bytes = algo == Algorithm::native ? -1 : r.max_inter_node_bytes;
            row.mean_inter_node_bytes = algo == Algorithm::native ? -1.0 : r.mean_inter_node_bytes;
            report.rows.push_back(std::move(row));
          }
          CollectiveSweepRow& row = report.rows[row_index++];
          row.round_time_us.push_back(r.time_us);
          if (last) finish_row(row, sweep.op);
        }
        if (peer) {
          if (round == 0) {
            PeerSweepRow fresh;
            fresh.world = world;
            fresh.bytes = bytes;
            report.peer_rows.push_back(std::move(fresh));
          }
          PeerSweepRow& p = report.peer_rows[peer_index++];
          if (peer_runs(bytes, world)) {
            const PeerSweepRow once = peer->run(sweep.op, world, bytes, sweep.trials,
                                                sweep.trial_seconds, report.peer_library);
            p.measured = true;
            p.round_time_us.push_back(once.time_us);
            p.round_busbw_gbps.push_back(once.busbw_gbps);
            p.time_us = median(p.round_time_us);
            p.busbw_gbps = median(p.round_busbw_gbps);
          }
        }
        if (report.reporter && row_done) row_done(report, round, world, bytes);
      }
    }
  }
  return report;
}

namespace {

const PeerSweepRow* find_peer(const CollectiveSweepReport& r, int world, int64_t bytes) {
  for (const PeerSweepRow& p : r.peer_rows) {
    if (p.world == world && p.bytes == bytes && p.measured) return &p;
  }
  return nullptr;
}

}  // namespace

void print_sweep_header(const CollectiveSweepReport& r, std::ostream& out) {
  const CollectiveSweepConfig& c = r.config;
  out << "bench collectives: " << (c.variable_counts ? "all_to_all_v" : comm::name(c.op))
      << " on the " << comm::name(c.backend)
      << " backend, busbw (GB/s, nccl-tests definition) and busbw / memcpy\n"
      << "memcpy bandwidth measured in this run: " << std::fixed << std::setprecision(2)
      << r.memcpy_gbps << " GB/s (one thread), " << r.memcpy_all_threads_gbps << " GB/s (all "
      << r.memcpy_threads << " hardware threads at once); " << format_bytes(kSweepMemcpyBytes)
      << " buffers per thread, bytes copied per second\n";
  out.unsetf(std::ios::fixed);
  out << "each time: median over " << c.rounds << " interleaved round" << (c.rounds == 1 ? "" : "s")
      << " of the median of " << c.trials << " trials (" << c.trial_seconds
      << " s each); ratio = busbw / one thread's memcpy, ratio all = busbw / all threads' memcpy\n";
  if (!c.peer.empty()) {
    out << "mpi: OpenMPI (" << (r.peer_library.empty() ? "library unknown" : r.peer_library)
        << ") through the peer " << c.peer << ", mpirun -np N, the same trials; "
        << "/ mpi = our time / OpenMPI's time (<= 1: as fast or faster)\n";
  }
  if (c.ranks_per_node > 0) {
    out << c.ranks_per_node << " ranks per node; \"inter B\": the most bytes one rank "
        << "sent across nodes in one call (native: MPI's own, not counted)\n";
  }
}

void print_sweep_world(const CollectiveSweepReport& r, int world, std::ostream& out) {
  const bool peer = !r.config.peer.empty();
  out << "\nN = " << world << "\n" << std::left << std::setw(10) << "size";
  for (const auto& [a, hierarchical] : sweep_columns(r.config)) {
    const std::string label = hierarchical ? "hier" : std::string(comm::name(a));
    out << std::right << std::setw(12) << (label + " us") << std::setw(10) << "busbw"
        << std::setw(8) << "ratio" << std::setw(10) << "ratio all";
    if (peer) out << std::setw(8) << "/ mpi";
    if (r.config.ranks_per_node > 0) out << std::setw(12) << "inter B";
  }
  if (peer) out << std::setw(12) << "mpi us" << std::setw(10) << "busbw";
  out << "\n";
}

void print_sweep_progress(const CollectiveSweepReport& r, int round, int world, int64_t bytes,
                          std::ostream& out) {
  out << "round " << round + 1 << " of " << r.config.rounds << ": " << world << " ranks, "
      << format_bytes(static_cast<double>(bytes)) << ":";
  const char* separator = " ";
  for (const CollectiveSweepRow& row : r.rows) {
    if (row.world != world || row.bytes != bytes) continue;
    if (static_cast<int>(row.round_time_us.size()) <= round) continue;
    out << separator
        << (row.hierarchical ? std::string("hierarchical") : std::string(comm::name(row.algorithm)))
        << " " << fixed(row.round_time_us[static_cast<size_t>(round)], 1) << " us";
    separator = ", ";
  }
  const PeerSweepRow* p = find_peer(r, world, bytes);
  if (p != nullptr && static_cast<int>(p->round_time_us.size()) > round) {
    out << separator << "OpenMPI " << fixed(p->round_time_us[static_cast<size_t>(round)], 1)
        << " us";
  }
  out << "\n";
}

void print_sweep_row(const CollectiveSweepReport& r, int world, int64_t bytes, std::ostream& out) {
  const bool peer = !r.config.peer.empty();
  const PeerSweepRow* p = find_peer(r, world, bytes);
  out << std::left << std::setw(10) << format_bytes(static_cast<double>(bytes)) << std::fixed;
  for (const auto& [a, hierarchical] : sweep_columns(r.config)) {
    for (const CollectiveSweepRow& row : r.rows) {
      if (row.world != world || row.bytes != bytes || row.algorithm != a ||
          row.hierarchical != hierarchical) {
        continue;
      }
      out << std::right << std::setprecision(1) << std::setw(12) << row.time_us
          << std::setprecision(3) << std::setw(10) << row.busbw_gbps << std::setw(8)
          << row.busbw_gbps / r.memcpy_gbps << std::setw(10)
          << row.busbw_gbps / r.memcpy_all_threads_gbps;
      if (peer) {
        out << std::setw(8) << (p != nullptr ? fixed(row.time_us / p->time_us, 2) : "-");
      }
      if (r.config.ranks_per_node > 0) {
        out << std::setw(12)
            << (row.max_inter_node_bytes < 0 ? std::string("-")
                                             : std::to_string(row.max_inter_node_bytes));
      }
    }
  }
  if (peer) {
    out << std::right << std::setw(12) << (p != nullptr ? fixed(p->time_us, 1) : "-")
        << std::setw(10) << (p != nullptr ? fixed(p->busbw_gbps, 3) : "-");
  }
  out << "\n";
  out.unsetf(std::ios::fixed);
}

void print_report(const CollectiveSweepReport& r, std::ostream& out) {
  print_sweep_header(r, out);
  for (int world : r.config.worlds) {
    print_sweep_world(r, world, out);
    for (int64_t bytes : r.config.sizes) print_sweep_row(r, world, bytes, out);
  }
}

nlohmann::json to_json(const CollectiveSweepReport& r) {
  const bool peer = !r.config.peer.empty();
  nlohmann::json rows = nlohmann::json::array();
  for (const CollectiveSweepRow& row : r.rows) {
    nlohmann::json j = {
        {"np", row.world},
        {"bytes", row.bytes},
        {"algorithm",
         row.hierarchical ? std::string("hierarchical") : std::string(comm::name(row.algorithm))},
        {"max_inter_node_bytes", row.max_inter_node_bytes},
        {"mean_inter_node_bytes", row.mean_inter_node_bytes},
        {"time_us", row.time_us},
        {"round_time_us", row.round_time_us},
        {"busbw_GBps", row.busbw_gbps},
        {"busbw_over_memcpy", row.busbw_gbps / r.memcpy_gbps},
        {"busbw_over_memcpy_all_threads", row.busbw_gbps / r.memcpy_all_threads_gbps}};
    if (peer) {
      // null where the peer does not run this size (S / 4 not divisible by np).
      const PeerSweepRow* p = find_peer(r, row.world, row.bytes);
      j["peer_time_us"] = p != nullptr ? nlohmann::json(p->time_us) : nlohmann::json();
      j["peer_busbw_GBps"] = p != nullptr ? nlohmann::json(p->busbw_gbps) : nlohmann::json();
      j["time_over_peer"] =
          p != nullptr ? nlohmann::json(row.time_us / p->time_us) : nlohmann::json();
    }
    rows.push_back(std::move(j));
  }
  nlohmann::json j = {{"op", r.config.variable_counts ? std::string("all_to_all_v")
                                                      : std::string(comm::name(r.config.op))},
                      {"backend", comm::name(r.config.backend)},
                      {"rounds", r.config.rounds},
                      {"trials", r.config.trials},
                      {"trial_seconds", r.config.trial_seconds},
                      {"memcpy_bytes", kSweepMemcpyBytes},
                      {"memcpy_GBps", r.memcpy_gbps},
                      {"memcpy_all_threads_GBps", r.memcpy_all_threads_gbps},
                      {"memcpy_threads", r.memcpy_threads},
                      {"round_memcpy_GBps", r.round_memcpy_gbps},
                      {"round_memcpy_all_threads_GBps", r.round_memcpy_all_threads_gbps},
                      {"ranks_per_node", r.config.ranks_per_node},
                      {"rows", rows}};
  if (peer) {
    nlohmann::json peer_rows = nlohmann::json::array();
    for (const PeerSweepRow& p : r.peer_rows) {
      peer_rows.push_back(
          {{"np", p.world},
           {"bytes", p.bytes},
           {"measured", p.measured},
           {"time_us", p.measured ? nlohmann::json(p.time_us) : nlohmann::json()},
           {"busbw_GBps", p.measured ? nlohmann::json(p.busbw_gbps) : nlohmann::json()},
           {"round_time_us", p.round_time_us},
           {"round_busbw_GBps", p.round_busbw_gbps}});
    }
    j["peer"] = {{"source", r.config.peer},
                 {"library", r.peer_library},
                 {"op", peer_op_name(r.config.op)},
                 {"rows", peer_rows}};
  }
  return j;
}

}  // namespace dtrain::bench
