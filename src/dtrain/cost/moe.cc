// The mixture-of-experts formulas of moe.h: routed layers, parameter counts, EP shards, the
// dispatch and combine all-to-all bytes under a routing, and a routed layer's activations.
#include "dtrain/cost/moe.h"

#include <algorithm>
#include <cmath>

#include "dtrain/core/check.h"
#include "dtrain/cost/memory_model.h"
#include "dtrain/cost/model_presets.h"

namespace dtrain::plan {
namespace {

bool gated(const ModelShape& m) {
  return m.family == ModelFamily::llama;
}

int64_t expert_ffn(const ModelShape& m) {
  return m.moe.expert_ffn > 0 ? m.moe.expert_ffn : m.ffn_or_default();
}

// The routing's share of each EP rank's experts (uniform: 1/ep each).
std::vector<double> rank_shares(const MoeDispatch& d) {
  DTRAIN_CHECK(d.ep >= 1 && d.experts >= d.ep && d.experts % d.ep == 0, "--ep ", d.ep,
               " must divide the ", d.experts, " experts");
  std::vector<double> share(static_cast<size_t>(d.ep), 1.0 / d.ep);
  if (d.tokens_per_expert.empty()) return share;
  DTRAIN_CHECK(static_cast<int64_t>(d.tokens_per_expert.size()) == d.experts,
               "--tokens-per-expert has ", d.tokens_per_expert.size(), " entries; the model has ",
               d.experts, " experts");
  double sum = 0;
  for (double n : d.tokens_per_expert) {
    DTRAIN_CHECK(std::isfinite(n) && n >= 0,
                 "--tokens-per-expert entries must be finite and non-negative, got ", n);
    sum += n;
  }
  DTRAIN_CHECK(sum > 0, "--tokens-per-expert: no tokens routed to any expert");
  std::fill(share.begin(), share.end(), 0.0);
  const int64_t per_rank = d.experts / d.ep;
  for (int64_t e = 0; e < d.experts; ++e) {
    share[static_cast<size_t>(e / per_rank)] += d.tokens_per_expert[static_cast<size_t>(e)] / sum;
  }
  return share;
}

}  // namespace

int64_t mla_matmul_param_count(const ModelShape& m) {
  const MlaShape& a = m.mla;
  const int64_t h = m.hidden, heads = m.heads;
  const int64_t qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim;
  const int64_t q =
      a.q_lora_rank > 0 ? h * a.q_lora_rank + a.q_lora_rank * heads * qk_head : h * heads * qk_head;
  const int64_t kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) +
                     a.kv_lora_rank * heads * (a.qk_nope_head_dim + a.v_head_dim);
  return q + kv + heads * a.v_head_dim * h;  // + the output projection
}

int64_t mla_norm_param_count(const ModelShape& m) {
  if (!m.mla.enabled()) return 0;
  return m.mla.q_lora_rank + m.mla.kv_lora_rank;  // the latent RMSNorms' weights
}

int64_t attention_qk_width(const ModelShape& m) {
  if (!m.mla.enabled()) return m.hidden;
  return m.heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim);
}

int64_t attention_v_width(const ModelShape& m) {
  return m.mla.enabled() ? m.heads * m.mla.v_head_dim : m.hidden;
}

bool is_moe_layer(const ModelShape& m, int64_t layer) {
  if (!m.moe.enabled() || layer < m.moe.first_dense) return false;
  return (layer - m.moe.first_dense) % std::max<int64_t>(1, m.moe.every) == 0;
}

int64_t moe_layers_in(const ModelShape& m, int64_t first, int64_t count) {
  if (!m.moe.enabled() || count <= 0) return 0;
  // Routed layers below n: ceil((n - first_dense) / every) for n > first_dense.
  const int64_t every = std::max<int64_t>(1, m.moe.every);
  auto below = [&](int64_t n) {
    return n <= m.moe.first_dense ? 0 : (n - m.moe.first_dense + every - 1) / every;
  };
  return below(first + count) - below(first);
}

int64_t moe_layer_count(const ModelShape& m) {
  return moe_layers_in(m, 0, m.layers);
}

int64_t expert_matmul_param_count(const ModelShape& m) {
  return (gated(m) ? 3 : 2) * m.hidden * expert_ffn(m);
}

int64_t expert_param_count(const ModelShape& m) {
  // GPT's two-matrix MLP carries its biases (f_e in, h out); SwiGLU has none.
  return expert_matmul_param_count(m) + (gated(m) ? 0 : expert_ffn(m) + m.hidden);
}

