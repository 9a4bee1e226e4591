// head_activation_bytes / workspace_activation_bytes: the lists in the header, summed.
#include "dtrain/cost/head_activation_memory.h"

#include <algorithm>

#include "dtrain/core/check.h"

namespace dtrain::plan {
namespace {

void check_shape(const HeadActivationShape& x) {
  DTRAIN_CHECK(x.seq > 0 && x.micro_batch > 0 && x.hidden > 0 && x.vocab > 0 &&
                   x.bytes_per_element > 0 && x.threads > 0 && x.tp > 0,
               "head activation memory: sizes must be positive (seq ", x.seq, ", micro_batch ",
               x.micro_batch, ", hidden ", x.hidden, ", vocab ", x.vocab, ")");
}

}  // namespace

double head_activation_bytes(const HeadActivationShape& x) {
  check_shape(x);
  const double s = static_cast<double>(x.seq), b = static_cast<double>(x.micro_batch);
  const double h = static_cast<double>(x.hidden), v = static_cast<double>(x.vocab);
  const double e = static_cast<double>(x.bytes_per_element);
  const double elements = 2 * s * b * h + s * b * v;           // final LN input and output, logits
  const double four_byte_words = (x.rms_norm ? 1 : 2) * s * b  // LN mean and 1/std (RMS: 1/rms)
                                 + s * b                       // losses
                                 + 2 * s * b;                  // token ids and targets
  return e * elements + 4.0 * four_byte_words;
}

double workspace_activation_bytes(const HeadActivationShape& x) {
  check_shape(x);
  const double s = static_cast<double>(x.seq), b = static_cast<double>(x.micro_batch);
  const double h = static_cast<double>(x.hidden);
  const double f = x.ffn_hidden > 0 ? static_cast<double>(x.ffn_hidden) : 4.0 * h;
  const double e = static_cast<double>(x.bytes_per_element);
  const double n = x.blockwise_attention ? 0.0 : static_cast<double>(x.threads);
  const double t = static_cast<double>(x.tp);
  // K/V heads as TP holds them (a copy of one a rank above them: max(kv, t) / t).
  const double kv =
      x.heads > 0 && x.kv_heads > 0
          ? static_cast<double>(std::max<int64_t>(x.kv_heads, x.tp)) / static_cast<double>(x.heads)
          : 1.0;
  const double mlp = x.gated_mlp ? 3.0 : 2.0;
  return e * ((1 + 2) * s * b * h + (1 + 2 * kv) * s * b * h / t + mlp * f * s * b + n * s * s);
}

double stage_boundary_activation_bytes(const HeadActivationShape& x, int stages, int chunks,
                                       int stage) {
  check_shape(x);
  DTRAIN_CHECK(stages >= 1 && chunks >= 1 && stage >= 0 && stage < stages,
               "stage boundary activations: stage ", stage, " of ", stages, " with ", chunks,
               " chunks");
  if (stages == 1) return 0;
  const double s = static_cast<double>(x.seq), b = static_cast<double>(x.micro_batch);
  const double h = static_cast<double>(x.hidden);
  const double e = static_cast<double>(x.bytes_per_element);
  const double outputs = chunks - (stage == stages - 1 ? 1 : 0);
  const double ids = stage == 0 ? s * b : 0;
  return e * outputs * s * b * h + 4.0 * ids;
}

}  // namespace dtrain::plan
