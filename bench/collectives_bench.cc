// run_collective: verify once against the closed form, count one call's traffic, then time
// trials of back-to-back calls (the slowest rank's mean per call), as the OpenMPI peer in the
// shared peers folder does, so the two sets of figures compare directly.
// run_collective_sweep: rounds of (memcpy on one thread and on all, then every world x size x
// column, then the peer there), each figure the median over rounds.
#include "bench/collectives_bench.h"
#include "bench/bench_util.h"

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
namespace {

using comm::Algorithm;
using comm::CollectiveOp;
using comm::Communicator;

// Input and output element counts of one rank for a collective of S = count elements.
struct Shapes {
  int64_t in = 0, out = 0;
};
// all_to_all_v's parts on one rank, packed in rank order (the bench's layout).
struct Parts {
  std::vector<comm::Chunk> send, recv;
  int64_t in = 0, out = 0;  // elements
};
Parts parts_of(int64_t count, int world, int rank) {
  Parts p;
  for (int q = 0; q < world; ++q) {
    p.send.push_back({p.in, v_part_count(count / world, world, rank, q)});
    p.in += p.send.back().count;
    p.recv.push_back({p.out, v_part_count(count / world, world, q, rank)});
    p.out += p.recv.back().count;
  }
  return p;
}

Shapes shapes(const CollectiveRunConfig& c, int64_t count, int world, int rank) {
  if (c.variable_counts) {
    const Parts p = parts_of(count, world, rank);
    return {p.in, p.out};
  }
  const int64_t chunk = comm::chunk_of(count, world, rank).count;
  switch (c.op) {
    case CollectiveOp::reduce_scatter:
      return {count, chunk};
    case CollectiveOp::all_gather:
      return {chunk, count};
    default:
      return {count, count};
  }
}

comm::Traffic run_once(Communicator& comm, const CollectiveRunConfig& c, int64_t count, float* in,
                       float* out, const Parts& parts, comm::NodeGroups* groups = nullptr) {
  if (c.hierarchical) return comm::hierarchical_all_reduce(*groups, in, count, comm::ReduceOp::sum);
  if (c.variable_counts) {
    return comm::all_to_all_v(comm, in, std::span<const comm::Chunk>(parts.send), out,
                              std::span<const comm::Chunk>(parts.recv), c.algorithm);
  }
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
    case CollectiveOp::all_to_all:  // S = count: N blocks of count / N
      return comm::all_to_all(comm, in, out, count / comm.size(), c.algorithm);
  }
  return {};
}

// Rank r contributes r + 1 at every position it owns: every result has a closed form. The
// all-to-all's blocks differ (fill_input): block j of rank r holds r * N + j + 1.
void fill_input(const CollectiveRunConfig& c, int64_t count, int world, int rank, float* in,
                int64_t in_count, const Parts& parts) {
  std::fill(in, in + in_count, static_cast<float>(rank + 1));
  if (c.op != CollectiveOp::all_to_all) return;
  if (c.variable_counts) {
    for (int j = 0; j < world; ++j) {
      const comm::Chunk& part = parts.send[j];
      std::fill(in + part.offset, in + part.offset + part.count,
                static_cast<float>(rank * world + j + 1));
    }
    return;
  }
  const int64_t block = count / world;
  for (int j = 0; j < world; ++j) {
    std::fill(in + j * block, in + (j + 1) * block, static_cast<float>(rank * world + j + 1));
  }
}

bool verify(const CollectiveRunConfig& c, int64_t count, int world, int rank, const float* in,
            const float* out, const Parts& parts) {
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
    case CollectiveOp::all_to_all: {  // block q of the output: rank q's block for this rank
      if (c.variable_counts) {
        for (int q = 0; q < world; ++q) {
          const comm::Chunk& part = parts.recv[q];
          if (!all_equal(out + part.offset, part.count, static_cast<float>(q * world + rank + 1))) {
            return false;
          }
        }
        return true;
      }
      const int64_t block = count / world;
      for (int q = 0; q < world; ++q) {
        if (!all_equal(out + q * block, block, static_cast<float>(q * world + rank + 1))) {
          return false;
        }
      }
      return true;
    }
  }
  return false;
}

