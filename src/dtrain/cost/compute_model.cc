// The FLOP counts of compute_model.h, term by term.
#include "dtrain/cost/compute_model.h"

#include "dtrain/core/check.h"

namespace dtrain::plan {

std::string_view name(FlopsConvention c) {
  switch (c) {
    case FlopsConvention::narayanan:
      return "narayanan";
    case FlopsConvention::six_nd:
      return "6nd";
  }
  return "?";
}

std::optional<FlopsConvention> parse_flops_convention(std::string_view s) {
  if (s == "narayanan") return FlopsConvention::narayanan;
  if (s == "6nd") return FlopsConvention::six_nd;
  return std::nullopt;
}

std::string_view name(SelectiveFlops c) {
  switch (c) {
    case SelectiveFlops::korthikanti_eq8:
      return "eq8";
    case SelectiveFlops::rerun:
      return "rerun";
  }
  return "?";
}

std::optional<SelectiveFlops> parse_selective_flops(std::string_view s) {
  if (s == "eq8") return SelectiveFlops::korthikanti_eq8;
  if (s == "rerun") return SelectiveFlops::rerun;
  return std::nullopt;
}

namespace {

// QK^T and scores x V forward: 2 tokens seq (a d_qk + a d_v), 4 tokens seq h for standard heads.
double attention_products_flops(const ModelShape& m, double tokens, double seq) {
  return 2.0 * tokens * seq * static_cast<double>(attention_qk_width(m) + attention_v_width(m));
}

}  // namespace

double layer_forward_flops(const ModelShape& m, double tokens, double seq) {
  const double matmul = 2.0 * tokens * static_cast<double>(layer_matmul_param_count(m));
  return matmul + attention_products_flops(m, tokens, seq);
}

double moe_layer_forward_flops(const ModelShape& m, double tokens, double seq) {
  const double matmul = 2.0 * tokens * static_cast<double>(moe_layer_active_matmul_param_count(m));
  return matmul + attention_products_flops(m, tokens, seq);
}

double logits_forward_flops(const ModelShape& m, double tokens) {
  return 2.0 * tokens * static_cast<double>(m.hidden) * static_cast<double>(m.vocab);
}

double recompute_flops_per_layer(const ModelShape& m, double tokens, double seq, Recompute r,
                                 SelectiveFlops selective) {
  switch (r) {
    case Recompute::none:
      return 0;
    case Recompute::selective: {
      // QK^T and scores x V: 4 * tokens * seq * h forward; Eq. 8 counts them forward and
      // backward (x3) once more.
      const double factor = selective == SelectiveFlops::korthikanti_eq8 ? 3.0 : 1.0;
      return factor * attention_products_flops(m, tokens, seq);
    }
    case Recompute::full:
      return layer_forward_flops(m, tokens, seq);
  }
  return 0;
}

TrainingFlops training_flops(const ModelShape& m, double sequences, Recompute r, FlopsConvention c,
                             SelectiveFlops selective) {
  DTRAIN_CHECK(sequences >= 0, "training_flops: sequences must be >= 0, got ", sequences);
  const double seq = static_cast<double>(m.seq);
  const double tokens = sequences * seq;
  const double layers = static_cast<double>(m.layers);
  // Routed layers count the weights a token passes through (moe.h): MFU on active parameters.
  const double routed = static_cast<double>(moe_layer_count(m));
  const double dense = layers - routed;
  TrainingFlops f;
  if (c == FlopsConvention::narayanan) {
    const double forward = dense * layer_forward_flops(m, tokens, seq) +
                           (routed > 0 ? routed * moe_layer_forward_flops(m, tokens, seq) : 0.0);
    f.model = 3.0 * (forward + logits_forward_flops(m, tokens));
    f.recompute = r == Recompute::full
                      ? forward
                      : layers * recompute_flops_per_layer(m, tokens, seq, r, selective);
  } else {
    const double n = static_cast<double>(model_flops_param_count(m));
    f.model = 6.0 * n * tokens;
    f.recompute = r == Recompute::full ? 2.0 * n * tokens
                  : r == Recompute::selective
                      ? layers * recompute_flops_per_layer(m, tokens, seq, r, selective)
                      : 0.0;
  }
  return f;
}

int64_t model_flops_param_count(const ModelShape& m) {
  return m.moe.enabled() ? scaled_to_override(m, active_param_count(m)) : param_count(m);
}

double days_to_train(double tokens, double tokens_per_s) {
  DTRAIN_CHECK(tokens_per_s > 0, "days_to_train: tokens_per_s must be positive");
  return tokens / tokens_per_s / 86400.0;
}

}  // namespace dtrain::plan
