// activation_bytes_per_layer: the component sum written out in activation_memory.h; what a
// recompute mode drops from it; and weight_grad_stash_bytes_per_layer, what a split backward
// keeps from B to W.
#include "dtrain/cost/activation_memory.h"

#include <algorithm>

#include "dtrain/core/check.h"

namespace dtrain::plan {

double activation_bytes_per_layer(const ActivationShape& x) {
  DTRAIN_CHECK(x.seq > 0 && x.micro_batch > 0 && x.hidden > 0 && x.heads > 0 && x.tp > 0,
               "activation_bytes_per_layer: sizes must be positive (seq ", x.seq, ", micro_batch ",
               x.micro_batch, ", hidden ", x.hidden, ", heads ", x.heads, ", tp ", x.tp, ")");
  const double s = static_cast<double>(x.seq), b = static_cast<double>(x.micro_batch);
  const double h = static_cast<double>(x.hidden), a = static_cast<double>(x.heads);
  const double t = static_cast<double>(x.tp);
  const double ffn = x.ffn_hidden > 0 ? static_cast<double>(x.ffn_hidden) : 4.0 * h;
  const double e = static_cast<double>(x.bytes_per_element);
  // The tensors an elementwise backward reads (see ActivationShape).
  const double ew = x.elementwise_bytes_per_element > 0
                        ? static_cast<double>(x.elementwise_bytes_per_element)
                        : e;
  const double sbh = s * b * h;
  // Parts that TP replicates and sequence parallelism splits.
  const double replicated_split = x.sequence_parallel ? t : 1.0;

  if (x.recompute == Recompute::full) {
    // Only the layer input is kept; the forward is re-run during backward.
    return ew * sbh / replicated_split;
  }
  double bytes = 0;
  double mask_bytes = 0;
  bytes += (2 * ew + 2 * e) * sbh / replicated_split;  // LN1 and LN2 inputs; QKV and MLP inputs
  // K/V heads as TP holds them: kv / t a rank, or with more TP ranks than K/V heads a copy of one
  // on each (max(kv, t) / t).
  const double kv =
      x.kv_heads > 0 ? static_cast<double>(std::max<int64_t>(x.kv_heads, x.tp)) / a : 1.0;
  bytes += e * (2 + 2 * kv) * sbh / t;  // Q, projection input; K, V
  // GELU input and second linear input; SwiGLU keeps the gate and up outputs and the down input.
  bytes += ((x.gated_mlp ? 2 : 1) * ew + e) * ffn * s * b / t;
  if (x.dropout) mask_bytes += 2 * sbh / replicated_split;  // attention and MLP dropout masks
  if (x.recompute == Recompute::none) {
    const double scores = a * s * s * b / t;
    bytes += ew * scores;  // softmax output
    if (x.dropout) {
      mask_bytes += scores;  // softmax dropout mask
      bytes += e * scores;   // dropout output (the AV product's input)
    }
  }
  bytes += mask_bytes;
  if (x.count_layernorm_stats) {
    bytes += (x.rms_norm ? 2.0 : 4.0) * 4.0 * s * b / replicated_split;
  }
  return bytes;
}

double recompute_scratch_bytes(const ActivationShape& x) {
  ActivationShape kept_all = x;
  kept_all.recompute = Recompute::none;
  return activation_bytes_per_layer(kept_all) - activation_bytes_per_layer(x);
}

double weight_grad_stash_bytes_per_layer(const ActivationShape& x) {
  DTRAIN_CHECK(x.seq > 0 && x.micro_batch > 0 && x.hidden > 0 && x.heads > 0 && x.tp > 0,
               "weight_grad_stash_bytes_per_layer: sizes must be positive (seq ", x.seq,
               ", micro_batch ", x.micro_batch, ", hidden ", x.hidden, ", heads ", x.heads, ", tp ",
               x.tp, ")");
  const double sb = static_cast<double>(x.seq) * static_cast<double>(x.micro_batch);
  const double h = static_cast<double>(x.hidden), t = static_cast<double>(x.tp);
  const double ffn = x.ffn_hidden > 0 ? static_cast<double>(x.ffn_hidden) : 4.0 * h;
  const double kv = x.kv_heads > 0 ? static_cast<double>(std::max<int64_t>(x.kv_heads, x.tp)) /
                                         static_cast<double>(x.heads)
                                   : 1.0;  // a copy of one K/V head per rank above them
  const double qkv = (1 + 2 * kv) * h / t;
  const double fc = (x.gated_mlp ? 2 : 1) * ffn / t;  // SwiGLU: gate and up outputs
  // qkv, attention projection (whole h), MLP fc, MLP projection (whole h)
  return static_cast<double>(x.bytes_per_element) * sb * (qkv + h + fc + h);
}

}  // namespace dtrain::plan
