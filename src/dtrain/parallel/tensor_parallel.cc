// TensorParallelGroup: f, g and the vocabulary-parallel reductions as ring all-reduces over the
// TP communicator, each counted with the traffic it measured.
#include "dtrain/parallel/tensor_parallel.h"

#include "dtrain/comm/collectives.h"
#include "dtrain/model/tp_shard.h"

namespace dtrain::parallel {

void TensorParallelGroup::reduce(float* data, int64_t count, comm::ReduceOp op,
                                 TpCounter& counter) {
  // Ring, as plan::tp_traffic_per_layer assumes: 2 (N-1)/N of the buffer sent per rank.
  counter.traffic += comm::all_reduce<float>(comm_, data, count, op, comm::Algorithm::ring);
  ++counter.calls;
  counter.elements += count;
}

void TensorParallelGroup::all_reduce_sum(float* data, int64_t count) {
  reduce(data, count, comm::ReduceOp::sum, counters_.vocab);
}

void TensorParallelGroup::all_reduce_max(float* data, int64_t count) {
  reduce(data, count, comm::ReduceOp::max, counters_.vocab);
}

void TensorParallelGroup::g_forward(float* data, int64_t count) {
  if (size() > 1) reduce(data, count, comm::ReduceOp::sum, counter_of(SpSite::block_forward));
}

void TensorParallelGroup::f_backward(float* dinp, int64_t count) {
  if (size() > 1) reduce(dinp, count, comm::ReduceOp::sum, counters_.block_backward);
}

TpCounter& TensorParallelGroup::counter_of(SpSite site) {
  switch (site) {
    case SpSite::block_forward:
      return recomputing_ ? counters_.recompute : counters_.block_forward;
    case SpSite::block_backward:
      return counters_.block_backward;
    case SpSite::regather:
      return counters_.regather;
    case SpSite::vocab:
      break;
  }
  return counters_.vocab;
}

// Ring, as plan::tp_traffic_per_layer assumes: (N-1)/N of the full buffer sent per rank each, so
// a reduce-scatter plus an all-gather send the bytes of one all-reduce.
void TensorParallelGroup::sp_all_gather(float* full, const float* slice, int64_t slice_count,
                                        SpSite site) {
  TpCounter& counter = counter_of(site);
  const int64_t count = slice_count * size();
  counter.traffic += comm::all_gather<float>(comm_, slice, full, count, comm::Algorithm::ring);
  ++counter.calls;
  counter.elements += count;
}

void TensorParallelGroup::sp_reduce_scatter(float* slice, const float* full, int64_t slice_count,
                                            SpSite site) {
  TpCounter& counter = counter_of(site);
  const int64_t count = slice_count * size();
  counter.traffic += comm::reduce_scatter<float>(comm_, full, slice, count, comm::ReduceOp::sum,
                                                 comm::Algorithm::ring);
  ++counter.calls;
  counter.elements += count;
}

BlockParamCounts block_param_counts(const model::ParamTable& table) {
  BlockParamCounts c;
  for (const model::ParamTensor& t : table.tensors()) {
    if (!t.name.starts_with("h.")) continue;
    (model::tp_split_of(t.name) == model::TpSplit::replicated ? c.replicated : c.sharded) +=
        t.count;
  }
  return c;
}

}  // namespace dtrain::parallel