int64_t router_param_count(const ModelShape& m) {
  return m.hidden * m.moe.experts;
}

int64_t moe_layer_param_count(const ModelShape& m) {
  // The dense layer without its MLP, plus the router and every expert.
  const int64_t h = m.hidden, f = m.ffn_or_default();
  const int64_t dense_mlp = (gated(m) ? 3 : 2) * h * f + (gated(m) ? 0 : f + h);
  return layer_param_count(m) - dense_mlp + router_param_count(m) +
         (m.moe.experts + m.moe.shared_experts) * expert_param_count(m);
}

int64_t moe_layer_active_matmul_param_count(const ModelShape& m) {
  return attention_matmul_param_count(m) + router_param_count(m) +
         (m.moe.top_k + m.moe.shared_experts) * expert_matmul_param_count(m);
}

int64_t active_param_count(const ModelShape& m) {
  const int64_t skipped = m.moe.experts - m.moe.top_k;  // routed experts a token does not visit
  return shape_param_count(m) - moe_layer_count(m) * skipped * expert_param_count(m);
}

int64_t rank_routed_expert_params(const ModelShape& m, int64_t moe_layers, int ep, int tp) {
  DTRAIN_CHECK(ep >= 1 && tp >= 1, "rank_routed_expert_params: ep ", ep, ", tp ", tp);
  if (!m.moe.enabled()) return 0;
  return moe_layers * (m.moe.experts / ep) * shard_count(expert_param_count(m), tp);
}

double MoeA2aRank::sent_total() const {
  double s = 0;
  for (double b : sent) s += b;
  return s;
}

double MoeA2aRank::received_total() const {
  double s = 0;
  for (double b : received) s += b;
  return s;
}

MoeA2aRank dispatch_bytes(const MoeDispatch& d, int rank) {
  DTRAIN_CHECK(rank >= 0 && rank < d.ep, "dispatch_bytes: rank ", rank, " outside ep ", d.ep);
  DTRAIN_CHECK(d.tokens >= 0 && d.hidden > 0 && d.top_k > 0 && d.bytes_per_element > 0,
               "dispatch_bytes: tokens ", d.tokens, ", hidden ", d.hidden, ", top_k ", d.top_k);
  const std::vector<double> share = rank_shares(d);
  // Bytes of all of one rank's routed copies.
  const double routed = d.tokens * static_cast<double>(d.top_k * d.hidden * d.bytes_per_element);
  MoeA2aRank r;
  r.sent.assign(static_cast<size_t>(d.ep), 0.0);
  r.received.assign(static_cast<size_t>(d.ep), 0.0);
  for (int q = 0; q < d.ep; ++q) {
    if (q == rank) continue;  // copies for this rank's own experts stay
    r.sent[static_cast<size_t>(q)] = routed * share[static_cast<size_t>(q)];
    r.received[static_cast<size_t>(q)] = routed * share[static_cast<size_t>(rank)];
  }
  return r;
}

MoeA2aRank combine_bytes(const MoeDispatch& d, int rank) {
  MoeA2aRank r = dispatch_bytes(d, rank);
  std::swap(r.sent, r.received);
  return r;
}

MoeA2aRank ep_dispatch_bytes(std::span<const std::vector<int64_t>> kept, int64_t hidden,
                             int64_t bytes_per_element, int rank) {
  const int ep = static_cast<int>(kept.size());
  DTRAIN_CHECK(ep >= 1 && rank >= 0 && rank < ep, "ep_dispatch_bytes: rank ", rank, " of ", ep);
  const int64_t experts = static_cast<int64_t>(kept[0].size());
  DTRAIN_CHECK(experts > 0 && experts % ep == 0, "ep_dispatch_bytes: ", experts,
               " experts over ep ", ep);
  const int64_t local = experts / ep;
  const double row = static_cast<double>(hidden * bytes_per_element);
  MoeA2aRank r;
  r.sent.assign(static_cast<size_t>(ep), 0.0);
  r.received.assign(static_cast<size_t>(ep), 0.0);
  for (int q = 0; q < ep; ++q) {
    DTRAIN_CHECK(static_cast<int64_t>(kept[static_cast<size_t>(q)].size()) == experts,
                 "ep_dispatch_bytes: rank ", q, " routed to ", kept[static_cast<size_t>(q)].size(),
                 " experts, rank 0 to ", experts);
    if (q == rank) continue;
    for (int64_t j = 0; j < local; ++j) {
      r.sent[static_cast<size_t>(q)] +=
          row *
          static_cast<double>(kept[static_cast<size_t>(rank)][static_cast<size_t>(q * local + j)]);
      r.received[static_cast<size_t>(q)] +=
          row *
          static_cast<double>(kept[static_cast<size_t>(q)][static_cast<size_t>(rank * local + j)]);
    }
  }
  return r;
}