// plan::all_to_all_v_traffic for rank q of the bench's parts (its row and column in bytes; the
// longest part any rank sends another sets the shared window's segments).
plan::CollectiveTraffic v_formula(Algorithm algo, int64_t count, int world, int q,
                                  int64_t slot_bytes) {
  const int64_t block = count / world;
  std::vector<double> sent, received;
  int64_t longest = 0;
  for (int j = 0; j < world; ++j) {
    sent.push_back(4.0 * static_cast<double>(v_part_count(block, world, q, j)));
    received.push_back(4.0 * static_cast<double>(v_part_count(block, world, j, q)));
    for (int k = 0; k < world; ++k) {
      if (k != j) longest = std::max(longest, v_part_count(block, world, j, k));
    }
  }
  return plan::all_to_all_v_traffic(
      algo, sent, received, q, plan::direct_all_to_all_segments(longest, world, slot_bytes, 4));
}

// Bytes this rank has sent so far, by link class, through whatever carries the measured op.
comm::LinkBytes sent_by_link(const Communicator& comm, const comm::NodeGroups* groups,
                             const comm::NodeTopology& topology) {
  return groups ? groups->link_bytes_sent(topology) : comm::link_bytes_sent(comm, topology);
}

}  // namespace

int64_t v_part_count(int64_t block, int world, int from, int to) {
  if (world > 2 && from == world - 1) return 0;
  return block * 2 * ((from + 2 * to) % (world + 1)) / world;
}

std::string op_label(const CollectiveRunConfig& config) {
  return config.variable_counts ? "all_to_all_v" : std::string(comm::name(config.op));
}

std::string algorithm_label(const CollectiveRunConfig& config, Algorithm resolved) {
  return config.hierarchical ? "hierarchical" : std::string(comm::name(resolved));
}

