// Measuring the two link classes a run sees (inside a node, across nodes): latency by a small
// ping-pong between two ranks while the rest wait, bandwidth by large exchanges on every rank at
// once (each rank sends as much as it receives, as in a ring step). `dtrain calibrate` turns the
// result into a cluster file for the planner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.h"

namespace dtrain::calibrate {

struct CalibrationOptions {
  // > 0: ranks k*G..k*G+G-1 share node k; 0: ranks on the same host share a node.
  int ranks_per_node = 0;
  int64_t latency_bytes = 8;                   // ping-pong message
  int64_t bandwidth_bytes = int64_t{4} << 20;  // exchange message per rank and direction
  int latency_iterations = 200;                // round trips per trial
  double bandwidth_seconds = 0.5;              // about how long one bandwidth trial runs
  int trials = 3;                              // median reported
  // One-way streams (the lower rank of each pair sends, its partner only receives), as a
  // ring's step sends, instead of two-way exchanges: on a shaped TCP link a two-way exchange
  // queues each direction's acknowledgements behind the other's data and measures about half
  // the rate a ring's flow gets.
  bool one_way = false;
};

struct LinkMeasurement {
  bool measured = false;
  int ping_rank = 0, pong_rank = 0;  // the latency pair
  int pairs = 0;                     // pairs exchanging at once in the bandwidth test
  double latency_us = 0;             // one way: half the median round trip
  double bandwidth_bytes_per_s = 0;  // per rank and direction, all pairs busy (slowest pair)
  double single_pair_bandwidth_bytes_per_s = 0;  // one pair alone on the link
};

struct Calibration {
  int world = 0;
  int nodes = 0;
  int ranks_per_node = 0;
  std::string node_source;         // "hostname" or "--ranks-per-node"
  std::vector<std::string> hosts;  // one per node
  LinkMeasurement intra_node, inter_node;
};

// Every member calls it; the result is complete on every rank. Throws Error when ranks are
// spread unevenly over hosts (then pass ranks_per_node).
Calibration calibrate_links(comm::Communicator& comm, const CalibrationOptions& options);

}  // namespace dtrain::calibrate