MoeA2aRank ep_combine_bytes(std::span<const std::vector<int64_t>> kept, int64_t hidden,
                            int64_t bytes_per_element, int rank) {
  MoeA2aRank r = ep_dispatch_bytes(kept, hidden, bytes_per_element, rank);
  std::swap(r.sent, r.received);
  return r;
}

ModelStateBytes ep_model_state_bytes(int64_t dense_params, int64_t expert_params, int data_ranks,
                                     int ep, int zero_stage, StateBytes bytes) {
  DTRAIN_CHECK(ep >= 1 && data_ranks % ep == 0, "--ep ", ep, " does not divide the ", data_ranks,
               " data-parallel ranks");
  if (ep == 1)
    return model_state_bytes(dense_params + expert_params, data_ranks, zero_stage, bytes);
  ModelStateBytes out = model_state_bytes(dense_params, data_ranks, zero_stage, bytes);
  const ModelStateBytes experts =
      model_state_bytes(expert_params, data_ranks / ep, zero_stage, bytes);
  out.params += experts.params;
  out.grads += experts.grads;
  out.optimizer += experts.optimizer;
  return out;
}

int ep_forward_exchanges(Recompute recompute) {
  return recompute == Recompute::full ? 2 : 1;
}

double cp_moe_routing_gather_bytes(int64_t micro_batch, int64_t runs_per_sequence, int64_t experts,
                                   int cp) {
  const int64_t words = (micro_batch * runs_per_sequence + 1) * experts;
  return static_cast<double>(cp) * static_cast<double>(words) * 8.0;
}

std::vector<CollectiveCall> moe_tp_collectives_per_layer(int64_t micro_batch, int64_t seq,
                                                         int64_t hidden, int64_t bytes_per_element,
                                                         bool sequence_parallel,
                                                         int64_t expert_rows) {
  using comm::CollectiveOp;
  const double e = static_cast<double>(bytes_per_element);
  const double activation = static_cast<double>(micro_batch * seq * hidden) * e;
  const double rows = static_cast<double>(expert_rows * hidden) * e;
  const CollectiveCall experts{CollectiveOp::all_reduce, rows, 2, "expert outputs and input grads"};
  if (!sequence_parallel) {
    return {{CollectiveOp::all_reduce, activation, 2, "attention activations"}, experts};
  }
  return {{CollectiveOp::reduce_scatter, activation, 2, "attention (sequence parallel)"},
          {CollectiveOp::all_gather, activation, 4, "LN outputs and output grads (sp)"},
          experts};
}

std::vector<CollectiveCall> moe_tp_rerun_collectives_per_layer(int64_t micro_batch, int64_t seq,
                                                               int64_t hidden,
                                                               int64_t bytes_per_element,
                                                               bool sequence_parallel,
                                                               int64_t expert_rows) {
  // The rerun repeats the forward's half of each: every count above counts a forward and a
  // backward collective of the same size.
  std::vector<CollectiveCall> calls = moe_tp_collectives_per_layer(
      micro_batch, seq, hidden, bytes_per_element, sequence_parallel, expert_rows);
  for (CollectiveCall& c : calls) {
    c.count /= 2;
    c.what = "rerun forward";
  }
  return calls;
}

int64_t ep_row_wire_bytes(EpExchange exchange, bool bf16) {
  return bf16 && exchange == EpExchange::dispatch_forward ? 2 : 4;
}

double ep_counts_bytes(int64_t experts, int ep) {
  DTRAIN_CHECK(ep >= 1 && experts % ep == 0, "ep_counts_bytes: ", experts, " experts over ep ", ep);
  return static_cast<double>((ep - 1) * (experts / ep) * 8);
}

int busiest_ep_rank(const MoeDispatch& d) {
  const std::vector<double> share = rank_shares(d);
  // A rank sends (1 - share_r) and receives (ep - 1) share_r of its routed bytes.
  int best = 0;
  double most = -1;
  for (int r = 0; r < d.ep; ++r) {
    const double s = share[static_cast<size_t>(r)];
    const double moved = std::max(1 - s, (d.ep - 1) * s);
    if (moved > most) {
      most = moved;
      best = r;
    }
  }
  return best;
}

