// The model's one narrow door for tensor parallelism: Megatron's conjugate operators f and g
// (Shoeybi et al. 2019, §3). g sits after each row-parallel linear (attention projection,
// MLP second linear): all-reduce in forward, identity in backward. f sits before each
// column-parallel linear (qkv, MLP first linear): identity in forward, all-reduce of the
// input's gradient in backward. The serial hooks do nothing, so a serial model is TP=1.
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
  void g_forward(float* data, int64_t count) {
    if (size() > 1) all_reduce_sum(data, count);
  }
  // f: backward into the input of a column-parallel linear (partial gradients on each rank).
  void f_backward(float* dinp, int64_t count) {
    if (size() > 1) all_reduce_sum(dinp, count);
  }
};

}  // namespace dtrain::model
