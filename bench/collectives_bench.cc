// run_collective: verify once against the closed form, count one call's traffic, then time
// trials of back-to-back calls (the slowest rank's mean per call), as the OpenMPI peer in the
// shared peers folder does, so the two sets of figures compare directly.
#include "bench/collectives_bench.h"
#include "bench/bench_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <memory>
#include <ostream>
#include <string>
#include <utility>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/hierarchical.h"
#include "dtrain/core/buffer.h"
#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/core/units.h"

namespace dtrain::bench {
namespace {

using comm::Algorithm;
using comm::CollectiveOp;
using comm::Communicator;

// Input and output element counts of one rank for a collective of S = count elements.
struct Shapes {
  int64_t in = 0, out = 0;
};
Shapes shapes(CollectiveOp op, int64_t count, int world, int rank) {
  const int64_t chunk = comm::chunk_of(count, world, rank).count;
  switch (op) {
    case CollectiveOp::reduce_scatter:
      return {count, chunk};
    case CollectiveOp::all_gather:
      return {chunk, count};
    default:
      return {count, count};
  }
}

comm::Traffic run_once(Communicator& comm, const CollectiveRunConfig& c, int64_t count, float* in,
                       float* out, comm::NodeGroups* groups = nullptr) {
  if (c.hierarchical) return comm::hierarchical_all_reduce(*groups, in, count, comm::ReduceOp::sum);
  switch (c.op) {
    case CollectiveOp::all_reduce:
      return comm::all_reduce(comm, in, count, comm::ReduceOp::sum, c.algorithm);
    case CollectiveOp::broadcast:
      return comm::broadcast(comm, in, count, c.root, c.algorithm);
    case CollectiveOp::reduce:
      return comm::reduce(comm, in, out, count, comm::ReduceOp::sum, c.root, c.algorithm);
    case CollectiveOp::reduce_scatter:
      return comm::reduce_scatter(comm, in, out, count, comm::ReduceOp::sum, c.algorithm);
    case CollectiveOp::all_gather:
      return comm::all_gather(comm, in, out, count, c.algorithm);
  }
  return {};
}

// Rank r contributes r + 1 at every position it owns: every result has a closed form.
bool verify(const CollectiveRunConfig& c, int64_t count, int world, int rank, const float* in,
            const float* out) {
  const comm::Chunk mine = comm::chunk_of(count, world, rank);
  const float sum = static_cast<float>(world * (world + 1) / 2);
  auto all_equal = [](const float* p, int64_t n, float v) {
    return std::all_of(p, p + n, [v](float x) { return x == v; });
  };
  switch (c.op) {
    case CollectiveOp::all_reduce:
      return all_equal(in, count, sum);
    case CollectiveOp::broadcast:
      return all_equal(in, count, static_cast<float>(c.root + 1));
    case CollectiveOp::reduce:
      return rank != c.root || all_equal(out, count, sum);
    case CollectiveOp::reduce_scatter:
      return all_equal(out, mine.count, sum);
    case CollectiveOp::all_gather:
      for (int q = 0; q < world; ++q) {
        const comm::Chunk ch = comm::chunk_of(count, world, q);
        if (!all_equal(out + ch.offset, ch.count, static_cast<float>(q + 1))) return false;
      }
      return true;
  }
  return false;
}

// Bytes this rank has sent so far, by link class, through whatever carries the measured op.
comm::LinkBytes sent_by_link(const Communicator& comm, const comm::NodeGroups* groups,
                             const comm::NodeTopology& topology) {
  return groups ? groups->link_bytes_sent(topology) : comm::link_bytes_sent(comm, topology);
}

}  // namespace

std::string algorithm_label(const CollectiveRunConfig& config, Algorithm resolved) {
  return config.hierarchical ? "hierarchical" : std::string(comm::name(resolved));
}

double buffer_bytes(const CollectiveRunConfig& config) {
  const int ranks_here = config.backend == comm::Backend::threads ? config.ranks : 1;
  return 2.0 * static_cast<double>(config.bytes) * ranks_here;
}

CollectiveRunReport run_collective(const CollectiveRunConfig& config) {
  DTRAIN_CHECK(config.ranks >= 1 && config.ranks <= 1024,
               "--ranks must be between 1 and 1024, got ", config.ranks);
  DTRAIN_CHECK(config.bytes >= 0, "--size must not be negative");
  DTRAIN_CHECK(config.bytes % 4 == 0, "--size ", config.bytes,
               " bytes is not a whole number of float32 elements (a multiple of 4)");
  DTRAIN_CHECK(config.root >= 0 && config.root < config.ranks, "--root ", config.root,
               " is outside 0..", config.ranks - 1);
  DTRAIN_CHECK(config.trials >= 1, "--trials must be >= 1, got ", config.trials);
  DTRAIN_CHECK(config.warmup >= 0, "--warmup must be >= 0, got ", config.warmup);
  DTRAIN_CHECK(config.ranks_per_node >= 0, "--ranks-per-node must be >= 1, got ",
               config.ranks_per_node);
  DTRAIN_CHECK(config.ranks_per_node == 0 || config.ranks % config.ranks_per_node == 0,
               "--ranks-per-node ", config.ranks_per_node, " does not divide the ", config.ranks,
               " ranks into whole nodes");
  DTRAIN_CHECK(!config.hierarchical || config.op == CollectiveOp::all_reduce,
               "the hierarchical algorithm is an all_reduce (got --op ", comm::name(config.op),
               ")");
  DTRAIN_CHECK(!config.hierarchical || config.ranks_per_node > 0,
               "the hierarchical algorithm needs --ranks-per-node");

  CollectiveRunReport report;
  report.config = config;
  report.count = config.bytes / 4;
  report.algorithm = comm::choose_algorithm(config.algorithm, config.bytes, config.ranks);
  report.ranks.resize(static_cast<size_t>(config.ranks));
  bool all_verified = false;
  std::vector<double> trial_us;
  int iterations = 1;
  CollectiveRunConfig c = config;
  c.algorithm = report.algorithm;

  comm::run_on_backend(
      config.backend, config.ranks,
      [&](Communicator& group) {
        const int r = group.rank(), n = group.size();
        // Timing agreements travel on their own group so they never mix with the measured op.
        std::vector<int> all(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) all[i] = i;
        auto control = group.subgroup(all, "timing");
        const Shapes s = shapes(c.op, report.count, n, r);
        // Link classes: ranks_per_node 0 puts everyone on one node.
        const comm::NodeTopology topology =
            c.ranks_per_node > 0 ? comm::NodeTopology(group.world_size(), c.ranks_per_node)
                                 : comm::NodeTopology(group.world_size(), group.world_size());
        std::unique_ptr<comm::NodeGroups> groups;
        if (c.hierarchical) {
          groups = std::make_unique<comm::NodeGroups>(comm::make_node_groups(group, topology));
        }
        Buffer<float> in(s.in, MemoryTag::communication, nullptr);
        Buffer<float> out(s.out, MemoryTag::communication, nullptr);

        // 1. One verified call, whose traffic is the measured figure. Every rank's counters
        //    and verdict are gathered (under MPI the ranks are other processes).
        std::fill(in.data(), in.data() + s.in, static_cast<float>(r + 1));
        const comm::LinkBytes link_before = sent_by_link(group, groups.get(), topology);
        const comm::Traffic t =
            run_once(group, c, report.count, in.data(), out.data(), groups.get());
        const comm::LinkBytes link = sent_by_link(group, groups.get(), topology) - link_before;
        const bool ok = verify(c, report.count, n, r, in.data(), out.data());
        constexpr int kFields = 7;
        int64_t mine[kFields] = {t.steps,         t.bytes_sent,    t.bytes_received,
                                 t.messages_sent, link.intra_node, link.inter_node,
                                 ok ? 1 : 0};
        std::vector<int64_t> everyone(static_cast<size_t>(kFields * n));
        comm::all_gather(*control, mine, everyone.data(), kFields * n, comm::Algorithm::naive);
        // Only rank 0 fills the shared report (it has every rank's figures): under the threads
        // backend the ranks share `report`, and concurrent writes would race.
        if (r == 0) {
          all_verified = true;
          const int rpn = c.ranks_per_node > 0 ? c.ranks_per_node : n;
          for (int q = 0; q < n; ++q) {
            RankTraffic& rt = report.ranks[q];
            const int64_t* e = everyone.data() + kFields * q;
            rt.rank = q;
            rt.measured = {e[0], e[1], e[2], e[3]};
            rt.link = {e[4], e[5]};
            if (c.hierarchical) {
              rt.link_formula =
                  plan::hierarchical_all_reduce_link_traffic(report.count, 4, rpn, n / rpn, q);
              // Rings send and receive alike when the sizes divide evenly (the bench's do).
              const double b = static_cast<double>(rt.link_formula.total_bytes());
              rt.formula = {rt.link_formula.steps, b, b};
            } else if (c.algorithm != Algorithm::native) {
              rt.formula = plan::collective_traffic(c.op, c.algorithm, static_cast<double>(c.bytes),
                                                    n, q, c.root);
              if (c.op == CollectiveOp::all_reduce && c.algorithm == Algorithm::ring) {
                rt.link_formula =
                    plan::flat_ring_all_reduce_link_traffic(report.count, 4, rpn, n / rpn, q);
              }
            }
            all_verified = all_verified && e[6] == 1;
          }
        }

        // 2. Timing on zeros (sums of zeros stay zeros however often they run).
        in.zero();
        for (int i = 0; i < c.warmup; ++i) {
          run_once(group, c, report.count, in.data(), out.data(), groups.get());
        }
        control->barrier();
        Stopwatch probe;
        run_once(group, c, report.count, in.data(), out.data(), groups.get());
        float probe_us = static_cast<float>(probe.elapsed_us());
        comm::all_reduce(*control, &probe_us, 1, comm::ReduceOp::max);
        const int64_t iters = std::clamp<int64_t>(
            static_cast<int64_t>(c.trial_seconds * 1e6 / std::max<double>(probe_us, 0.01)), 1,
            100000);
        for (int trial = 0; trial < c.trials; ++trial) {
          control->barrier();
          Stopwatch clock;
          for (int64_t i = 0; i < iters; ++i) {
            run_once(group, c, report.count, in.data(), out.data(), groups.get());
          }
          float mean_us = static_cast<float>(clock.elapsed_us() / static_cast<double>(iters));
          comm::all_reduce(*control, &mean_us, 1, comm::ReduceOp::max);
          if (r == 0) trial_us.push_back(mean_us);
        }
        if (r == 0) iterations = static_cast<int>(iters);
      },
      comm::LaunchOptions{config.timeout_s}, &report.reporter);
  if (!report.reporter) return report;  // an MPI process that does not print

  report.verified = all_verified;
  report.iterations_per_trial = iterations;
  report.time_us = median(trial_us);
  report.best_time_us = *std::min_element(trial_us.begin(), trial_us.end());
  report.algbw_gbps =
      report.time_us > 0 ? static_cast<double>(config.bytes) / (report.time_us * 1e3) : 0;
  report.busbw_gbps = report.algbw_gbps * plan::bus_bandwidth_factor(config.op, config.ranks);
  for (const RankTraffic& t : report.ranks) {
    report.max_inter_node_bytes = std::max(report.max_inter_node_bytes, t.link.inter_node);
    report.mean_inter_node_bytes +=
        static_cast<double>(t.link.inter_node) / static_cast<double>(report.ranks.size());
  }
  return report;
}

void print_report(const CollectiveRunReport& r, std::ostream& out) {
  const CollectiveRunConfig& c = r.config;
  out << comm::name(c.op) << " of " << format_bytes(static_cast<double>(c.bytes)) << " (" << r.count
      << " float32) on " << c.ranks << " ranks (" << comm::name(c.backend)
      << " backend), algorithm " << algorithm_label(c, r.algorithm) << ", result "
      << (r.verified ? "verified" : "WRONG") << "\n\n";
  out << std::left << std::setw(6) << "rank" << std::right << std::setw(8) << "steps"
      << std::setw(10) << "formula" << std::setw(16) << "bytes sent" << std::setw(16) << "formula"
      << std::setw(16) << "bytes recvd" << std::setw(16) << "formula"
      << "\n";
  out << std::fixed << std::setprecision(0);
  if (r.algorithm == Algorithm::native) {
    out << "(native: MPI moves the bytes itself; the communicator does not see them, and the "
           "planner does not model MPI's internal algorithm)\n";
  }
  for (const RankTraffic& t : r.ranks) {
    out << std::left << std::setw(6) << t.rank << std::right << std::setw(8) << t.measured.steps
        << std::setw(10) << t.formula.steps << std::setw(16) << t.measured.bytes_sent
        << std::setw(16) << t.formula.bytes_sent << std::setw(16) << t.measured.bytes_received
        << std::setw(16) << t.formula.bytes_received << "\n";
  }
  if (c.ranks_per_node > 0 && r.algorithm != Algorithm::native) {
    out << "\nbytes sent by link class (" << c.ranks_per_node << " ranks per node)\n"
        << std::left << std::setw(6) << "rank" << std::right << std::setw(16) << "intra-node"
        << std::setw(16) << "formula" << std::setw(16) << "inter-node" << std::setw(16) << "formula"
        << "\n";
    const bool modeled =
        c.hierarchical || (c.op == CollectiveOp::all_reduce && r.algorithm == Algorithm::ring);
    for (const RankTraffic& t : r.ranks) {
      out << std::left << std::setw(6) << t.rank << std::right << std::setw(16) << t.link.intra_node
          << std::setw(16) << (modeled ? std::to_string(t.link_formula.intra_node_bytes) : "-")
          << std::setw(16) << t.link.inter_node << std::setw(16)
          << (modeled ? std::to_string(t.link_formula.inter_node_bytes) : "-") << "\n";
    }
  }
  out << std::setprecision(2) << "\ntime " << r.time_us << " us (median of " << c.trials
      << " trials x " << r.iterations_per_trial << " calls; best " << r.best_time_us
      << " us)\nalgbw " << std::setprecision(3) << r.algbw_gbps << " GB/s   busbw " << r.busbw_gbps
      << " GB/s   (GB = 1e9 bytes; busbw = algbw * " << std::setprecision(4)
      << plan::bus_bandwidth_factor(c.op, c.ranks) << ")\n";
  out.unsetf(std::ios::fixed);
}

nlohmann::json to_json(const CollectiveRunReport& r) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankTraffic& t : r.ranks) {
    ranks.push_back({{"rank", t.rank},
                     {"steps", t.measured.steps},
                     {"bytes_sent", t.measured.bytes_sent},
                     {"bytes_received", t.measured.bytes_received},
                     {"messages_sent", t.measured.messages_sent},
                     {"formula_steps", t.formula.steps},
                     {"formula_bytes_sent", t.formula.bytes_sent},
                     {"formula_bytes_received", t.formula.bytes_received},
                     {"intra_node_bytes_sent", t.link.intra_node},
                     {"inter_node_bytes_sent", t.link.inter_node},
                     {"formula_intra_node_bytes", t.link_formula.intra_node_bytes},
                     {"formula_inter_node_bytes", t.link_formula.inter_node_bytes}});
  }
  return {{"op", comm::name(r.config.op)},
          {"backend", comm::name(r.config.backend)},
          {"algorithm", algorithm_label(r.config, r.algorithm)},
          {"ranks_per_node", r.config.ranks_per_node},
          {"max_inter_node_bytes", r.max_inter_node_bytes},
          {"mean_inter_node_bytes", r.mean_inter_node_bytes},
          {"ranks", r.config.ranks},
          {"bytes", r.config.bytes},
          {"count", r.count},
          {"verified", r.verified},
          {"per_rank", ranks},
          {"trials", r.config.trials},
          {"iterations_per_trial", r.iterations_per_trial},
          {"time_us", r.time_us},
          {"best_time_us", r.best_time_us},
          {"algbw_GBps", r.algbw_gbps},
          {"busbw_GBps", r.busbw_gbps},
          {"bus_factor", plan::bus_bandwidth_factor(r.config.op, r.config.ranks)}};
}

