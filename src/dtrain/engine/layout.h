// The layout flags of `dtrain train` (--dp, --tp, --pp, --zero, --sequence-parallel, the
// pipeline's and the topology's), parsed at the CLI edge into enums, and the one place they are
// checked: make_engine_config turns them into the engine's EngineConfig or throws an Error that
// names the flag, for every layout alike (so `--dp 2 --tp 2 --bucket-size 0` is refused like
// `--dp 2 --bucket-size 0`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/comm/launch.h"
#include "dtrain/cost/context_parallel.h"
#include "dtrain/cost/pipeline_model.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/step_config.h"
#include "dtrain/parallel/mesh.h"

namespace dtrain::train {

// --dp-all-reduce: one ring over the DP group, or reduce-scatter inside each node, all-reduce
// across nodes, all-gather inside (comm/hierarchical.h).
enum class DpAllReduce { flat, hierarchical };
std::string_view name(DpAllReduce mode);  // "flat", "hierarchical"

struct LayoutOptions {
  int dp = 1, tp = 1, pp = 1;
  int cp = 1;                                                // --cp: each sequence over cp ranks
  plan::CpAlgorithm cp_algorithm = plan::CpAlgorithm::ring;  // --cp-algo
  bool cp_contiguous = false;      // --cp-split contiguous: ring / all-gather without the balance
  int zero_stage = 0;              // --zero 0..3 over the DP axis
  int ep = 1;                      // --ep: expert parallelism, carved from --dp
  bool sequence_parallel = false;  // --sequence-parallel (needs --tp 2 or more)
  int64_t bucket_bytes = int64_t{1} << 20;  // --bucket-size
  int64_t grad_accum = 1;                   // --grad-accum: micro-batches per step without --pp
  int microbatches = 1;                     // --microbatches M: the pipeline's micro-batches
  int64_t micro_batch = 0;  // --micro-batch b: sequences per micro-batch (sets M or grad-accum)
  std::optional<plan::ScheduleKind> schedule;  // --schedule (default 1f1b)
  int chunks = 0;                              // --vp v; 0: 2 for interleaved, else 1
  std::vector<int> stage_layers;               // --stage-layers 3,3,2; empty: balanced
  parallel::RankOrder rank_order = parallel::kDefaultRankOrder;  // --rank-order
  comm::Backend backend = comm::Backend::threads;                // --backend
  DpAllReduce dp_all_reduce = DpAllReduce::flat;                 // --dp-all-reduce
  model::Precision grad_reduce = model::Precision::fp32;         // --grad-reduce
  comm::Algorithm dp_algorithm = comm::Algorithm::automatic;     // --dp-algo auto|ring|direct
  int ranks_per_node = 0;       // --ranks-per-node G; 0: every rank on one node
  std::string cluster_path;     // --cluster FILE: links to price each rank's traffic on
  double timeout_s = 120;       // --timeout: seconds one send/recv waits for its peer
  std::string trace_path;       // --trace: the last step as a Chrome / Perfetto trace
  std::string timeline_path;    // --timeline: the last step as an SVG timeline
  int64_t max_rank_memory = 0;  // --max-rank-memory: bytes a rank may hold at its peak; 0: no cap

  int world() const { return dp * cp * tp * pp; }
};

// Checks `o` against the model and batch of `step` and builds the engine's layout: axis sizes,
// ZeRO stage and bucket size, --grad-accum or --microbatches dividing each DP rank's rows, the
// TP cut of the heads and vocabulary and SP's rows, the pipeline's stages, chunks and schedule
// (proved deadlock-free before any rank starts), the node topology and the hierarchical
// all-reduce, and the cluster file. Every error names its flag.
EngineConfig make_engine_config(const StepConfig& step, const LayoutOptions& o);

}  // namespace dtrain::train
