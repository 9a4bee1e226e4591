// The MoE MLP's route, forward and backward on one rank's N tokens (the serial layer; expert
// parallelism, model/moe_dispatch.h, moves each expert's rows to the rank holding it between
// the pieces). Every sum over a token's assignments runs in choice order, so the result does
// not depend on how the experts' rows are grouped.
#include "dtrain/model/ops/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "dtrain/core/check.h"
#include "dtrain/model/ops/gelu.h"
#include "dtrain/model/ops/matmul.h"
#include "dtrain/model/ops/swiglu.h"

namespace dtrain::model {
namespace {

size_t at(int64_t i) {
  return static_cast<size_t>(i);
}

// The expert's activation over n rows: GELU of fc, or SwiGLU of fc's [gate | up].
void expert_activation_forward(float* out, const float* fc, int64_t n, const MoeExpertWidths& w,
                               const Compute& cx) {
  if (w.gated()) {
    swiglu_forward(out, fc, n, w.act, cx);
  } else {
    gelu_forward(out, fc, n * w.fc, cx);
  }
}
void expert_activation_backward(float* dfc, const float* fc, const float* dout, int64_t n,
                                const MoeExpertWidths& w, const Compute& cx) {
  if (w.gated()) {
    swiglu_backward(dfc, fc, dout, n, w.act, cx);
  } else {
    gelu_backward(dfc, fc, dout, n * w.fc, cx);
  }
}

// An expert's bias slice, or null for biasless (gated) experts.
template <typename T>
T* bias_of(T* b, int64_t e, int64_t width) {
  return b != nullptr ? b + e * width : nullptr;
}

}  // namespace

MoeExpertWidths moe_expert_widths(int64_t C, int64_t ffn, bool gated, int tp) {
  DTRAIN_CHECK(tp >= 1, "moe_expert_widths: tp ", tp);
  if (gated) return {2 * ffn / tp, ffn / tp};
  return {4 * C / tp, 4 * C / tp};
}

void choose_top_k_by_scans(int32_t* chosen, const float* p, int64_t E, int64_t k) {
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int32_t e = 0; e < E; ++e) {
      if (std::find(chosen, chosen + j, e) != chosen + j) continue;
      if (best < 0 || p[e] > p[best]) best = e;
    }
    chosen[j] = best;
  }
}

