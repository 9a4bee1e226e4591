// What a data-parallel run is asked for (DataParallelSetup, from `dtrain train --dp --zero
// --bucket-size --grad-accum`) and what it reports beside the plan/ formulas: per-rank model-state
// memory, DP bytes sent per step, and the share of communication hidden behind compute.
#pragma once

#include <cstdint>
#include <vector>

#include "dtrain/core/memory.h"

namespace dtrain::train {

struct DataParallelSetup {
  int dp = 1;          // data-parallel ranks N
  int zero_stage = 0;  // 0 (plain DP) .. 3
  int64_t bucket_bytes = int64_t{1} << 20;
  int64_t grad_accum = 1;  // micro-batches per step on each rank
  // Whether the run needs the data-parallel engine (anything but one rank, plain, one batch).
  bool enabled() const { return dp > 1 || zero_stage > 0 || grad_accum > 1; }
};

struct DataParallelReport {
  DataParallelSetup setup;
  int64_t params = 0;       // Psi
  int64_t shard = 0;        // ceil(Psi / N): elements of each rank's range
  int64_t micro_batch = 0;  // sequences per micro-batch on each rank
  int64_t buckets = 0;      // gradient syncs per step (stage 3: units)

  // Rank 0's model-state memory after the last step (current) and over the run (peak),
  // beside plan::model_state_bytes for fp32 Adam (4 + 4 + 8 bytes per parameter).
  struct StateRow {
    MemoryTag tag = MemoryTag::params;
    int64_t current_bytes = 0;
    int64_t peak_bytes = 0;
    int64_t formula_bytes = 0;
  };
  std::vector<StateRow> state;  // params, grads, optimizer
  // Stage 3: the peak of the gathered units above the shards (params and grads tags), and
  // plan::zero3_gathered_bytes for a block with one prefetched, plus the embeddings' weights
  // and gradient (the tied wte stays gathered through the forward and its gradient through
  // the backward).
  int64_t gathered_peak_bytes = 0;
  int64_t gathered_formula_bytes = 0;

  // Bytes rank 0 sent per step in the DP collectives (mean over steps), beside
  // plan::dp_traffic_per_step (ring); control: the loss and gradient-norm exchanges.
  double bytes_sent_per_step = 0;
  double formula_bytes_sent_per_step = 0;
  double control_bytes_per_step = 0;
  // With --ranks-per-node: the DP collectives' bytes per step by link class (rank 0), and
  // whether the buckets ran the hierarchical all-reduce (--dp-all-reduce hierarchical).
  int ranks_per_node = 0;
  bool hierarchical = false;
  double intra_node_bytes_per_step = 0, inter_node_bytes_per_step = 0;
  // Every rank's inter-node bytes per step, summed: measured, and from
  // plan::flat_ring_all_reduce_link_traffic / hierarchical_all_reduce_link_traffic per bucket
  // (ZeRO-0; -1 when not predicted).
  double total_inter_node_bytes_per_step = 0;
  double predicted_total_inter_node_bytes_per_step = -1;
  // With --cluster (ZeRO-0): every bucket's all-reduce priced on the links it crosses, and the
  // part left exposed after the backward window (plan::exposed_time).
  std::string cluster;
  double predicted_comm_ms = 0, predicted_exposed_comm_ms = 0;
  // Communication thread time per step, the part inside forward/backward compute, and their
  // ratio over the whole run.
  double comm_ms_per_step = 0;
  double hidden_ms_per_step = 0;
  double overlap_share = 0;
};

}  // namespace dtrain::train
