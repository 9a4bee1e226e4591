// The model's one narrow door for tensor parallelism: Megatron's conjugate operators f and g
// (Shoeybi et al. 2019, §3). g sits after each row-parallel linear (attention projection,
// MLP second linear): all-reduce in forward, identity in backward. f sits before each
// column-parallel linear (qkv, MLP first linear): identity in forward, all-reduce of the
// input's gradient in backward. The serial hooks do nothing, so a serial model is TP=1.
// A model built with hooks of size N > 1 holds only its rank's shards (model/tp_shard.h).
#pragma once

#include <cstdint>

namespace dtrain::model {

// The base class is the serial implementation (TP=1): every call is a no-op.
class TensorParallelHooks {
 public:
  virtual ~TensorParallelHooks() = default;
  virtual int size() const { return 1; }  // TP group size
  virtual int rank() const { return 0; }  // tp_rank
  // In-place sum (and max, for a vocabulary-parallel softmax) over the TP group.
  virtual void all_reduce_sum(float* /*data*/, int64_t /*count*/) {}
  virtual void all_reduce_max(float* /*data*/, int64_t /*count*/) {}

  // g: forward of a row-parallel output (partial sums on each rank).
  // Virtual so that an implementation can count the block's collectives apart from the
  // vocabulary-parallel embedding's and head's (which call all_reduce_* directly).
  virtual void g_forward(float* data, int64_t count) {
    if (size() > 1) all_reduce_sum(data, count);
  }
  // f: backward into the input of a column-parallel linear (partial gradients on each rank).
  virtual void f_backward(float* dinp, int64_t count) {
    if (size() > 1) all_reduce_sum(dinp, count);
  }
  // Between set_recomputing(true) and (false) the model is rerunning a block's forward for its
  // backward (full recompute): its g_forward calls and SpSite::block_forward collectives are
  // that rerun's, the extra forward communication Korthikanti et al. 2022 charge to full
  // recompute, which an implementation can count apart from the forward's own.
  virtual void set_recomputing(bool /*on*/) {}

  // --- sequence parallelism (Korthikanti et al. 2022, §4.2.2). With sequence_parallel() the
  // residual stream, the LayerNorms and the residual adds run on this rank's 1/N of the batch's
  // B*T token rows (rows [rank * BT/N, (rank + 1) * BT/N), contiguous in the (B, T, C) layout):
  // f becomes an all-gather forward / reduce-scatter backward, g a reduce-scatter forward /
  // all-gather backward. `slice_count` is this rank's share (BT/N * C); `full` holds N of them.
  // Where in the model a sequence-parallel collective runs, so an implementation can count them.
  enum class SpSite {
    block_forward,   // f (all-gather) and g (reduce-scatter) in a block's forward
    block_backward,  // their conjugates in a block's backward
    regather,        // backward's all-gather of a stored LN-output slice (for the weight grads)
    vocab,           // embedding output scatter, LM-head input gather, their conjugates
  };
  virtual bool sequence_parallel() const { return false; }
  // full (N * slice_count) = the group's slices in rank order; `slice` may be this rank's part of
  // `full` (in place).
  virtual void sp_all_gather(float* /*full*/, const float* /*slice*/, int64_t /*slice_count*/,
                             SpSite /*site*/) {}
  // slice (slice_count) = this rank's part of the sum over the group of `full`.
  virtual void sp_reduce_scatter(float* /*slice*/, const float* /*full*/, int64_t /*slice_count*/,
                                 SpSite /*site*/) {}
};

}  // namespace dtrain::model
