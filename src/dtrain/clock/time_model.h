// The clock: seconds of one training step's work, operation by operation, from the shapes the
// model's kernels have and the GPU's rates (rates.h). One micro-batch through one transformer
// layer on one TP rank is a list of operations, each with its forward, input-gradient (B) and
// weight-gradient (W) seconds:
//   matrix products  QKV, attention scores (Q K^T, one per head, batched), scores x V (batched),
//                    output projection, MLP up (gate and up for a gated MLP), MLP down; backward
//                    runs two products of the forward's size each (B: the input gradient, W: the
//                    weight gradient; the batched attention products have no weights: both B)
//   memory-bound     LayerNorm x2, softmax (scale and mask fused), attention dropout, GELU with
//                    its bias (SwiGLU for a gated MLP), bias-dropout-residual x2; each moves its
//                    bytes once (read + written) and pays one kernel call; sequence parallelism
//                    runs the LayerNorms and residuals on 1/tp of the tokens
//   routed layers    (ClockShape::moe_layer) the MLP's products become the router's, the
//                    experts' over the routed copies and the shared experts'; MLA's products
//                    are priced as one QKV product of its weights' width
// The head adds the final norm, the logit product and the cross-entropy (fp32 softmax over the
// vocabulary shard); the first stage the embedding lookup. Recompute charges B with the forward
// it reruns: full reruns the whole layer, selective the scores, softmax, dropout and scores x V.
// The optimizer step reads and writes every state byte of the rank's shard once (AdamW, the
// fp32 main gradient, the bf16 weight copy). TP collectives, pipeline sends, the schedule and
// DP/ZeRO overlap are composed in the planner (plan/step_time.cc, plan/planner.cc) from
// comm_model.h and pipeline_model.h, with the links at rates.link_efficiency of their nominal
// bandwidth (effective_links below).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "dtrain/core/recompute.h"
#include "dtrain/cost/memory_model.h"
#include "dtrain/cost/model_presets.h"
#include "dtrain/machine/hardware.h"
#include "dtrain/machine/rates.h"

namespace dtrain::plan {

// What one TP rank computes for one micro-batch.
struct ClockShape {
  ModelShape model;
  int64_t micro_batch = 1;
  int tp = 1;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  int64_t activation_bytes = 2;  // bytes per activation element; 4 runs at the fp32 peak
  bool dropout = true;           // Megatron's GPT trains with dropout; Llama and dtrain without
  // Context parallelism (context_parallel.h): the rank holds model.seq / cp of each sequence's
  // tokens; its queries attend to all model.seq keys (the balanced causal split gives every
  // rank 1/cp of the attention products, whichever algorithm moves the K/V).
  int cp = 1;
  // Appended. Price a routed layer (moe.h): the router, the k routed copies of each token
  // through the expert MLPs (one grouped product per weight, the busiest rank's copies: tokens
  // x k x expert_load), the shared experts, and the permutes that gather each expert's tokens
  // and scatter them back; the all-to-all is priced in plan/step_time.cc.
  bool moe_layer = false;
  double expert_load = 1;
};

struct OpTime {
  std::string_view op;
  double forward_s = 0;
  double backward_input_s = 0;   // B
  double backward_weight_s = 0;  // W
  double recompute_s = 0;        // the forward rerun before B (in B's time, counted apart)
};

struct PassTimes {
  double forward_s = 0;
  double backward_input_s = 0;  // recompute included
  double backward_weight_s = 0;
  double recompute_s = 0;
  PassTimes& operator+=(const PassTimes& o);
  PassTimes scaled(double factor) const;
};

// The operations of one layer, of the head (final norm, logits, cross-entropy) and of the
// embedding, for one micro-batch on one TP rank.
std::vector<OpTime> layer_ops(const ClockShape& s, const GpuSpec& gpu);
std::vector<OpTime> head_ops(const ClockShape& s, const GpuSpec& gpu);
std::vector<OpTime> embedding_ops(const ClockShape& s, const GpuSpec& gpu);
PassTimes total(const std::vector<OpTime>& ops);

// The peak the activation precision runs at: bf16's (GpuSpec::peak_flops) for 2-byte
// activations, rates.fp32_peak_flops for 4 (the bf16 peak when the cluster has no rates).
double matmul_peak_flops(const GpuSpec& gpu, int64_t activation_bytes);

// Seconds of one optimizer step over `params` parameters held by this rank (its ZeRO shard),
// in `tensors` multi-tensor kernel calls: every state byte read once and the weights, moments
// and master copy written once, and the gradients read once more for the global norm.
double optimizer_seconds(double params, StateBytes bytes, const GpuSpec& gpu, double tensors);

// The cluster with each link's bandwidth at rates.link_efficiency of its nominal figure: what
// the collective formulas (comm_model.h) are priced with.
Cluster effective_links(const Cluster& c);

}  // namespace dtrain::plan
