// The clock's operations: shapes and bytes of each kernel of a transformer layer, its head and
// its embedding, priced with rates.h's two laws.
#include "dtrain/clock/time_model.h"

#include "dtrain/core/check.h"

namespace dtrain::plan {

PassTimes& PassTimes::operator+=(const PassTimes& o) {
  forward_s += o.forward_s;
  backward_input_s += o.backward_input_s;
  backward_weight_s += o.backward_weight_s;
  recompute_s += o.recompute_s;
  return *this;
}

PassTimes PassTimes::scaled(double factor) const {
  return {forward_s * factor, backward_input_s * factor, backward_weight_s * factor,
          recompute_s * factor};
}

double matmul_peak_flops(const GpuSpec& gpu, int64_t activation_bytes) {
  if (activation_bytes >= 4 && gpu.rates.present) return gpu.rates.fp32_peak_flops;
  return gpu.peak_flops;
}

namespace {

// A cluster without rates runs the legacy clock through the same operations: products at
// compute_efficiency of peak, memory-bound kernels and kernel calls free.
Rates clock_rates(const GpuSpec& gpu) {
  if (gpu.rates.present) return gpu.rates;
  Rates r;
  r.gemm_efficiency = gpu.compute_efficiency;
  return r;
}

struct OpBuilder {
  Rates rates;
  double peak;
  double element_bytes;  // the activations' (and the products' operands')
  std::vector<OpTime> ops;

