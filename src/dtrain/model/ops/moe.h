// Mixture-of-experts MLP (Switch / GShard style): a linear router (no bias), softmax over the E
// experts, top-k per token (ties: the lower expert index wins), gates renormalised over the
// chosen k, E expert MLPs of the dense MLP's shape (GPT's fc, GELU, proj with biases; Llama's
// SwiGLU, [gate | up] then down without biases: Mixtral's experts), a capacity per expert
// (assignments past it are dropped in token order: their output is zero, the residual carries
// the token) and the load-balancing loss aux = E * sum_e f_e * P_e, with f_e the fraction of the
// N*k router choices that picked e (before dropping) and P_e the mean router probability of e.
// f_e is a count, so the loss's gradient flows through P_e only (as in Switch and Megatron).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dtrain/model/gemm.h"
#include "dtrain/model/moe_config.h"
#include "dtrain/model/tp_hooks.h"

namespace dtrain::model {

struct MoeWeightGradStash;  // below, with the split backward's pieces

// An expert MLP's widths on one TP rank: its first product's outputs (GPT's H = 4C/tp, or
// SwiGLU's [gate | up], 2F/tp) and its activation's, proj's inputs (4C/tp, or F/tp). A gated
// (SwiGLU) expert has no biases.
struct MoeExpertWidths {
  int64_t fc = 0, act = 0;
  bool gated() const { return fc != act; }
};
// GPT's experts (fc, act = 4C/tp) or Llama's (2F/tp, F/tp).
MoeExpertWidths moe_expert_widths(int64_t C, int64_t ffn, bool gated, int tp = 1);

// One MoE block's parameters (or, at the same offsets, gradients). H = widths.fc, A = widths.act;
// the biases are null for gated experts.
struct MoeWeights {
  const float* router_w;  // (E, C)
  const float* fc_w;      // (E, H, C)
  const float* fc_b;      // (E, H)
  const float* proj_w;    // (E, C, A)
  const float* proj_b;    // (E, C)
  MoeExpertWidths widths;
};
struct MoeGrads {
  float* router_w;  // (E, C)
  float* fc_w;      // (E, H, C)
  float* fc_b;      // (E, H)
  float* proj_w;    // (E, C, A)
  float* proj_b;    // (E, C)
};

// Several ranks routing one micro-batch's tokens between them (context parallelism: each holds
// runs of consecutive tokens of every sequence). Capacity and the aux loss are the whole
// micro-batch's, so the group routes as the serial model does (Megatron likewise reduces the
// routing counts over the context-parallel group). The serial layer routes alone (no group).
class MoeRouteGroup {
 public:
  virtual ~MoeRouteGroup() = default;
  virtual int size() const = 0;        // ranks sharing the micro-batch
  virtual int rank() const = 0;        // this rank's place among them
  virtual int64_t tokens() const = 0;  // N of the whole micro-batch
  virtual int64_t runs() const = 0;    // runs of consecutive micro-batch tokens each rank holds
  // The run of this rank's local token n (non-decreasing in n, from 0 to runs() - 1).
  virtual int64_t run_of(int64_t n) const = 0;
  // Where rank q's run j starts in the micro-batch's token order (its first token's index).
  virtual int64_t run_start(int q, int64_t j) const = 0;
  // A collective: every rank's `values` (n each), rank q's at [q n, (q + 1) n), bit for bit.
  virtual std::vector<double> gather(std::span<const double> values) = 0;
};

// The router's decision for N tokens, and what it measured.
struct MoeRouting {
  int64_t tokens = 0;              // N
  std::vector<float> probs;        // (N, E) softmax of the router logits
  std::vector<int32_t> expert;     // (N, k) chosen experts, best first
  std::vector<float> gate;         // (N, k) renormalised gates
  std::vector<int32_t> slot;       // (N, k) row in the expert's batch, -1 when dropped
  std::vector<int64_t> kept;       // (E) assignments each expert took (after capacity)
  std::vector<int64_t> chosen;     // (E) router choices per expert (before capacity)
  std::vector<int64_t> row_begin;  // (E + 1) prefix sums of kept: expert e's rows in the batches
  std::vector<int32_t> row_token;  // (sum kept) the token of each expert batch row
  int64_t dropped = 0;             // assignments past capacity
  double aux_loss = 0;             // E * sum_e f_e * P_e
  // What the aux loss is taken over: the whole micro-batch's tokens and router choices per
  // expert (a route group's, else N and `chosen`), and the ranks that share it (each rank's
  // share of the aux gradient is scaled by them, as the group's gradients are averaged).
  int64_t aux_tokens = 0;
  std::vector<int64_t> aux_chosen;  // (E)
  int aux_ranks = 1;
};

// What the router did over some micro-batches and MoE blocks (a step's routing report).
struct MoeCounts {
  std::vector<int64_t> expert_tokens;  // (E) assignments each expert took, summed
  int64_t assignments = 0;             // router choices: N * k per block and micro-batch
  int64_t dropped = 0;                 // choices past an expert's capacity
  double aux_loss_sum = 0;             // sum of each micro-batch's aux (summed over its blocks)
  int64_t microbatches = 0;            // micro-batches whose aux is in aux_loss_sum
  // Rows this rank's experts computed, one entry per block and micro-batch (the routed copies
  // kept, or under EP the rows received): what expert TP all-reduces (cost/moe.h).
  std::vector<int64_t> expert_rows;
  // Each add()'s kept counts in order: (E) per block and micro-batch, what the engine clock is
  // priced with after the run (clock/engine_clock.h, block_routings).
  std::vector<int64_t> block_kept;
  void add(const MoeRouting& r);  // one block of one micro-batch (not the aux)
};

// One token's top-k of its E probabilities `p` into chosen (k): highest first, the lower
// expert index first on a tie (the order k repeated arg-max scans with a strict > give). A
// partial sort of the indices, O(E log k); `order` is scratch (E). A row holding a NaN takes
// the scans' order.
void choose_top_k(int32_t* chosen, const float* p, int64_t E, int64_t k,
                  std::vector<int32_t>& order);
// The reference: k arg-max scans over the experts not chosen yet, O(k^2 E).
void choose_top_k_by_scans(int32_t* chosen, const float* p, int64_t E, int64_t k);

// Routes x: logits, softmax, top-k, gates, capacity, aux loss. With a `group` the N tokens are
// this rank's share of the group's micro-batch: the capacity is the whole micro-batch's and an
// assignment is kept when fewer than it went to its expert from the tokens before it in the
// micro-batch's order (on any rank); the aux loss is the whole micro-batch's, the same on every
// rank.
void moe_route(MoeRouting& r,
               const float* x,         // (N, C)
               const float* router_w,  // (E, C)
               int64_t N, int64_t C, const MoeConfig& m, const Compute& cx = {},
               MoeRouteGroup* group = nullptr);

// What the expert MLPs keep for their backward: each expert's rows back to back, expert e's at
// [row_begin[e], row_begin[e+1]).
struct MoeExpertCache {
  std::vector<float> x;        // (rows, C) gathered inputs
  std::vector<float> fc;       // (rows, H) the activation's inputs
  std::vector<float> fc_gelu;  // (rows, A) its outputs (GELU, or SwiGLU's)
  std::vector<float> y;        // (rows, C) expert outputs (before the gate)
};

// out (N, C) = sum over each token's kept assignments of gate * expert(x); a token whose
// assignments were all dropped gets 0.
void moe_forward(float* out,  // (N, C)
                 MoeExpertCache& cache, const MoeRouting& r,
                 const float* x,  // (N, C)
                 const MoeWeights& w, int64_t N, int64_t C, const MoeConfig& m,
                 const Compute& cx = {}, TensorParallelHooks* tp = nullptr);

// Accumulates dx (N, C) and the parameter gradients of L, where dout = dL/dout and the loss
// also holds aux_scale * aux (aux_scale = a * dloss). An expert that took no rows adds nothing
// to its weights' gradients.
void moe_backward(float* dx,  // (N, C)
                  const MoeGrads& dw,
                  const float* dout,  // (N, C)
                  const MoeExpertCache& cache, const MoeRouting& r,
                  const float* x,  // (N, C)
                  const MoeWeights& w, int64_t N, int64_t C, const MoeConfig& m, double aux_scale,
                  const Compute& cx = {}, TensorParallelHooks* tp = nullptr,
                  MoeWeightGradStash* keep = nullptr);

// --- the layer's pieces, which moe_forward and moe_backward run in a row and expert parallelism
// (model/moe_dispatch.h) runs with its exchanges between them. `row_begin` (experts + 1) is
// where each of the experts in `w` starts in the rows: the routing's for the serial layer, the
// received rows' for an expert-parallel rank's own experts.

// x_rows (rows, C) = the token of each of the routing's expert rows.
void moe_gather_rows(float* x_rows, const MoeRouting& r, const float* x, int64_t C);
// The experts' MLPs on cache.x (rows, C), filled by the caller: cache.fc, fc_gelu and y.
// Expert tensor parallelism (a `tp` group of n > 1): `w` holds each expert's 1/n of fc's rows
// (a SwiGLU expert's slice of gate and of up) and of proj's columns (model/tp_shard.h), its
// widths are the rank's, and y, the row-parallel partial sums, is all-reduced over the group
// (g) before proj's bias is added: whole and the same on every rank. Every rank of the group must
// call with the same rows.
void moe_experts_forward(MoeExpertCache& cache, std::span<const int64_t> row_begin,
                         const MoeWeights& w, int64_t C, const Compute& cx = {},
                         TensorParallelHooks* tp = nullptr);
// out (N, C) = sum over each token's kept assignments, in choice order, of gate * y (the
// routing's rows).
void moe_combine(float* out, const MoeRouting& r, const float* y, int64_t C);
// The combine's backward: dy (rows, C) = gate * dout per kept assignment, dgate (N*k) =
// <dout, y>.
void moe_combine_backward(float* dy, std::vector<double>& dgate, const MoeRouting& r,
                          const float* dout, const float* y, int64_t C);
// What a split (zero-bubble) backward keeps from its input half for its weight half: the
// experts' output gradients and their fc outputs' gradients, with the rows' expert boundaries.
struct MoeWeightGradStash {
  std::vector<float> dy;           // (rows, C)
  std::vector<float> dfc;          // (rows, H)
  std::vector<int64_t> row_begin;  // (experts + 1)
};

// The experts' MLP backward: dx_rows (rows, C) and the experts' weight gradients (accumulated).
// Under expert TP, dy (rows, C) is whole on every rank, so proj's bias gradient is too; the
// column-parallel fc leaves partial input gradients, all-reduced over the group (f's conjugate),
// so dx_rows must hold zeros on entry.
void moe_experts_backward(float* dx_rows, const MoeGrads& dw, const float* dy,
                          const MoeExpertCache& cache, std::span<const int64_t> row_begin,
                          const MoeWeights& w, int64_t C, const Compute& cx = {},
                          TensorParallelHooks* tp = nullptr, MoeWeightGradStash* keep = nullptr);
// With `keep` moe_experts_backward runs only the input halves of its products (dx_rows; the
// weight and bias gradients are left for this, which adds them from `kept` and the cache): the
// same sgemm calls on the same data, so the gradients are the fused backward's bits.
void moe_experts_backward_weight(const MoeGrads& dw, const MoeWeightGradStash& kept,
                                 const MoeExpertCache& cache, const MoeExpertWidths& widths,
                                 int64_t C, const Compute& cx = {});
// Back to the tokens: dx (N, C) += each token's kept rows of dx_rows in choice order, then the
// router's backward through the gates (dgate) and the aux loss (aux_scale).
void moe_router_backward(float* dx, const MoeGrads& dw, const float* dx_rows,
                         const std::vector<double>& dgate, const MoeRouting& r, const float* x,
                         const MoeWeights& w, int64_t C, const MoeConfig& m, double aux_scale,
                         const Compute& cx = {});

}  // namespace dtrain::model
