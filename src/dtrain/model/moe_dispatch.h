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
#include <string_view>
#include <vector>

#include "dtrain/model/ep_hooks.h"
#include "dtrain/model/ops/moe.h"
#include "dtrain/model/param_table.h"

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

// Experts on each EP rank; throws Error naming --ep and --experts unless ep divides E.
int64_t experts_per_rank(const MoeConfig& m, int ep);

// The layer's forward after moe_route on this rank's tokens: out (N, C); `w` holds the router
// (E, C) and this rank's E/n experts.
void moe_ep_forward(float* out, MoeEpState& st, MoeExpertCache& cache, const MoeRouting& r,
                    const float* x, const MoeWeights& w, int64_t C, const MoeConfig& m,
                    ExpertParallelHooks& ep, const Compute& cx = {});
// Its backward: dx (N, C) accumulated, the router's and the own experts' gradients accumulated.
void moe_ep_backward(float* dx, const MoeGrads& dw, const float* dout, const MoeEpState& st,
                     const MoeExpertCache& cache, const MoeRouting& r, const float* x,
                     const MoeWeights& w, int64_t C, const MoeConfig& m, double aux_scale,
                     ExpertParallelHooks& ep, const Compute& cx = {});

}  // namespace dtrain::model