void choose_top_k(int32_t* chosen, const float* p, int64_t E, int64_t k,
                  std::vector<int32_t>& order) {
  // A NaN probability (from a NaN logit) orders nothing: the scans' rule decides there.
  if (std::any_of(p, p + E, [](float x) { return std::isnan(x); })) {
    choose_top_k_by_scans(chosen, p, E, k);
    return;
  }
  order.resize(at(E));
  std::iota(order.begin(), order.end(), 0);
  const auto first = order.begin() + static_cast<std::ptrdiff_t>(k);
  std::partial_sort(order.begin(), first, order.end(),
                    [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  std::copy(order.begin(), first, chosen);
}

void MoeCounts::add(const MoeRouting& r) {
  if (expert_tokens.size() < r.kept.size()) expert_tokens.resize(r.kept.size(), 0);
  for (size_t e = 0; e < r.kept.size(); ++e) expert_tokens[e] += r.kept[e];
  block_kept.insert(block_kept.end(), r.kept.begin(), r.kept.end());
  assignments += static_cast<int64_t>(r.expert.size());
  dropped += r.dropped;
}

void moe_route(MoeRouting& r, const float* x, const float* router_w, int64_t N, int64_t C,
               const MoeConfig& m, const Compute& cx, MoeRouteGroup* group) {
  const int64_t E = m.experts, k = m.top_k;
  DTRAIN_CHECK(E > 0 && k >= 1 && k <= E, "moe_route: top-k ", k, " of ", E, " experts");
  r.tokens = N;
  r.probs.assign(at(N * E), 0.0f);
  r.expert.assign(at(N * k), -1);
  r.gate.assign(at(N * k), 0.0f);
  r.slot.assign(at(N * k), -1);
  r.kept.assign(at(E), 0);
  r.chosen.assign(at(E), 0);
  r.dropped = 0;
  if (N > 0) matmul_forward(r.probs.data(), x, router_w, nullptr, N, C, E, cx);  // logits

  std::vector<double> prob_sum(at(E), 0.0);
  std::vector<int32_t> order;
  for (int64_t n = 0; n < N; ++n) {
    float* p = r.probs.data() + n * E;
    const float max = *std::max_element(p, p + E);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = std::exp(p[e] - max);
      sum += p[e];
    }
    for (int64_t e = 0; e < E; ++e) {
      p[e] = static_cast<float>(p[e] / sum);
      prob_sum[at(e)] += p[e];
    }
    int32_t* chosen = r.expert.data() + n * k;
    choose_top_k(chosen, p, E, k, order);
    double chosen_sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      chosen_sum += p[chosen[j]];
      ++r.chosen[at(chosen[j])];
    }
    for (int64_t j = 0; j < k; ++j) {
      r.gate[at(n * k + j)] = static_cast<float>(p[chosen[j]] / chosen_sum);
    }
  }
  // What the capacity and the aux loss are taken over: this rank's tokens, or its group's
  // micro-batch. `before` (runs x E): the choices of each expert by the micro-batch's tokens
  // before each of this rank's runs, on any rank.
  r.aux_tokens = N;
  r.aux_chosen = r.chosen;
  r.aux_ranks = 1;
  int64_t runs = 1;
  std::vector<int64_t> before(at(E), 0);
  std::vector<double> aux_prob_sum = prob_sum;
  if (group != nullptr && group->size() > 1) {
    runs = group->runs();
    const int64_t per_rank = runs * E + E;  // choices per (run, expert), then the prob sums
    std::vector<double> mine(at(per_rank), 0.0);
    for (int64_t i = 0; i < N * k; ++i) mine[at(group->run_of(i / k) * E + r.expert[at(i)])] += 1;
    std::copy(prob_sum.begin(), prob_sum.end(), mine.begin() + runs * E);
    const std::vector<double> all = group->gather(mine);
    const int ranks = group->size();
    before.assign(at(runs * E), 0);
    for (int64_t e = 0; e < E; ++e) {
      r.aux_chosen[at(e)] = 0;
      aux_prob_sum[at(e)] = 0;
    }
    for (int q = 0; q < ranks; ++q) {
      const double* theirs = all.data() + q * per_rank;
      for (int64_t e = 0; e < E; ++e) aux_prob_sum[at(e)] += theirs[runs * E + e];  // rank order
      for (int64_t jq = 0; jq < runs; ++jq) {
        const int64_t start = group->run_start(q, jq);
        for (int64_t e = 0; e < E; ++e) {
          const auto count = static_cast<int64_t>(theirs[jq * E + e]);
          r.aux_chosen[at(e)] += count;
          for (int64_t j = 0; j < runs; ++j) {
            if (start < group->run_start(group->rank(), j)) before[at(j * E + e)] += count;
          }
        }
      }
    }
    r.aux_tokens = group->tokens();
    r.aux_ranks = ranks;
  }
  // Capacity in the micro-batch's token order: the first `capacity` assignments to an expert
  // stay; `seen` counts the assignments to each expert so far, kept or not.
  const int64_t capacity = moe_capacity(m, r.aux_tokens);
  std::vector<int64_t> seen(at(E), 0);
  int64_t run = -1;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t run_n = r.aux_ranks > 1 ? group->run_of(n) : 0;
    if (run_n != run) {
      run = run_n;
      std::copy_n(before.begin() + run * E, E, seen.begin());
    }
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = r.expert[at(n * k + j)];
      if (seen[at(e)]++ < capacity) {
        r.slot[at(n * k + j)] = static_cast<int32_t>(r.kept[at(e)]++);
      } else {
        ++r.dropped;
      }
    }
  }
  r.row_begin.assign(at(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) r.row_begin[at(e + 1)] = r.row_begin[at(e)] + r.kept[at(e)];
  r.row_token.assign(at(r.row_begin[at(E)]), -1);
  for (int64_t i = 0; i < N * k; ++i) {
    if (r.slot[at(i)] < 0) continue;
    r.row_token[at(r.row_begin[at(r.expert[at(i)])] + r.slot[at(i)])] = static_cast<int32_t>(i / k);
  }
  // aux = E * sum_e (chosen_e / (N k)) * (prob_sum_e / N), over the micro-batch
  const int64_t Na = r.aux_tokens;
  double aux = 0;
  for (int64_t e = 0; e < E; ++e) {
    aux += static_cast<double>(r.aux_chosen[at(e)]) * aux_prob_sum[at(e)];
  }
  r.aux_loss = Na > 0 ? aux * static_cast<double>(E) / (static_cast<double>(Na * k) * Na) : 0.0;
}