  // A weight's product: forward (M, N, K); backward its input and weight gradients.
  void weight_matmul(std::string_view op, double m, double n, double k, bool rerun) {
    const double t = matmul_seconds(rates, peak, m, n, k, 1, element_bytes);
    ops.push_back({op, t, t, t, rerun ? t : 0});
  }
  // Products of two activations (one per head, batched): both gradients are B.
  void activation_matmul(std::string_view op, double m, double n, double k, double batch,
                         bool rerun) {
    const double t = matmul_seconds(rates, peak, m, n, k, batch, element_bytes);
    ops.push_back({op, t, 2 * t, 0, rerun ? t : 0});
  }
  // A memory-bound kernel moving `forward_bytes`, its backward `backward_bytes`.
  void memory(std::string_view op, double forward_bytes, double backward_bytes, bool rerun) {
    const double f = memory_bound_seconds(rates, forward_bytes);
    ops.push_back({op, f, memory_bound_seconds(rates, backward_bytes), 0, rerun ? f : 0});
  }
};

// The rates, the peak and the element size the products of `s` run at on `gpu`.
OpBuilder op_builder(const ClockShape& s, const GpuSpec& gpu) {
  return {clock_rates(gpu),
          matmul_peak_flops(gpu, s.activation_bytes),
          static_cast<double>(s.activation_bytes),
          {}};
}

}  // namespace

std::vector<OpTime> layer_ops(const ClockShape& s, const GpuSpec& gpu) {
  const ModelShape& m = s.model;
  DTRAIN_CHECK(s.tp >= 1 && m.heads % s.tp == 0, "layer_ops: --tp ", s.tp,
               " must divide the heads ", m.heads);
  DTRAIN_CHECK(s.cp >= 1 && m.seq % s.cp == 0, "layer_ops: --cp ", s.cp,
               " must divide the sequence ", m.seq);
  const double b = static_cast<double>(s.micro_batch), seq = static_cast<double>(m.seq);
  const double seq_local = seq / s.cp;  // this rank's queries (and every per-token tensor)
  const double h = static_cast<double>(m.hidden), t = s.tp;
  const double f = static_cast<double>(m.ffn_or_default());
  const double hs_qk = static_cast<double>(attention_qk_width(m)) / static_cast<double>(m.heads);
  const double hs_v = static_cast<double>(attention_v_width(m)) / static_cast<double>(m.heads);
  // Q, K, V's width: MLA's down and up products priced as one product of the same weights.
  const double qkv_width =
      m.mla.enabled()
          ? static_cast<double>(mla_matmul_param_count(m) - attention_v_width(m) * m.hidden) / h
          : h + 2 * static_cast<double>(m.kv_heads_or_heads()) * (h / static_cast<double>(m.heads));
  const double heads_local = static_cast<double>(m.heads) / t;
  const double tokens = b * seq_local;
  const double tokens_sp = s.sequence_parallel ? tokens / t : tokens;  // LayerNorm, residual
  const double e = static_cast<double>(s.activation_bytes);
  const double mask = s.dropout ? 1 : 0;                    // a dropout mask: one byte per element
  const double scores = b * heads_local * seq_local * seq;  // elements of the s x s matrices
  const bool full = s.recompute == Recompute::full;
  const bool selective = s.recompute == Recompute::selective || full;
  const bool gated = m.family == ModelFamily::llama;
  OpBuilder o = op_builder(s, gpu);
  o.memory("layernorm 1", 2 * tokens_sp * h * e, 3 * tokens_sp * h * e, full);
  o.weight_matmul("qkv", tokens, qkv_width / t, h, full);
  o.activation_matmul("scores q k^t", seq_local, seq, hs_qk, b * heads_local, selective);
  o.memory("softmax", 2 * scores * e, 3 * scores * e, selective);
  if (s.dropout)
    o.memory("attention dropout", scores * (2 * e + 1), scores * (2 * e + 1), selective);
  o.activation_matmul("scores x v", seq_local, hs_v, seq, b * heads_local, selective);
  o.weight_matmul("projection", tokens, h, static_cast<double>(attention_v_width(m)) / t, full);
  o.memory("bias-dropout-residual 1", tokens_sp * h * (3 * e + mask),
           tokens_sp * h * (2 * e + mask), full);
  o.memory("layernorm 2", 2 * tokens_sp * h * e, 3 * tokens_sp * h * e, full);
  if (s.moe_layer) {
    const double fe = static_cast<double>(m.moe.expert_ffn > 0 ? m.moe.expert_ffn : f);
    const double copies = tokens * static_cast<double>(m.moe.top_k) * s.expert_load;
    const double shared = tokens * static_cast<double>(m.moe.shared_experts);
    o.weight_matmul("router", tokens, static_cast<double>(m.moe.experts), h, full);
    // Each copy read and written once to group the tokens by expert, and back.
    o.memory("permute", 2 * copies * h * e, 2 * copies * h * e, full);
    o.weight_matmul(gated ? "experts gate+up" : "experts up", copies, (gated ? 2 : 1) * fe / t, h,
                    full);
    o.memory(gated ? "experts swiglu" : "experts gelu", (gated ? 3 : 2) * copies * fe / t * e,
             (gated ? 5 : 3) * copies * fe / t * e, full);
    o.weight_matmul("experts down", copies, h, fe / t, full);
    if (shared > 0) {
      o.weight_matmul("shared experts up", shared, (gated ? 2 : 1) * fe / t, h, full);
      o.weight_matmul("shared experts down", shared, h, fe / t, full);
    }
    o.memory("unpermute and gates", 3 * copies * h * e, 3 * copies * h * e, full);
    o.memory("bias-dropout-residual 2", tokens_sp * h * (3 * e + mask),
             tokens_sp * h * (2 * e + mask), full);
    return o.ops;
  }
  o.weight_matmul(gated ? "mlp gate+up" : "mlp up", tokens, (gated ? 2 : 1) * f / t, h, full);
  o.memory(gated ? "swiglu" : "bias-gelu", (gated ? 3 : 2) * tokens * f / t * e,
           (gated ? 5 : 3) * tokens * f / t * e, full);
  o.weight_matmul("mlp down", tokens, h, f / t, full);
  o.memory("bias-dropout-residual 2", tokens_sp * h * (3 * e + mask),
           tokens_sp * h * (2 * e + mask), full);
  return o.ops;
}

std::vector<OpTime> head_ops(const ClockShape& s, const GpuSpec& gpu) {
  const ModelShape& m = s.model;
  const double tokens = static_cast<double>(s.micro_batch * m.seq) / s.cp;
  const double tokens_sp = s.sequence_parallel ? tokens / s.tp : tokens;
  const double h = static_cast<double>(m.hidden), e = static_cast<double>(s.activation_bytes);
  const double vocab_local = static_cast<double>(m.vocab) / s.tp;
  OpBuilder o = op_builder(s, gpu);
  o.memory("final layernorm", 2 * tokens_sp * h * e, 3 * tokens_sp * h * e, false);
  o.weight_matmul("logits", tokens, vocab_local, h, false);
  // Cross-entropy in fp32 over the vocabulary shard: the logits read, the fp32 softmax written
  // (kept for backward), then read back and the gradient written at the activation precision.
  o.memory("cross-entropy", tokens * vocab_local * (e + 4), tokens * vocab_local * (4 + e), false);
  return o.ops;
}

std::vector<OpTime> embedding_ops(const ClockShape& s, const GpuSpec& gpu) {
  const ModelShape& m = s.model;
  const double tokens = static_cast<double>(s.micro_batch * m.seq) / s.cp;
  const double h = static_cast<double>(m.hidden), e = static_cast<double>(s.activation_bytes);
  OpBuilder o = op_builder(s, gpu);
  // Token and position rows gathered and added (read two rows, write one); backward scatters
  // the gradient rows into the table's gradient (read one, read and write the row).
  o.memory("embedding", 3 * tokens * h * e, 3 * tokens * h * e, false);
  return o.ops;
}

PassTimes total(const std::vector<OpTime>& ops) {
  PassTimes p;
  for (const OpTime& op : ops) {
    p.forward_s += op.forward_s;
    p.backward_input_s += op.backward_input_s + op.recompute_s;
    p.backward_weight_s += op.backward_weight_s;
    p.recompute_s += op.recompute_s;
  }
  return p;
}

double optimizer_seconds(double params, StateBytes bytes, const GpuSpec& gpu, double tensors) {
  // Read: gradient, optimizer state; written: optimizer state and the weights; the gradients
  // once more for the global norm (clipping).
  const double moved =
      params * static_cast<double>(2 * bytes.grad + 2 * bytes.optimizer + bytes.param);
  return memory_bound_seconds(gpu.rates, moved, tensors);
}

Cluster effective_links(const Cluster& c) {
  Cluster out = c;
  const double share = c.gpu.rates.present ? c.gpu.rates.link_efficiency : 1.0;
  out.intra_node.bandwidth_bytes_per_s *= share;
  out.inter_node.bandwidth_bytes_per_s *= share;
  return out;
}

}  // namespace dtrain::plan
