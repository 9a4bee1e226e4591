// FLOPs of a training step, by the two conventions the planner offers, and what recompute adds.
//
// Narayanan et al. 2021 §5.1 count a layer's forward as 24Bsh^2 + 4Bs^2h FLOPs (its four
// h x h-sized matrix multiplies plus attention's QK^T and scores x V, 2 FLOPs per multiply-add)
// and the logit layer's as 2BshV. Backward costs twice the forward. So, per step of B sequences:
//   without recompute   3 l (24Bsh^2 + 4Bs^2h) + 3 * 2BshV = 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
//   full recompute      + l (24Bsh^2 + 4Bs^2h) (the forward once more, logits excluded)
//                       = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))        (their Eq. 3)
//   selective recompute + l * 4Bs^2h (only attention's two s x s products are redone)
// For other shapes the 24h^2 generalises to 2 x the layer's matrix-multiply weights (GQA, SwiGLU).
// The 6ND convention counts 6 FLOPs per parameter per token (Kaplan et al. 2020): it ignores the
// attention s^2 term and charges embeddings as if they were matrix multiplies; full recompute
// adds 2ND (8ND in all), selective the same l * 4Bs^2h as above.
//
// MFU counts model FLOPs only (no recompute): model FLOPs / (step time x GPUs x peak).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "dtrain/plan/activation_memory.h"
#include "dtrain/plan/model_presets.h"

namespace dtrain::plan {

enum class FlopsConvention { narayanan, six_nd };
std::string_view name(FlopsConvention c);  // "narayanan", "6nd"
std::optional<FlopsConvention> parse_flops_convention(std::string_view s);

// Forward FLOPs of one transformer layer over `tokens` tokens of `seq`-long sequences:
// 2 * tokens * layer_matmul_param_count + 4 * tokens * seq * h.
double layer_forward_flops(const ModelShape& m, double tokens, double seq);
// Forward FLOPs of the logit layer: 2 * tokens * h * V.
double logits_forward_flops(const ModelShape& m, double tokens);
// FLOPs recompute adds to one layer's backward: its forward (full), attention's s^2 products
// (selective: 4 * tokens * seq * h), nothing (none).
double recompute_flops_per_layer(const ModelShape& m, double tokens, double seq, Recompute r);

struct TrainingFlops {
  double model = 0;      // forward + backward, no recompute: what MFU counts
  double recompute = 0;  // what recompute adds
  double hardware() const { return model + recompute; }
};

// FLOPs of one step over `sequences` sequences of m.seq tokens, in convention `c`.
TrainingFlops training_flops(const ModelShape& m, double sequences, Recompute r, FlopsConvention c);

// Wall-clock days to train `tokens` at `tokens_per_s`.
double days_to_train(double tokens, double tokens_per_s);

}  // namespace dtrain::plan