double measure_memcpy_gbps(int64_t bytes) {
  Buffer<char> a(bytes, MemoryTag::communication, nullptr);
  Buffer<char> b(bytes, MemoryTag::communication, nullptr);
  std::memset(a.data(), 1, static_cast<size_t>(bytes));
  std::memcpy(b.data(), a.data(), static_cast<size_t>(bytes));  // warm up, fault pages in
  std::vector<double> seconds;
  for (int i = 0; i < 15; ++i) {
    Stopwatch clock;
    std::memcpy(b.data(), a.data(), static_cast<size_t>(bytes));
    seconds.push_back(clock.elapsed_s());
  }
  return static_cast<double>(bytes) / median(seconds) / 1e9;
}

namespace {

// The columns of a sweep's table: each algorithm, then the hierarchical all-reduce if asked for.
std::vector<std::pair<Algorithm, bool>> sweep_columns(const CollectiveSweepConfig& config) {
  std::vector<std::pair<Algorithm, bool>> columns;
  for (Algorithm a : config.algorithms) columns.emplace_back(a, false);
  if (config.hierarchical) columns.emplace_back(Algorithm::ring, true);
  return columns;
}

}  // namespace

CollectiveSweepReport run_collective_sweep(CollectiveSweepConfig config,
                                           const SweepRowDone& row_done) {
  if (config.sizes.empty()) {
    for (int64_t s = 4 << 10; s <= int64_t{256} << 20; s *= 4) config.sizes.push_back(s);
  }
  CollectiveSweepReport report;
  report.config = std::move(config);
  const CollectiveSweepConfig& sweep = report.config;
  report.memcpy_gbps = measure_memcpy_gbps();
  for (int world : sweep.worlds) {
    for (int64_t bytes : sweep.sizes) {
      for (const auto& [algo, hierarchical] : sweep_columns(sweep)) {
        CollectiveRunConfig c;
        c.ranks_per_node = sweep.ranks_per_node;
        c.hierarchical = hierarchical;
        c.backend = sweep.backend;
        c.ranks = world;
        c.bytes = bytes;
        c.op = sweep.op;
        c.algorithm = algo;
        c.trials = sweep.trials;
        c.trial_seconds = sweep.trial_seconds;
        c.warmup = 1;
        const CollectiveRunReport r = run_collective(c);
        report.reporter = r.reporter;
        if (!r.reporter) continue;
        DTRAIN_CHECK(r.verified, "bench collectives: ", comm::name(sweep.op), " ",
                     algorithm_label(c, algo), " on ", world, " ranks of ", bytes,
                     " bytes gave a wrong result");
        report.rows.push_back({world, bytes, algo, r.time_us, r.busbw_gbps, hierarchical,
                               algo == Algorithm::native ? -1 : r.max_inter_node_bytes,
                               algo == Algorithm::native ? -1.0 : r.mean_inter_node_bytes});
      }
      if (report.reporter && row_done) row_done(report, world, bytes);
    }
  }
  return report;
}

