// Tensor parallelism (Megatron, Shoeybi et al. 2019, §3; Narayanan et al. 2021, §3.2): the
// model's TP hooks over a communicator of the TP group. f and g (the block's only
// communication: 2 all-reduces of (B, T, C) forward, 2 backward) and the vocabulary-parallel
// embedding's and cross-entropy's reductions are counted apart, with the traffic each measured,
// so the engine can set them beside plan::tp_traffic_per_layer (full recompute's reruns apart
// again). The sharded shapes themselves live in model/tp_shard.h; this file adds what needs a
// communicator. Under mixed precision (set_bf16_activations) the block's collectives move bf16
// activations, as Megatron's bf16 runs do: each is rounded to bf16, reduced or gathered in bf16
// (a ring hop adds in fp32 and rounds) and widened back, half the bytes; the vocabulary
// reductions (the embedding sum, the cross-entropy's statistics, the head's input) stay fp32.
#pragma once

#include <cstdint>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/buffer.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/tp_hooks.h"
#include "dtrain/parallel/site_counter.h"

namespace dtrain::parallel {

// Calls and measured traffic of one kind of TP collective on this rank.

struct TensorParallelCounters {
  SiteCounter block_forward;   // g: after the attention projection and the MLP second linear
  SiteCounter block_backward;  // f: into the LN1 and LN2 outputs' gradients
  SiteCounter vocab;           // embedding sum, cross-entropy max / sum-exp, LM-head f
  // Sequence parallelism only: backward's all-gathers of the stored LN-output slices that the
  // qkv and fc weight gradients need (Korthikanti et al. 2022, §4.2.2: not in the f/g formula).
  SiteCounter regather;
  // Full recompute: g (or SP's all-gather and reduce-scatter) of each block forward rerun before
  // its backward; the forward's own stay in block_forward. (Under ZB-H1 W reruns it once more.)
  SiteCounter recompute;
};

class TensorParallelGroup final : public model::TensorParallelHooks {
 public:
  // `tp` is the TP group's communicator (its rank is tp_rank); it must outlive the hooks.
  explicit TensorParallelGroup(comm::Communicator& tp) : comm_(tp) {}
  // With `sequence_parallel` (and N > 1) the model runs the residual regions on a slice.
  TensorParallelGroup(comm::Communicator& tp, bool sequence_parallel)
      : comm_(tp), sequence_parallel_(sequence_parallel) {}

  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  void all_reduce_sum(float* data, int64_t count) override;
  void all_reduce_max(float* data, int64_t count) override;
  void g_forward(float* data, int64_t count) override;
  void f_backward(float* dinp, int64_t count) override;
  void set_recomputing(bool on) override { recomputing_ = on; }
  bool sequence_parallel() const override { return sequence_parallel_ && size() > 1; }
  void sp_all_gather(float* full, const float* slice, int64_t slice_count, SpSite site) override;
  void sp_reduce_scatter(float* slice, const float* full, int64_t slice_count,
                         SpSite site) override;

  // The block collectives on bf16 (above); their scratch is charged to `tracker` as
  // communication.
  void set_bf16_activations(bool on, MemoryTracker* tracker);
  bool bf16_activations() const { return bf16_; }

  const TensorParallelCounters& counters() const { return counters_; }
  comm::Communicator& communicator() { return comm_; }
  const comm::Communicator& communicator() const { return comm_; }
  // With a list, every collective from now on appends its span there (null: stop recording).
  void record_spans(std::vector<SiteSpan>* out) { spans_ = out; }

 private:
  void reduce(float* data, int64_t count, comm::ReduceOp op, SiteCounter& counter, const char* what,
              bool bf16 = false);
  bf16* scratch(int64_t count);  // at least `count` bf16 elements
  SiteCounter& counter_of(SpSite site);
  const char* label_of(SpSite site, bool gather) const;

  comm::Communicator& comm_;
  bool sequence_parallel_ = false;
  bool recomputing_ = false;  // block forward collectives go to counters_.recompute
  TensorParallelCounters counters_;
  std::vector<SiteSpan>* spans_ = nullptr;
  bool bf16_ = false;
  MemoryTracker* tracker_ = nullptr;
  Buffer<bf16> scratch_;
};

// Elements of the model's block tensors on this rank: those TP cuts (matrices and their
// biases) and those it replicates (LayerNorms, the biases added after g).
struct BlockParamCounts {
  int64_t sharded = 0;
  int64_t replicated = 0;
};
BlockParamCounts block_param_counts(const model::ParamTable& table);

}  // namespace dtrain::parallel
