// run_collective: verify once against the closed form, count one call's traffic, then time
// trials of back-to-back calls (the slowest rank's mean per call), as the OpenMPI peer in the
// shared peers folder does, so the two sets of figures compare directly.
// The sweep over worlds, sizes and algorithms beside the peer is collectives_sweep.cc's.
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

}  // namespace dtrain::bench
