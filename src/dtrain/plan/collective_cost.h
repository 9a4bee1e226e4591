// Closed-form traffic of one collective call on one rank: how many communication rounds
// (steps) it runs and how many bytes it sends and receives. These are the formulas of
// docs/algorithms.md; the engine's tests compare its measured counters with them, and the
// planner's time model (comm_model.h) is built on them.
//
// `bytes` is S as nccl-tests defines it: the buffer size for broadcast, reduce and all_reduce;
// the input per rank for reduce_scatter (each rank keeps S/N); the output per rank for
// all_gather (each rank contributes S/N). Ring and tree chunk S into N pieces; when S/N is not
// a whole number of elements the engine's chunks differ by one element, so its bytes differ
// from these by less than one element per step.
#pragma once

#include <cstdint>

#include "dtrain/comm/collective_kind.h"

namespace dtrain::plan {

struct CollectiveTraffic {
  int64_t steps = 0;
  double bytes_sent = 0;
  double bytes_received = 0;
};

// Per-rank traffic of `op` run with `algo` (not automatic: resolve it first with
// comm::choose_algorithm) over `world` ranks; `rank` and `root` matter for rooted algorithms.
CollectiveTraffic collective_traffic(comm::CollectiveOp op, comm::Algorithm algo, double bytes,
                                     int world, int rank = 0, int root = 0);

// nccl-tests' bus-bandwidth factor: busbw = algbw * factor. 2(N-1)/N for all_reduce,
// (N-1)/N for reduce_scatter and all_gather, 1 for broadcast and reduce.
double bus_bandwidth_factor(comm::CollectiveOp op, int world);

}  // namespace dtrain::plan