void moe_gather_rows(float* x_rows, const MoeRouting& r, const float* x, int64_t C) {
  for (size_t i = 0; i < r.row_token.size(); ++i) {
    std::memcpy(x_rows + static_cast<int64_t>(i) * C, x + r.row_token[i] * C,
                at(C) * sizeof(float));
  }
}

void moe_experts_forward(MoeExpertCache& cache, std::span<const int64_t> row_begin,
                         const MoeWeights& w, int64_t C, const Compute& cx,
                         TensorParallelHooks* tp) {
  const int n = tp != nullptr ? tp->size() : 1;
  const int64_t H = w.widths.fc, A = w.widths.act;
  const int64_t experts = static_cast<int64_t>(row_begin.size()) - 1, rows = row_begin.back();
  DTRAIN_CHECK(static_cast<int64_t>(cache.x.size()) == rows * C,
               "moe_experts_forward: ", cache.x.size(), " input elements for ", rows, " rows of ",
               C);
  cache.fc.assign(at(rows * H), 0.0f);
  cache.fc_gelu.assign(at(rows * A), 0.0f);
  cache.y.assign(at(rows * C), 0.0f);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = row_begin[at(e)], n_e = row_begin[at(e + 1)] - first;
    if (n_e == 0) continue;  // an expert without tokens computes nothing
    matmul_forward(cache.fc.data() + first * H, cache.x.data() + first * C, w.fc_w + e * H * C,
                   bias_of(w.fc_b, e, H), n_e, C, H, cx);
    expert_activation_forward(cache.fc_gelu.data() + first * A, cache.fc.data() + first * H, n_e,
                              w.widths, cx);
    matmul_forward(cache.y.data() + first * C, cache.fc_gelu.data() + first * A,
                   w.proj_w + e * C * A, n > 1 ? nullptr : bias_of(w.proj_b, e, C), n_e, A, C, cx);
  }
  if (n == 1) return;
  // g: the row-parallel partial sums whole, then proj's bias once (as the dense MLP's after g).
  tp->g_forward(cache.y.data(), rows * C);
  if (w.proj_b == nullptr) return;
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t i = row_begin[at(e)]; i < row_begin[at(e + 1)]; ++i) {
      float* yr = cache.y.data() + i * C;
      for (int64_t c = 0; c < C; ++c) yr[c] += w.proj_b[e * C + c];
    }
  }
}

void moe_combine(float* out, const MoeRouting& r, const float* y, int64_t C) {
  const int64_t N = r.tokens, k = static_cast<int64_t>(r.expert.size()) / std::max<int64_t>(N, 1);
  std::memset(out, 0, at(N * C) * sizeof(float));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = n * k + j;
      if (r.slot[at(i)] < 0) continue;  // dropped: contributes nothing
      const float g = r.gate[at(i)];
      const float* yr = y + (r.row_begin[at(r.expert[at(i)])] + r.slot[at(i)]) * C;
      for (int64_t c = 0; c < C; ++c) out[n * C + c] += g * yr[c];
    }
  }
}

