// Expert parallelism inside a routed layer: each rank of an EP group of n ranks holds E/n
// experts (experts [rank E/n, (rank + 1) E/n), their slice of the stacked moe.fc/proj tensors)
// and routes its own tokens; the rows go to their experts' ranks and back through the hooks'
// all-to-alls (ep_hooks.h), between the serial layer's pieces (ops/moe.h):
//   forward   route, gather rows (grouped by expert, so by owner), exchange counts, dispatch,
//             the own experts' MLPs on the received rows (expert by expert, source by source),
//             combine the outputs back, sum each token's kept rows with its gates in choice order
//   backward  the gates' gradients and the outputs' gradients at the source, send those to the
//             experts, their MLP backward, the inputs' gradients back, the router's backward
// The token-side sums are the serial layer's, in the same order; only an expert's weight
// gradient sums its rows from every source in one product (then over the expert-data-parallel
// group), so an EP run equals the run without EP to float rounding.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "dtrain/model/ep_hooks.h"
#include "dtrain/model/ops/moe.h"
#include "dtrain/model/param_table.h"
#include "dtrain/model/tp_shard.h"

namespace dtrain::model {

// What one routed layer's forward leaves for its backward under EP (beside its routing and the
// expert cache, which holds this rank's experts' received rows expert by expert).
struct MoeEpState {
  std::vector<int64_t> send_rows;     // (n) rows this rank sent to each EP rank
  std::vector<int64_t> recv_rows;     // (n) rows it received from each
  std::vector<int64_t> expert_begin;  // (E/n + 1) the own experts' rows in the expert cache
  std::vector<int64_t> expert_row;    // (received rows) source-major row -> expert cache row
  std::vector<float> y;               // (sent rows, C) expert outputs back, in routing order
};

// Whether a parameter tensor is a routed layer's stacked experts (h.l.moe.fc.w/b, moe.proj.w/b;
// not the router): the tensors EP cuts by their first dimension, the expert.
bool is_expert_tensor(std::string_view name);
// `whole` with each expert tensor's first dimension E/ep (same names and order); ep = 1 returns
// `whole`.
ParamTable ep_local_table(const ParamTable& whole, const MoeConfig& m, int ep);

// A stacked expert tensor's elements that the rank at (ep_rank, tp_rank) holds, in its order:
// its experts' run of the serial tensor [ep_rank E/ep, (ep_rank + 1) E/ep), each expert cut for
// TP as tp_slice cuts it (model/tp_shard.h). ep = tp = 1: the whole tensor. (Initialisation
// and checkpoints.)
std::vector<FlatRange> expert_slice_ranges(const ParamTensor& whole, const GptConfig& config,
                                           int tp, int tp_rank, int ep, int ep_rank);
std::vector<float> expert_slice(const ParamTensor& whole, std::span<const float> values,
                                const GptConfig& config, int tp, int tp_rank, int ep, int ep_rank);

// Experts on each EP rank; throws Error naming --ep and --experts unless ep divides E.
int64_t experts_per_rank(const MoeConfig& m, int ep);

// The layer's forward after moe_route on this rank's tokens: out (N, C); `w` holds the router
// (E, C) and this rank's E/n experts. Under TP (`tp`, size > 1) the EP group is the ranks with
// this tp_rank: every TP rank routes the same tokens and exchanges the same whole rows with its
// peers of the same tp_rank, and its experts' slices run as moe_experts_forward's expert TP.
void moe_ep_forward(float* out, MoeEpState& st, MoeExpertCache& cache, const MoeRouting& r,
                    const float* x, const MoeWeights& w, int64_t C, const MoeConfig& m,
                    ExpertParallelHooks& ep, const Compute& cx = {},
                    TensorParallelHooks* tp = nullptr);
// Its backward: dx (N, C) accumulated, the router's and the own experts' gradients accumulated.
void moe_ep_backward(float* dx, const MoeGrads& dw, const float* dout, const MoeEpState& st,
                     const MoeExpertCache& cache, const MoeRouting& r, const float* x,
                     const MoeWeights& w, int64_t C, const MoeConfig& m, double aux_scale,
                     ExpertParallelHooks& ep, const Compute& cx = {},
                     TensorParallelHooks* tp = nullptr, MoeWeightGradStash* keep = nullptr);

}  // namespace dtrain::model
