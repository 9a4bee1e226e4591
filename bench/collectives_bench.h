// Measuring collectives on the threads backend, nccl-tests style: each rank's measured steps
// and bytes beside the planner's formula, then time, algbw and busbw. `dtrain collectives`
// runs one configuration; `dtrain bench collectives` sweeps sizes, world sizes and algorithms
// in interleaved rounds and puts busbw beside this machine's memcpy bandwidth (one thread, and
// every hardware thread at once) measured in the same run, and optionally each time beside
// OpenMPI's (the peer bench/peers/mpi_allreduce.c, built and run by the sweep).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/comm/collective_kind.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/launch.h"
#include "dtrain/comm/topology.h"
#include "dtrain/cost/collective_cost.h"
#include "dtrain/cost/link_traffic.h"

namespace dtrain::bench {

struct CollectiveRunConfig {
  comm::Backend backend = comm::Backend::threads;
  int ranks = 2;
  int64_t bytes = 64 << 20;  // S as nccl-tests defines it (see cost/collective_cost.h)
  comm::CollectiveOp op = comm::CollectiveOp::all_reduce;
  comm::Algorithm algorithm = comm::Algorithm::ring;
  int root = 0;
  int warmup = 2;
  int trials = 5;              // the reported time is the median trial
  double trial_seconds = 0.2;  // each trial runs enough back-to-back calls to last this long
  double timeout_s = 120;
  // Ranks per node (0: all on one node): bytes are split by link class (comm/topology.h).
  int ranks_per_node = 0;
  // All-reduce only: comm/hierarchical.h instead of `algorithm` (needs ranks_per_node).
  bool hierarchical = false;
  // all_to_all only: run all_to_all_v over the uneven parts of v_part_count instead of equal
  // blocks (reported as all_to_all_v).
  bool variable_counts = false;
};

// The parts `dtrain collectives --op all_to_all_v` moves, in float32 elements, for S = N blocks
// of `block`: rank `from` sends rank `to` block x 2((from + 2 to) mod (N+1)) / N elements (0 to 2
// blocks, the mean near one block, some parts empty), except that with N > 2 the last rank sends
// nothing at all (an idle expert rank).
int64_t v_part_count(int64_t block, int world, int from, int to);

// "all_to_all_v" for an all_to_all with variable_counts, else the op's name.
std::string op_label(const CollectiveRunConfig& config);

struct RankTraffic {
  int rank = 0;
  comm::Traffic measured;           // one call, counted by the communicator
  plan::CollectiveTraffic formula;  // plan::collective_traffic for this rank
  comm::LinkBytes link;             // measured bytes sent, by link class
  plan::LinkTraffic link_formula;   // cost/link_traffic.h (all-reduce with ranks_per_node)
};

struct CollectiveRunReport {
  CollectiveRunConfig config;
  comm::Algorithm algorithm = comm::Algorithm::ring;  // resolved from automatic
  int64_t count = 0;                                  // float32 elements
  bool verified = false;                              // result checked against its closed form
  std::vector<RankTraffic> ranks;
  int iterations_per_trial = 0;
  double time_us = 0;       // median over trials of the slowest rank's mean time per call
  double best_time_us = 0;  // fastest trial
  double algbw_gbps = 0;    // S / time, GB = 1e9 bytes
  double busbw_gbps = 0;    // algbw * bus factor (2(N-1)/N for all_reduce)
  bool reporter = true;     // this process prints (under MPI: world rank 0)
  // Inter-node bytes one rank sent in one call: the most any rank sent, and the mean.
  int64_t max_inter_node_bytes = 0;
  double mean_inter_node_bytes = 0;
};

// "hierarchical" or the algorithm's name.
std::string algorithm_label(const CollectiveRunConfig& config, comm::Algorithm resolved);

// Bytes of buffers `config` holds in this process: an input and an output of at most S each
// per rank, for every rank with the threads backend, for this process's one rank under MPI.
double buffer_bytes(const CollectiveRunConfig& config);

// Runs `config` on config.ranks threads. Throws Error on bad configuration.
CollectiveRunReport run_collective(const CollectiveRunConfig& config);
void print_report(const CollectiveRunReport& report, std::ostream& out);
nlohmann::json to_json(const CollectiveRunReport& report);

// This machine's memory bandwidth: bytes copied per second by one thread's memcpy of
// `bytes`-sized buffers (median of several copies), GB/s.
double measure_memcpy_gbps(int64_t bytes = 64 << 20);

// The same with every one of `threads` threads copying its own pair of `bytes`-sized buffers at
// once, started together behind a barrier: all threads' bytes over the time until the last one
// is done (median of several rounds of copies), GB/s.
double measure_memcpy_all_threads_gbps(int threads, int64_t bytes = 64 << 20);

// The buffer size of both memcpy figures of a sweep.
inline constexpr int64_t kSweepMemcpyBytes = int64_t{64} << 20;

// The OpenMPI peer's name for `op` (mpi_allreduce.c's -o), or "" when it has none.
std::string_view peer_op_name(comm::CollectiveOp op);

struct CollectiveSweepConfig {
  comm::Backend backend = comm::Backend::threads;
  comm::CollectiveOp op = comm::CollectiveOp::all_reduce;
  std::vector<int> worlds = {2, 4};
  std::vector<int64_t> sizes;  // default: 4 KiB to 256 MiB in powers of 4
  std::vector<comm::Algorithm> algorithms = {comm::Algorithm::ring, comm::Algorithm::tree,
                                             comm::Algorithm::naive};
  int trials = 3;              // per point and round: the median trial
  double trial_seconds = 0.1;  // each trial lasts about this long
  // Every measurement (each size x column, the memcpy figures, the peer) runs once per round,
  // round 1 of everything before round 2; each reported figure is the median over rounds.
  int rounds = 3;
  int ranks_per_node = 0;     // > 0: split bytes by link class, show inter-node bytes per rank
  bool hierarchical = false;  // add a column for comm/hierarchical.h (all_reduce only)
  // Source of the OpenMPI peer (mpi_allreduce.c), or "" for none: built once with mpicc, run
  // with mpirun -np <world> after our columns at each (world, size) of every round.
  // Threads backend only; all_reduce, reduce_scatter and all_gather only.
  std::string peer;
  bool variable_counts = false;  // all_to_all only: all_to_all_v (CollectiveRunConfig)
};

struct CollectiveSweepRow {
  int world = 0;
  int64_t bytes = 0;
  comm::Algorithm algorithm = comm::Algorithm::ring;
  double time_us = 0;     // median over rounds
  double busbw_gbps = 0;  // from time_us
  bool hierarchical = false;
  int64_t max_inter_node_bytes = 0;  // per rank, one call (native: -1, MPI's own bytes)
  double mean_inter_node_bytes = 0;
  std::vector<double> round_time_us;  // each round's median-of-trials time; time_us: their median
};

// OpenMPI's figures at one (world, size), from the peer's `bench=mpi` lines.
struct PeerSweepRow {
  int world = 0;
  int64_t bytes = 0;
  // False where the peer does not run: its block collectives need S / 4 divisible by np.
  bool measured = false;
  double time_us = 0;     // median over rounds of the peer's time_us
  double busbw_gbps = 0;  // median over rounds of the peer's busbw_GBps
  std::vector<double> round_time_us, round_busbw_gbps;
};

struct CollectiveSweepReport {
  CollectiveSweepConfig config;
  bool reporter = true;
  double memcpy_gbps = 0;              // one thread, median over rounds
  double memcpy_all_threads_gbps = 0;  // memcpy_threads threads at once, median over rounds
  int memcpy_threads = 0;              // this machine's hardware threads
  std::vector<double> round_memcpy_gbps, round_memcpy_all_threads_gbps;
  std::vector<CollectiveSweepRow> rows;
  std::string peer_library;  // the peer's MPI library ("Open MPI v4.1.4"); "" without --peer
  std::vector<PeerSweepRow> peer_rows;
};

// Called on the reporting process as soon as every column of one (world, size) row is measured
// in a round (0-based; the row's figures are final in round config.rounds - 1), with the rows so
// far, so that a table can print that row, and earlier rounds a progress line, while the sweep
// goes on: a sweep to 256 MiB takes minutes.
using SweepRowDone =
    std::function<void(const CollectiveSweepReport& so_far, int round, int world, int64_t bytes)>;

// Throws Error naming --peer before measuring anything when the peer cannot be used (missing
// file, mpicc or mpirun; a compile error; an op it lacks; the MPI backend), and when it reports
// check=FAIL.
CollectiveSweepReport run_collective_sweep(CollectiveSweepConfig config,
                                           const SweepRowDone& row_done = {});
// The table: the header (with this run's memcpy bandwidth), then for each world its column
// heads and one row per size. The three parts print a table row by row as the sweep goes.
void print_report(const CollectiveSweepReport& report, std::ostream& out);
void print_sweep_header(const CollectiveSweepReport& report, std::ostream& out);
void print_sweep_world(const CollectiveSweepReport& report, int world, std::ostream& out);
void print_sweep_row(const CollectiveSweepReport& report, int world, int64_t bytes,
                     std::ostream& out);
// One line of progress: round `round`'s time of each column at (world, bytes), e.g.
// "round 1 of 3: 4 ranks, 1.00 MiB: ring 812.3 us, tree 990.1 us".
void print_sweep_progress(const CollectiveSweepReport& report, int round, int world, int64_t bytes,
                          std::ostream& out);
nlohmann::json to_json(const CollectiveSweepReport& report);

}  // namespace dtrain::bench