void moe_forward(float* out, MoeExpertCache& cache, const MoeRouting& r, const float* x,
                 const MoeWeights& w, int64_t /*N*/, int64_t C, const MoeConfig& /*m*/,
                 const Compute& cx, TensorParallelHooks* tp) {
  cache.x.assign(at(r.row_begin.back() * C), 0.0f);
  moe_gather_rows(cache.x.data(), r, x, C);
  moe_experts_forward(cache, r.row_begin, w, C, cx, tp);
  moe_combine(out, r, cache.y.data(), C);
}

void moe_combine_backward(float* dy, std::vector<double>& dgate, const MoeRouting& r,
                          const float* dout, const float* y, int64_t C) {
  const int64_t N = r.tokens, k = static_cast<int64_t>(r.expert.size()) / std::max<int64_t>(N, 1);
  // Each kept assignment: d expert output = gate * dout; d gate = <dout, expert output>.
  dgate.assign(at(N * k), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = n * k + j;
      if (r.slot[at(i)] < 0) continue;
      const int64_t row = r.row_begin[at(r.expert[at(i)])] + r.slot[at(i)];
      const float g = r.gate[at(i)];
      double dot = 0;
      for (int64_t c = 0; c < C; ++c) {
        dy[row * C + c] = g * dout[n * C + c];
        dot += static_cast<double>(dout[n * C + c]) * y[row * C + c];
      }
      dgate[at(i)] = dot;
    }
  }
}

void moe_experts_backward(float* dx_rows, const MoeGrads& dw, const float* dy,
                          const MoeExpertCache& cache, std::span<const int64_t> row_begin,
                          const MoeWeights& w, int64_t C, const Compute& cx,
                          TensorParallelHooks* tp, MoeWeightGradStash* keep) {
  const int n = tp != nullptr ? tp->size() : 1;
  const int64_t H = w.widths.fc, A = w.widths.act;
  const int64_t experts = static_cast<int64_t>(row_begin.size()) - 1, rows = row_begin.back();
  std::vector<float> dfc_gelu(at(rows * A), 0.0f), dfc(at(rows * H), 0.0f);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = row_begin[at(e)], n_e = row_begin[at(e + 1)] - first;
    if (n_e == 0) continue;
    if (keep != nullptr) {
      matmul_backward_input(dfc_gelu.data() + first * A, dy + first * C, w.proj_w + e * C * A, n_e,
                            A, C, cx);
    } else {
      matmul_backward(dfc_gelu.data() + first * A, dw.proj_w + e * C * A, bias_of(dw.proj_b, e, C),
                      dy + first * C, cache.fc_gelu.data() + first * A, w.proj_w + e * C * A, n_e,
                      A, C, cx);
    }
    expert_activation_backward(dfc.data() + first * H, cache.fc.data() + first * H,
                               dfc_gelu.data() + first * A, n_e, w.widths, cx);
    if (keep != nullptr) {
      matmul_backward_input(dx_rows + first * C, dfc.data() + first * H, w.fc_w + e * H * C, n_e, C,
                            H, cx);
    } else {
      matmul_backward(dx_rows + first * C, dw.fc_w + e * H * C, bias_of(dw.fc_b, e, H),
                      dfc.data() + first * H, cache.x.data() + first * C, w.fc_w + e * H * C, n_e,
                      C, H, cx);
    }
  }
  if (keep != nullptr) {
    keep->dy.assign(dy, dy + rows * C);
    keep->dfc = std::move(dfc);
    keep->row_begin.assign(row_begin.begin(), row_begin.end());
  }
  if (n > 1) tp->f_backward(dx_rows, rows * C);  // f's conjugate: each rank's fc rows' share
}

