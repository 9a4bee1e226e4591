// FLOPs of a training step, by the two conventions the planner offers, and what recompute adds.
//
// Narayanan et al. 2021 §5.1 count a layer's forward as 24Bsh^2 + 4Bs^2h FLOPs (its four
// h x h-sized matrix multiplies plus attention's QK^T and scores x V, 2 FLOPs per multiply-add)
// and the logit layer's as 2BshV. Backward costs twice the forward. So, per step of B sequences:
//   without recompute   3 l (24Bsh^2 + 4Bs^2h) + 3 * 2BshV = 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
//   full recompute      + l (24Bsh^2 + 4Bs^2h) (the forward once more, logits excluded)
//                       = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))        (their Eq. 3)
//   selective recompute, as the work redone: + l * 4Bs^2h (attention's two s x s products run
//                       forward once more): SelectiveFlops::rerun, what step time charges;
//                       as Korthikanti et al. 2022 count it for HFU (their Eq. 8):
//                       72 B s l h^2 (1 + s/(3h) + V/(12 l h)), i.e. + l * 12Bs^2h, the s x s
//                       products' forward and backward counted once more. Megatron-LM's published
//                       MFU/HFU pairs follow Eq. 8 (tests/cost/compute_model_test.cc), so it is
//                       HFU's default: SelectiveFlops::korthikanti_eq8.
// For other shapes the 24h^2 generalises to 2 x the layer's matrix-multiply weights (GQA, SwiGLU).
// The 6ND convention counts 6 FLOPs per parameter per token (Kaplan et al. 2020): it ignores the
// attention s^2 term and charges embeddings as if they were matrix multiplies; full recompute
// adds 2ND (8ND in all), selective the same per-layer term as above.
//
// MFU counts model FLOPs only (no recompute): model FLOPs / (step time x GPUs x peak).
//
// Mixture of experts (moe.h): a routed layer's forward counts the weights one token passes
// through, 2 x (attention + router + (k + S) experts) per token, so model FLOPs, MFU and 6ND
// (N = active_param_count) are counted on active parameters, as DeepSeek-V3 and Megatron-core
// report them; the experts a token skips cost nothing. With multi-head latent attention the s^2
// term is 2 tokens s (a d_qk + a d_v) instead of 4 tokens s h.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "dtrain/cost/activation_memory.h"
#include "dtrain/cost/model_presets.h"

namespace dtrain::plan {

enum class FlopsConvention { narayanan, six_nd };
std::string_view name(FlopsConvention c);  // "narayanan", "6nd"
std::optional<FlopsConvention> parse_flops_convention(std::string_view s);

// Forward FLOPs of one transformer layer over `tokens` tokens of `seq`-long sequences:
// 2 * tokens * layer_matmul_param_count + 4 * tokens * seq * h.
double layer_forward_flops(const ModelShape& m, double tokens, double seq);
// The same for a routed layer: 2 * tokens * moe_layer_active_matmul_param_count + the s^2 term.
double moe_layer_forward_flops(const ModelShape& m, double tokens, double seq);
// N of 6ND: param_count, or for an MoE model active_param_count (scaled to --params when set).
int64_t model_flops_param_count(const ModelShape& m);
// Forward FLOPs of the logit layer: 2 * tokens * h * V.
double logits_forward_flops(const ModelShape& m, double tokens);
// How selective recompute's FLOPs are counted (full and none have one count).
enum class SelectiveFlops {
  korthikanti_eq8,  // 12 * tokens * seq * h per layer: Korthikanti et al. 2022 Eq. 8's HFU
  rerun,            // 4 * tokens * seq * h per layer: the forward of the s x s products, rerun
};
std::string_view name(SelectiveFlops c);  // "eq8", "rerun"
std::optional<SelectiveFlops> parse_selective_flops(std::string_view s);

// FLOPs recompute adds to one layer's backward: its forward (full), attention's s^2 products
// (selective, counted as `selective` says), nothing (none).
double recompute_flops_per_layer(const ModelShape& m, double tokens, double seq, Recompute r,
                                 SelectiveFlops selective = SelectiveFlops::rerun);

struct TrainingFlops {
  double model = 0;      // forward + backward, no recompute: what MFU counts
  double recompute = 0;  // what recompute adds
  double hardware() const { return model + recompute; }
};

// FLOPs of one step over `sequences` sequences of m.seq tokens, in convention `c`, selective
// recompute counted as `selective` says.
TrainingFlops training_flops(const ModelShape& m, double sequences, Recompute r, FlopsConvention c,
                             SelectiveFlops selective = SelectiveFlops::korthikanti_eq8);

// Wall-clock days to train `tokens` at `tokens_per_s`.
double days_to_train(double tokens, double tokens_per_s);

}  // namespace dtrain::plan