void print_sweep_header(const CollectiveSweepReport& r, std::ostream& out) {
  out << "bench collectives: " << comm::name(r.config.op) << " on the "
      << comm::name(r.config.backend)
      << " backend, busbw (GB/s, nccl-tests definition) and busbw / memcpy\n"
      << "memcpy bandwidth measured in this run: " << std::fixed << std::setprecision(2)
      << r.memcpy_gbps << " GB/s (one thread, 64 MiB buffers, bytes copied per second)\n";
  out.unsetf(std::ios::fixed);
  if (r.config.ranks_per_node > 0) {
    out << r.config.ranks_per_node << " ranks per node; \"inter B\": the most bytes one rank "
        << "sent across nodes in one call (native: MPI's own, not counted)\n";
  }
}

void print_sweep_world(const CollectiveSweepReport& r, int world, std::ostream& out) {
  out << "\nN = " << world << "\n" << std::left << std::setw(10) << "size";
  for (const auto& [a, hierarchical] : sweep_columns(r.config)) {
    const std::string label = hierarchical ? "hier" : std::string(comm::name(a));
    out << std::right << std::setw(12) << (label + " us") << std::setw(10) << "busbw"
        << std::setw(8) << "ratio";
    if (r.config.ranks_per_node > 0) out << std::setw(12) << "inter B";
  }
  out << "\n";
}

