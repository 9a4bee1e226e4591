// Expert parallelism's dispatch and combine around the serial MoE layer's pieces: the row
// bookkeeping (who sends what to whom, the received rows regrouped expert by expert) and the
// exchanges, in forward and backward.
#include "dtrain/model/moe_dispatch.h"

#include <cstring>

#include "dtrain/core/check.h"

namespace dtrain::model {
namespace {

size_t at(int64_t i) {
  return static_cast<size_t>(i);
}

using Site = ExpertParallelHooks::Site;

// dst row expert_row[i] = src row i (to_expert), or dst row i = src row expert_row[i].
void permute_rows(float* dst, const float* src, const std::vector<int64_t>& expert_row, int64_t C,
                  bool to_expert) {
  for (size_t i = 0; i < expert_row.size(); ++i) {
    const int64_t a = static_cast<int64_t>(i), b = expert_row[i];
    std::memcpy(dst + (to_expert ? b : a) * C, src + (to_expert ? a : b) * C,
                at(C) * sizeof(float));
  }
}

int64_t total(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

}  // namespace

bool is_expert_tensor(std::string_view name) {
  return name.ends_with("moe.fc.w") || name.ends_with("moe.fc.b") || name.ends_with("moe.proj.w") ||
         name.ends_with("moe.proj.b");
}

ParamTable ep_local_table(const ParamTable& whole, const MoeConfig& m, int ep) {
  if (ep == 1) return whole;
  const int64_t local = experts_per_rank(m, ep);
  ParamTable out;
  for (const ParamTensor& t : whole.tensors()) {
    std::vector<int64_t> shape = t.shape;
    if (is_expert_tensor(t.name)) shape[0] = local;
    out.add(t.name, std::move(shape));
  }
  out.set_backward_order(whole.backward_order());
  return out;
}

std::vector<FlatRange> expert_slice_ranges(const ParamTensor& whole, const GptConfig& config,
                                           int tp, int tp_rank, int ep, int ep_rank) {
  DTRAIN_CHECK(is_expert_tensor(whole.name), "expert_slice_ranges: ", whole.name,
               " is not a stacked expert tensor");
  DTRAIN_CHECK(ep_rank >= 0 && ep_rank < ep, "expert_slice_ranges: ep_rank ", ep_rank,
               " outside [0, ", ep, ")");
  // The EP rank's experts as a tensor of their own (E/ep experts), then its TP cut, shifted to
  // where those experts start in the serial tensor.
  ParamTensor mine = whole;
  mine.shape[0] = experts_per_rank(config.moe, ep);
  mine.count = whole.count / ep;
  const int64_t first = ep_rank * mine.count;
  if (tp == 1) return {{first, mine.count}};
  std::vector<FlatRange> out = tp_slice_ranges(mine, config, tp, tp_rank);
  for (FlatRange& r : out) r.offset += first;
  return out;
}

std::vector<float> expert_slice(const ParamTensor& whole, std::span<const float> values,
                                const GptConfig& config, int tp, int tp_rank, int ep, int ep_rank) {
  DTRAIN_CHECK(static_cast<int64_t>(values.size()) == whole.count, "expert_slice: ", whole.name,
               " has ", whole.count, " elements, got ", values.size());
  std::vector<float> out;
  for (const FlatRange& r : expert_slice_ranges(whole, config, tp, tp_rank, ep, ep_rank)) {
    out.insert(out.end(), values.begin() + r.offset, values.begin() + r.offset + r.count);
  }
  return out;
}

int64_t experts_per_rank(const MoeConfig& m, int ep) {
  DTRAIN_CHECK(ep >= 1 && m.experts % ep == 0, "--ep ", ep, " does not divide --experts ",
               m.experts);
  return m.experts / ep;
}

void moe_ep_forward(float* out, MoeEpState& st, MoeExpertCache& cache, const MoeRouting& r,
                    const float* x, const MoeWeights& w, int64_t C, const MoeConfig& m,
                    ExpertParallelHooks& ep, const Compute& cx, TensorParallelHooks* tp) {
  const int n = ep.size();
  const int64_t local = experts_per_rank(m, n);
  // Rows per (source, own expert): every rank learns how many rows each source sends each of
  // its experts before the rows move.
  std::vector<int64_t> recv_counts(at(n * local), 0);
  ep.exchange_counts(recv_counts.data(), r.kept.data(), local);
  st.send_rows.assign(at(n), 0);
  st.recv_rows.assign(at(n), 0);
  st.expert_begin.assign(at(local + 1), 0);
  for (int q = 0; q < n; ++q) {
    st.send_rows[at(q)] = r.row_begin[at((q + 1) * local)] - r.row_begin[at(q * local)];
    for (int64_t j = 0; j < local; ++j) {
      st.recv_rows[at(q)] += recv_counts[at(q * local + j)];
      st.expert_begin[at(j + 1)] += recv_counts[at(q * local + j)];
    }
  }
  for (int64_t j = 0; j < local; ++j) st.expert_begin[at(j + 1)] += st.expert_begin[at(j)];
  // Received rows come source by source, each source's expert by expert; the expert cache holds
  // them expert by expert, each expert's source by source (so in token order within a source).
  st.expert_row.clear();
  std::vector<int64_t> next(st.expert_begin.begin(), st.expert_begin.end() - 1);
  for (int q = 0; q < n; ++q) {
    for (int64_t j = 0; j < local; ++j) {
      for (int64_t i = 0; i < recv_counts[at(q * local + j)]; ++i) {
        st.expert_row.push_back(next[at(j)]++);
      }
    }
  }
  const int64_t sent = r.row_begin.back(), received = total(st.recv_rows);
  std::vector<float> rows(at(sent * C));
  moe_gather_rows(rows.data(), r, x, C);
  std::vector<float> recv(at(received * C));
  ep.exchange_rows(recv.data(), st.recv_rows, rows.data(), st.send_rows, C, Site::dispatch_forward);
  cache.x.assign(at(received * C), 0.0f);
  permute_rows(cache.x.data(), recv.data(), st.expert_row, C, true);
  moe_experts_forward(cache, st.expert_begin, w, C, cx, tp);
  permute_rows(recv.data(), cache.y.data(), st.expert_row, C, false);
  st.y.assign(at(sent * C), 0.0f);
  ep.exchange_rows(st.y.data(), st.send_rows, recv.data(), st.recv_rows, C, Site::combine_forward);
  moe_combine(out, r, st.y.data(), C);
}

void moe_ep_backward(float* dx, const MoeGrads& dw, const float* dout, const MoeEpState& st,
                     const MoeExpertCache& cache, const MoeRouting& r, const float* x,
                     const MoeWeights& w, int64_t C, const MoeConfig& m, double aux_scale,
                     ExpertParallelHooks& ep, const Compute& cx, TensorParallelHooks* tp,
                     MoeWeightGradStash* keep) {
  const int64_t sent = r.row_begin.back(), received = total(st.recv_rows);
  std::vector<float> dy(at(sent * C), 0.0f);
  std::vector<double> dgate;
  moe_combine_backward(dy.data(), dgate, r, dout, st.y.data(), C);
  std::vector<float> recv(at(received * C)), rows(at(received * C));
  ep.exchange_rows(recv.data(), st.recv_rows, dy.data(), st.send_rows, C, Site::combine_backward);
  permute_rows(rows.data(), recv.data(), st.expert_row, C, true);
  std::vector<float> dx_rows(at(received * C), 0.0f);
  moe_experts_backward(dx_rows.data(), dw, rows.data(), cache, st.expert_begin, w, C, cx, tp, keep);
  permute_rows(recv.data(), dx_rows.data(), st.expert_row, C, false);
  std::vector<float> dx_back(at(sent * C), 0.0f);
  ep.exchange_rows(dx_back.data(), st.send_rows, recv.data(), st.recv_rows, C,
                   Site::dispatch_backward);
  moe_router_backward(dx, dw, dx_back.data(), dgate, r, x, w, C, m, aux_scale, cx);
}

}  // namespace dtrain::model
