// TensorParallelGroup: f, g and the vocabulary-parallel reductions as ring all-reduces over the
// TP communicator, each counted with the traffic it measured.
#include "dtrain/parallel/tensor_parallel.h"

#include <string>

#include "dtrain/comm/collectives.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/optim/grad_clip.h"

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
  if (size() > 1) reduce(data, count, comm::ReduceOp::sum, counters_.block_forward);
}

void TensorParallelGroup::f_backward(float* dinp, int64_t count) {
  if (size() > 1) reduce(dinp, count, comm::ReduceOp::sum, counters_.block_backward);
}

TpCounter& TensorParallelGroup::counter_of(SpSite site) {
  switch (site) {
    case SpSite::block_forward:
      return counters_.block_forward;
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

void sp_all_reduce_layernorm_grads(model::GptModel& model, comm::Communicator& tp) {
  if (tp.size() == 1) return;
  for (size_t i = 0; i < model.param_table().size(); ++i) {
    const std::string& name = model.param_table()[i].name;
    const bool layernorm = name.find("ln1.") != std::string::npos ||
                           name.find("ln2.") != std::string::npos || name.starts_with("lnf.");
    if (!layernorm) continue;
    std::span<float> g = model.grad(static_cast<int>(i));
    comm::all_reduce<float>(tp, g.data(), static_cast<int64_t>(g.size()), comm::ReduceOp::sum,
                            comm::Algorithm::ring);
  }
}

double tp_grad_sum_of_squares(const model::GptModel& model, comm::Communicator& tp) {
  const model::ParamTable& table = model.param_table();
  std::span<const float> grads = model.grads();
  double sharded = 0, replicated = 0;
  for (const model::ParamTensor& t : table.tensors()) {
    const double s = optim::sum_of_squares(
        grads.subspan(static_cast<size_t>(t.offset), static_cast<size_t>(t.count)));
    (model::tp_split_of(t.name) == model::TpSplit::replicated ? replicated : sharded) += s;
  }
  float local = static_cast<float>(sharded);
  if (tp.size() > 1) comm::all_reduce<float>(tp, &local, 1, comm::ReduceOp::sum);
  return static_cast<double>(local) + replicated;
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
