// What a tensor-parallel run is asked for (TensorParallelSetup, from `dtrain train --tp N
// --sequence-parallel`) and what each TP rank reports: the f/g bytes it sent per step beside
// plan::tp_traffic_per_layer x layers x micro-batches, the vocabulary-parallel reductions apart,
// and its parameter memory beside the serial model's.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrain::train {

struct TensorParallelSetup {
  int tp = 1;                      // TP ranks N (threads)
  bool sequence_parallel = false;  // residual regions on 1/N of the B*T rows (tp_hooks.h)
  bool enabled() const { return tp > 1 || sequence_parallel; }
};

struct TensorParallelRankReport {
  int tp_rank = 0;
  // Per training step (mean over steps), the block's f and g on this rank: calls and bytes sent
  // (measured by the communicator), and plan::tp_traffic_per_layer * L * micro-batches.
  double block_forward_calls_per_step = 0, block_backward_calls_per_step = 0;
  double block_bytes_sent_per_step = 0;
  double formula_bytes_sent_per_step = 0;
  // The vocabulary-parallel embedding and cross-entropy (not in the per-layer formula).
  double vocab_bytes_sent_per_step = 0;
  // Sequence parallelism: backward's re-gathers of the stored LN-output slices (not in the
  // per-layer formula; 0 without SP).
  double regather_bytes_sent_per_step = 0;
  // One block's activations on this rank, measured (MemoryTracker) and
  // plan::activation_bytes_per_layer (fp32, no dropout, LN statistics, tp, sequence_parallel).
  int64_t block_activation_bytes = 0;
  double formula_block_activation_bytes = 0;
  // Parameter memory: the tracker's params tag on this rank, and the serial model's.
  int64_t param_bytes = 0;
  int64_t serial_param_bytes = 0;
  // Block tensors' elements on this rank: cut by TP (serial / N) and replicated.
  int64_t block_sharded = 0, block_replicated = 0;
  int64_t serial_block_sharded = 0;
};

struct TensorParallelReport {
  TensorParallelSetup setup;
  std::vector<TensorParallelRankReport> ranks;  // index: tp_rank
};

// The `dtrain train` summary's tensor-parallel section, as a table and as JSON.
void print_tensor_parallel_report(std::ostream& out, const TensorParallelReport& report);
nlohmann::json tensor_parallel_report_to_json(const TensorParallelReport& report);

}  // namespace dtrain::train