void moe_experts_backward_weight(const MoeGrads& dw, const MoeWeightGradStash& kept,
                                 const MoeExpertCache& cache, const MoeExpertWidths& widths,
                                 int64_t C, const Compute& cx) {
  const int64_t H = widths.fc, A = widths.act;
  const int64_t experts = static_cast<int64_t>(kept.row_begin.size()) - 1;
  // The weight halves of moe_experts_backward's two matmul_backward calls per expert, in order.
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = kept.row_begin[at(e)], n_e = kept.row_begin[at(e + 1)] - first;
    if (n_e == 0) continue;
    matmul_backward_weight(dw.proj_w + e * C * A, bias_of(dw.proj_b, e, C),
                           kept.dy.data() + first * C, cache.fc_gelu.data() + first * A, n_e, A, C,
                           cx);
    matmul_backward_weight(dw.fc_w + e * H * C, bias_of(dw.fc_b, e, H), kept.dfc.data() + first * H,
                           cache.x.data() + first * C, n_e, C, H, cx);
  }
}

void moe_router_backward(float* dx, const MoeGrads& dw, const float* dx_rows,
                         const std::vector<double>& dgate, const MoeRouting& r, const float* x,
                         const MoeWeights& w, int64_t C, const MoeConfig& m, double aux_scale,
                         const Compute& cx) {
  const int64_t N = r.tokens, E = m.experts, k = m.top_k;
  // Back to the tokens, in choice order; and the router probabilities' gradient through the
  // renormalised gates: g_j = p_j / S, so dp_j = (dg_j - sum_i dg_i g_i) / S over the chosen.
  std::vector<float> dlogits(at(N * E), 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    const float* p = r.probs.data() + n * E;
    std::vector<double> dp(at(E), 0.0);
    double chosen_sum = 0, weighted = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = n * k + j;
      chosen_sum += p[r.expert[at(i)]];
      weighted += dgate[at(i)] * r.gate[at(i)];
      if (r.slot[at(i)] < 0) continue;
      const int64_t row = r.row_begin[at(r.expert[at(i)])] + r.slot[at(i)];
      for (int64_t c = 0; c < C; ++c) dx[n * C + c] += dx_rows[row * C + c];
    }
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = n * k + j;
      dp[at(r.expert[at(i)])] += (dgate[at(i)] - weighted) / chosen_sum;
    }
    // aux = E/(N k N) * sum_e chosen_e * sum_n p_ne over the micro-batch's N tokens: d aux /
    // d p_ne = E chosen_e / (N k N); a route group's R ranks each take R times their tokens'
    // share, as the group's gradients are averaged.
    const int64_t Na = r.aux_tokens;
    for (int64_t e = 0; e < E; ++e) {
      dp[at(e)] += aux_scale * static_cast<double>(E) * static_cast<double>(r.aux_chosen[at(e)]) *
                   static_cast<double>(r.aux_ranks) /
                   (static_cast<double>(Na * k) * static_cast<double>(Na));
    }
    // Softmax: dlogit_e = p_e (dp_e - sum_i p_i dp_i).
    double mean = 0;
    for (int64_t e = 0; e < E; ++e) mean += p[e] * dp[at(e)];
    for (int64_t e = 0; e < E; ++e) {
      dlogits[at(n * E + e)] = static_cast<float>(p[e] * (dp[at(e)] - mean));
    }
  }
  if (N > 0) {
    matmul_backward(dx, dw.router_w, nullptr, dlogits.data(), x, w.router_w, N, C, E, cx);
  }
}

void moe_backward(float* dx, const MoeGrads& dw, const float* dout, const MoeExpertCache& cache,
                  const MoeRouting& r, const float* x, const MoeWeights& w, int64_t /*N*/,
                  int64_t C, const MoeConfig& m, double aux_scale, const Compute& cx,
                  TensorParallelHooks* tp, MoeWeightGradStash* keep) {
  const int64_t rows = r.row_begin.back();
  std::vector<float> dy(at(rows * C), 0.0f), dx_rows(at(rows * C), 0.0f);
  std::vector<double> dgate;
  moe_combine_backward(dy.data(), dgate, r, dout, cache.y.data(), C);
  moe_experts_backward(dx_rows.data(), dw, dy.data(), cache, r.row_begin, w, C, cx, tp, keep);
  moe_router_backward(dx, dw, dx_rows.data(), dgate, r, x, w, C, m, aux_scale, cx);
}

}  // namespace dtrain::model