double expert_load_factor(const MoeDispatch& d) {
  const std::vector<double> share = rank_shares(d);
  return d.ep * *std::max_element(share.begin(), share.end());
}

double moe_mlp_activation_bytes(const ModelShape& m, double tokens, int64_t e, int tp,
                                double load_factor) {
  DTRAIN_CHECK(tp >= 1 && e > 0, "moe_mlp_activation_bytes: tp ", tp, ", bytes ", e);
  if (!m.moe.enabled()) return 0;
  const double h = static_cast<double>(m.hidden), fe = static_cast<double>(expert_ffn(m));
  const double k = static_cast<double>(m.moe.top_k), S = static_cast<double>(m.moe.shared_experts);
  const double per_copy = 2 * h + (gated(m) ? 3 : 2) * fe / tp;  // input, output, intermediates
  const double routed = tokens * k * load_factor * per_copy;
  const double shared = tokens * S * (gated(m) ? 3 : 2) * fe / tp;
  const double router = 4.0 * tokens * static_cast<double>(m.moe.experts) / e;  // fp32 probs
  return static_cast<double>(e) * (routed + shared + router);
}

double dense_mlp_activation_bytes(const ModelShape& m, double tokens, int64_t e, int64_t ew,
                                  int tp) {
  const double f = static_cast<double>(m.ffn_or_default());
  return ((gated(m) ? 2 : 1) * static_cast<double>(ew) + static_cast<double>(e)) * f * tokens / tp;
}

void validate_moe(const ModelShape& m) {
  const MoeShape& x = m.moe;
  DTRAIN_CHECK(x.experts >= 0, "--experts must be positive, got ", x.experts);
  DTRAIN_CHECK(x.experts <= kMaxExperts, "--experts must be at most ", kMaxExperts, ", got ",
               x.experts);
  if (!x.enabled()) {
    DTRAIN_CHECK(x.top_k == 0 && x.shared_experts == 0 && x.expert_ffn == 0 && x.first_dense == 0 &&
                     x.every == 1,
                 "--top-k, --moe-every, --first-dense, --shared-experts and --expert-ffn shape "
                 "experts: add --experts E");
  } else {
    DTRAIN_CHECK(x.top_k >= 1 && x.top_k <= x.experts, "--top-k must be in 1..--experts ",
                 x.experts, ", got ", x.top_k);
    DTRAIN_CHECK(x.every >= 1 && x.every <= m.layers, "--moe-every must be in 1..--layers ",
                 m.layers, ", got ", x.every);
    DTRAIN_CHECK(x.first_dense >= 0 && x.first_dense < m.layers,
                 "--first-dense must be in 0..--layers - 1 (", m.layers - 1, "), got ",
                 x.first_dense);
    DTRAIN_CHECK(x.shared_experts >= 0 && x.shared_experts <= kMaxExperts,
                 "--shared-experts must be in 0..", kMaxExperts, ", got ", x.shared_experts);
    DTRAIN_CHECK(x.expert_ffn >= 0 && x.expert_ffn <= kMaxFfnHidden, "--expert-ffn must be in 0..",
                 kMaxFfnHidden, ", got ", x.expert_ffn);
    // A routed layer's experts within the parameter bound, before any count multiplies them.
    const double layer = static_cast<double>(x.experts + x.shared_experts) * 3.0 *
                         static_cast<double>(m.hidden) *
                         static_cast<double>(x.expert_ffn > 0 ? x.expert_ffn : m.ffn_or_default());
    DTRAIN_CHECK(layer * static_cast<double>(m.layers) <= kMaxParams, "--experts ", x.experts,
                 " x --expert-ffn x --hidden x --layers is more than ", kMaxParams, " parameters");
  }
  const MlaShape& a = m.mla;
  if (a.enabled()) {
    DTRAIN_CHECK(m.family == ModelFamily::llama,
                 "multi-head latent attention needs the llama family");
    for (int64_t v :
         {a.q_lora_rank, a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim}) {
      DTRAIN_CHECK(v >= 0 && v <= kMaxHidden, "MLA sizes must be in 0..", kMaxHidden, ", got ", v);
    }
  }
}

}  // namespace dtrain::plan