void print_sweep_row(const CollectiveSweepReport& r, int world, int64_t bytes, std::ostream& out) {
  out << std::left << std::setw(10) << format_bytes(static_cast<double>(bytes)) << std::fixed;
  for (const auto& [a, hierarchical] : sweep_columns(r.config)) {
    for (const CollectiveSweepRow& row : r.rows) {
      if (row.world != world || row.bytes != bytes || row.algorithm != a ||
          row.hierarchical != hierarchical) {
        continue;
      }
      out << std::right << std::setprecision(1) << std::setw(12) << row.time_us
          << std::setprecision(3) << std::setw(10) << row.busbw_gbps << std::setw(8)
          << row.busbw_gbps / r.memcpy_gbps;
      if (r.config.ranks_per_node > 0) {
        out << std::setw(12)
            << (row.max_inter_node_bytes < 0 ? std::string("-")
                                             : std::to_string(row.max_inter_node_bytes));
      }
    }
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
  nlohmann::json rows = nlohmann::json::array();
  for (const CollectiveSweepRow& row : r.rows) {
    rows.push_back({{"np", row.world},
                    {"bytes", row.bytes},
                    {"algorithm", row.hierarchical ? std::string("hierarchical")
                                                   : std::string(comm::name(row.algorithm))},
                    {"max_inter_node_bytes", row.max_inter_node_bytes},
                    {"mean_inter_node_bytes", row.mean_inter_node_bytes},
                    {"time_us", row.time_us},
                    {"busbw_GBps", row.busbw_gbps},
                    {"busbw_over_memcpy", row.busbw_gbps / r.memcpy_gbps}});
  }
  return {{"op", comm::name(r.config.op)},
          {"backend", comm::name(r.config.backend)},
          {"memcpy_GBps", r.memcpy_gbps},
          {"ranks_per_node", r.config.ranks_per_node},
          {"rows", rows}};
}

}  // namespace dtrain::bench