double buffer_bytes(const CollectiveRunConfig& config) {
  const int ranks_here = config.backend == comm::Backend::threads ? config.ranks : 1;
  // all_to_all_v's parts hold up to 2 blocks each: up to 2 S in and out.
  return (config.variable_counts ? 4.0 : 2.0) * static_cast<double>(config.bytes) * ranks_here;
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
  DTRAIN_CHECK(!config.variable_counts || config.op == CollectiveOp::all_to_all,
               "variable counts are the all-to-all's (all_to_all_v), not ", comm::name(config.op),
               "'s");
  DTRAIN_CHECK(!config.variable_counts || config.algorithm != Algorithm::native,
               "--algo native: all_to_all_v has no native path (use pairwise or direct)");
  DTRAIN_CHECK(config.op != CollectiveOp::all_to_all || config.bytes % (4LL * config.ranks) == 0,
               "--size ", config.bytes, " bytes does not split into ", config.ranks,
               " equal blocks of float32 for all_to_all (use a multiple of 4 x --ranks = ",
               4LL * config.ranks, " bytes)");

  CollectiveRunReport report;
  report.config = config;
  report.count = config.bytes / 4;
  report.algorithm = config.algorithm;  // automatic is resolved by the ranks, on their group
  report.ranks.resize(static_cast<size_t>(config.ranks));
  bool all_verified = false;
  std::vector<double> trial_us;
  int iterations = 1;
  comm::run_on_backend(
      config.backend, config.ranks,
      [&](Communicator& group) {
        const int r = group.rank(), n = group.size();
        // auto: what the collectives themselves would run on this group (direct where it
        // shares memory); every rank resolves it alike.
        CollectiveRunConfig c = config;
        if (c.op == CollectiveOp::all_to_all) {
          c.algorithm = comm::resolve_all_to_all_algorithm(group, c.algorithm);
        } else if (!c.hierarchical) {
          c.algorithm = comm::resolve_algorithm(group, c.algorithm, c.bytes);
        }
        // The direct algorithm through a shared window runs in slot-sized segments.
        const comm::SharedMemoryGroup* shm =
            c.algorithm == Algorithm::direct && n > 1 ? group.shared_memory() : nullptr;
        const int64_t slot_bytes =
            shm == nullptr || shm->shares_address_space() ? 0 : shm->slot_bytes();
        const int64_t slot_elements = slot_bytes / 4;
        // Timing agreements travel on their own group so they never mix with the measured op.
        std::vector<int> all(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) all[i] = i;
        auto control = group.subgroup(all, "timing");
        const Parts parts = c.variable_counts ? parts_of(report.count, n, r) : Parts{};
        const Shapes s = shapes(c, report.count, n, r);
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
        fill_input(c, report.count, n, r, in.data(), s.in, parts);
        const comm::LinkBytes link_before = sent_by_link(group, groups.get(), topology);
        const comm::Traffic t =
            run_once(group, c, report.count, in.data(), out.data(), parts, groups.get());
        const comm::LinkBytes link = sent_by_link(group, groups.get(), topology) - link_before;
        const bool ok = verify(c, report.count, n, r, in.data(), out.data(), parts);
        constexpr int kFields = 7;
        int64_t mine[kFields] = {t.steps,         t.bytes_sent,    t.bytes_received,
                                 t.messages_sent, link.intra_node, link.inter_node,
                                 ok ? 1 : 0};
        std::vector<int64_t> everyone(static_cast<size_t>(kFields * n));
        comm::all_gather(*control, mine, everyone.data(), kFields * n, comm::Algorithm::naive);
        // Only rank 0 fills the shared report (it has every rank's figures): under the threads
        // backend the ranks share `report`, and concurrent writes would race.
        if (r == 0) {
          report.algorithm = c.algorithm;
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
            } else if (c.variable_counts && c.algorithm != Algorithm::native) {
              rt.formula = v_formula(c.algorithm, report.count, n, q, slot_bytes);
            } else if (c.algorithm == Algorithm::direct && c.op == CollectiveOp::all_to_all) {
              rt.formula = plan::all_to_all_traffic(
                  Algorithm::direct, static_cast<double>(c.bytes), n,
                  plan::direct_all_to_all_segments(report.count / n, n, slot_bytes, 4));
            } else if (c.algorithm == Algorithm::direct) {
              rt.formula =
                  plan::direct_traffic(c.op, static_cast<double>(c.bytes), n, q, c.root,
                                       plan::direct_segments(c.op, report.count, n, slot_elements));
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
          run_once(group, c, report.count, in.data(), out.data(), parts, groups.get());
        }
        control->barrier();
        Stopwatch probe;
        run_once(group, c, report.count, in.data(), out.data(), parts, groups.get());
        float probe_us = static_cast<float>(probe.elapsed_us());
        comm::all_reduce(*control, &probe_us, 1, comm::ReduceOp::max);
        const int64_t iters = std::clamp<int64_t>(
            static_cast<int64_t>(c.trial_seconds * 1e6 / std::max<double>(probe_us, 0.01)), 1,
            100000);
        for (int trial = 0; trial < c.trials; ++trial) {
          control->barrier();
          Stopwatch clock;
          for (int64_t i = 0; i < iters; ++i) {
            run_once(group, c, report.count, in.data(), out.data(), parts, groups.get());
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
  out << op_label(c) << " of " << format_bytes(static_cast<double>(c.bytes)) << " (" << r.count
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
  return {{"op", op_label(r.config)},
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

double measure_memcpy_all_threads_gbps(int threads, int64_t bytes) {
  DTRAIN_CHECK(threads >= 1, "memcpy on all threads: need at least one thread, got ", threads);
  constexpr int kCopies = 15;
  std::barrier sync(threads);
  std::atomic<bool> failed{false};
  std::vector<double> seconds(kCopies);
  // Each thread allocates and touches its own buffers (pages local to where it runs); thread 0,
  // the caller, times from the barrier that starts every copy to the one that ends the last.
  auto copier = [&](int t) {
    Buffer<char> a, b;
    try {
      a = Buffer<char>(bytes, MemoryTag::communication, nullptr);
      b = Buffer<char>(bytes, MemoryTag::communication, nullptr);
      std::memset(a.data(), 1, static_cast<size_t>(bytes));
      std::memcpy(b.data(), a.data(), static_cast<size_t>(bytes));  // warm up, fault pages in
    } catch (const std::bad_alloc&) {
      failed = true;
    }
    sync.arrive_and_wait();
    if (failed) return;  // every thread sees it after the barrier: none waits alone
    for (int i = 0; i < kCopies; ++i) {
      sync.arrive_and_wait();
      Stopwatch clock;
      std::memcpy(b.data(), a.data(), static_cast<size_t>(bytes));
      sync.arrive_and_wait();
      if (t == 0) seconds[static_cast<size_t>(i)] = clock.elapsed_s();
    }
  };
  std::vector<std::thread> others;
  for (int t = 1; t < threads; ++t) others.emplace_back(copier, t);
  copier(0);
  for (std::thread& t : others) t.join();
  DTRAIN_CHECK(!failed, "memcpy on all threads: could not allocate 2 x ", bytes,
               " bytes for each of ", threads, " threads");
  return static_cast<double>(bytes) * threads / median(seconds) / 1e9;
}

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
