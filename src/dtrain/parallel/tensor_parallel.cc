// TensorParallelGroup: f, g and the vocabulary-parallel reductions as ring all-reduces over the
// TP communicator, each counted with the traffic it measured.
#include "dtrain/parallel/tensor_parallel.h"

#include "dtrain/comm/collectives.h"
#include "dtrain/core/timer.h"
#include "dtrain/model/tp_shard.h"

namespace dtrain::parallel {

void TensorParallelGroup::set_bf16_activations(bool on, MemoryTracker* tracker) {
  bf16_ = on;
  tracker_ = tracker;
  scratch_ = Buffer<bf16>();
}

bf16* TensorParallelGroup::scratch(int64_t count) {
  if (scratch_.size() < count) scratch_ = Buffer<bf16>(count, MemoryTag::communication, tracker_);
  return scratch_.data();
}

void TensorParallelGroup::reduce(float* data, int64_t count, comm::ReduceOp op,
                                 SiteCounter& counter, const char* what, bool bf16_wire) {
  const double start = spans_ != nullptr ? now_us() : 0;
  // Ring, as plan::tp_traffic_per_layer assumes: 2 (N-1)/N of the buffer sent per rank.
  if (bf16_wire) {
    bf16* wire = scratch(count);
    to_bf16(data, wire, count);
    counter.traffic += comm::all_reduce<bf16>(comm_, wire, count, op, comm::Algorithm::ring);
    to_float(wire, data, count);
  } else {
    counter.traffic += comm::all_reduce<float>(comm_, data, count, op, comm::Algorithm::ring);
  }
  ++counter.calls;
  counter.elements += count;
  if (spans_ != nullptr) spans_->push_back({what, "", start, now_us()});
}

void TensorParallelGroup::all_reduce_sum(float* data, int64_t count) {
  reduce(data, count, comm::ReduceOp::sum, counters_.vocab, "tp all_reduce (vocab)");
}

void TensorParallelGroup::all_reduce_max(float* data, int64_t count) {
  reduce(data, count, comm::ReduceOp::max, counters_.vocab, "tp all_reduce max (vocab)");
}

void TensorParallelGroup::g_forward(float* data, int64_t count) {
  if (size() == 1) return;
  reduce(data, count, comm::ReduceOp::sum, counter_of(SpSite::block_forward),
         recomputing_ ? "tp all_reduce g (recompute)" : "tp all_reduce g", bf16_);
}

void TensorParallelGroup::f_backward(float* dinp, int64_t count) {
  if (size() == 1) return;
  reduce(dinp, count, comm::ReduceOp::sum, counters_.block_backward, "tp all_reduce f'", bf16_);
}

const char* TensorParallelGroup::label_of(SpSite site, bool gather) const {
  switch (site) {
    case SpSite::block_forward:
      if (recomputing_)
        return gather ? "tp all_gather (recompute)" : "tp reduce_scatter (recompute)";
      return gather ? "tp all_gather f" : "tp reduce_scatter g";
    case SpSite::block_backward:
      return gather ? "tp all_gather g'" : "tp reduce_scatter f'";
    case SpSite::regather:
      return "tp all_gather (regather)";
    case SpSite::vocab:
      break;
  }
  return gather ? "tp all_gather (vocab)" : "tp reduce_scatter (vocab)";
}

SiteCounter& TensorParallelGroup::counter_of(SpSite site) {
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
  SiteCounter& counter = counter_of(site);
  const double start = spans_ != nullptr ? now_us() : 0;
  const int64_t count = slice_count * size();
  if (bf16_ && site != SpSite::vocab) {
    // The slice rounded into its place in a bf16 copy of `full`, gathered there, widened.
    bf16* wire = scratch(count);
    to_bf16(slice, wire + rank() * slice_count, slice_count);
    counter.traffic += comm::all_gather<bf16>(comm_, wire + rank() * slice_count, wire, count,
                                              comm::Algorithm::ring);
    to_float(wire, full, count);
  } else {
    counter.traffic += comm::all_gather<float>(comm_, slice, full, count, comm::Algorithm::ring);
  }
  ++counter.calls;
  counter.elements += count;
  if (spans_ != nullptr) spans_->push_back({label_of(site, true), "", start, now_us()});
}

void TensorParallelGroup::sp_reduce_scatter(float* slice, const float* full, int64_t slice_count,
                                            SpSite site) {
  SiteCounter& counter = counter_of(site);
  const double start = spans_ != nullptr ? now_us() : 0;
  const int64_t count = slice_count * size();
  if (bf16_ && site != SpSite::vocab) {
    bf16* wire = scratch(count + slice_count);
    to_bf16(full, wire, count);
    counter.traffic += comm::reduce_scatter<bf16>(comm_, wire, wire + count, count,
                                                  comm::ReduceOp::sum, comm::Algorithm::ring);
    to_float(wire + count, slice, slice_count);
  } else {
    counter.traffic += comm::reduce_scatter<float>(comm_, full, slice, count, comm::ReduceOp::sum,
                                                   comm::Algorithm::ring);
  }
  ++counter.calls;
  counter.elements += count;
  if (spans_ != nullptr) spans_->push_back({label_of(site, false), "", start, now_us()});
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
