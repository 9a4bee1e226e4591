// GptModel's block passes under sequence parallelism (Korthikanti et al. 2022, §4.2.2): the
// norms and residuals on this TP rank's rows, all-gathers before the column-parallel products
// and reduce-scatters after the row-parallel ones; the family's ops as in gpt.cc.
#include <vector>

#include "dtrain/model/block_ops.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/ops/matmul.h"
#include "dtrain/model/ops/residual.h"

namespace dtrain::model {

using block::matmul_backward_or_keep;
using block::norm_backward;
using block::norm_forward;
using block::Widths;
using block::widths;
using block::zero;

void GptModel::block_forward_sp(const GptActivations& acts, GptWorkspace& ws, int64_t l,
                                const LayerActivations& a, float* out) {
  using Site = TensorParallelHooks::SpSite;
  const int64_t B = acts.batch(), T = acts.seq(), C = config_.channels;
  const int64_t BT = B * T, rows = sp_rows(acts);
  const int64_t C_local = C / tp_->size(), NH_local = config_.heads / tp_->size();
  const LayerWeights& w = w_.layers[static_cast<size_t>(l)];
  const Widths wd = widths(config_, tp_->size());
  float* full = ws.d_btc2;        // (B, T, C) gathered LN output; then (rows, C) g's output
  float* linear_out = ws.d_btc1;  // (B, T, C) row-parallel output before g
  const Compute& cx = cx_;

  // attention: ln2_in = x + proj(attention(ln1(x))), x and ln2_in on this rank's rows
  norm_forward(config_, a.ln1_out, a.ln1_mean, a.ln1_rstd, a.ln1_in, w.ln1_w, w.ln1_b, 1, rows, C,
               cx);
  tp_->sp_all_gather(full, a.ln1_out, rows * C, Site::block_forward);  // f
  matmul_forward(a.qkv, full, w.qkv_w, w.qkv_b, BT, C, wd.qkv, cx);
  rotate_qk(a.qkv, B, T, false);
  attention_core_forward(acts, l, a, B, T, C_local, NH_local);
  matmul_forward(linear_out, a.atty, w.proj_w, nullptr, BT, C_local, C, cx);
  tp_->sp_reduce_scatter(full, linear_out, rows * C, Site::block_forward);  // g
  residual_forward(a.ln2_in, a.ln1_in, full, w.proj_b, rows, C, cx);

  // MLP: x_next = ln2_in + fc_proj(gelu(fc(ln2(ln2_in))))
  norm_forward(config_, a.ln2_out, a.ln2_mean, a.ln2_rstd, a.ln2_in, w.ln2_w, w.ln2_b, 1, rows, C,
               cx);
  tp_->sp_all_gather(full, a.ln2_out, rows * C, Site::block_forward);  // f
  if (w.moe_router_w != nullptr) {
    // Routed: the replicated router and the TP-split experts on the gathered rows; the experts'
    // g (an all-reduce of their rows) leaves the combined output whole, so this rank's rows are
    // taken from it where a dense block reduce-scatters.
    moe_mlp_forward(acts, l, full, linear_out);
    residual_forward(out, a.ln2_in, linear_out + tp_->rank() * rows * C, nullptr, rows, C, cx);
    return;
  }
  matmul_forward(a.fc, full, w.fc_w, w.fc_b, BT, C, wd.fc, cx);
  block::activation_forward(config_, a.fc_gelu, a.fc, BT, wd, cx);
  matmul_forward(linear_out, a.fc_gelu, w.fc_proj_w, nullptr, BT, wd.act, C, cx);
  tp_->sp_reduce_scatter(full, linear_out, rows * C, Site::block_forward);  // g
  residual_forward(out, a.ln2_in, full, w.fc_proj_b, rows, C, cx);
}

// block_backward under sequence parallelism; ws.dres holds this rank's rows. Each g's
// conjugate all-gathers dres before the row-parallel linear's backward (so its bias gradient
// sums all B*T rows, whole on every rank); the stored LN-output slice is all-gathered again for
// the column-parallel weight gradient (Korthikanti et al. 2022, §4.2.2), and f's conjugate
// reduce-scatters the LN output's gradient to the rows. The LayerNorms' weight and bias
// gradients are this slice's only: parallel::sp_all_reduce_layernorm_grads completes them.
void GptModel::block_backward_sp(GptActivations& acts, GptWorkspace& ws, int64_t l,
                                 BlockOutputGrads* keep) {
  using Site = TensorParallelHooks::SpSite;
  const int64_t B = acts.batch(), T = acts.seq(), C = config_.channels;
  const int64_t BT = B * T, rows = sp_rows(acts);
  const int64_t C_local = C / tp_->size(), NH_local = config_.heads / tp_->size();
  const LayerWeights& w = w_.layers[static_cast<size_t>(l)];
  const LayerWeights& dw = dw_.layers[static_cast<size_t>(l)];
  const Widths wd = widths(config_, tp_->size());
  const LayerActivations a = block_tensors(acts, ws, l);
  unpack_block(acts, l, a);
  recompute_block(acts, ws, l, a);
  const Compute& cx = cx_;
  float* dres = ws.dres;     // (rows, C): d block output on entry, d block input on exit
  float* full = ws.d_btc2;   // (B, T, C): gathered dres, gathered LN output; (rows, C) dln slice
  float* dfull = ws.d_btc1;  // (B, T, C): d LN output (partial); datty before it

  // With `keep` (split), W re-gathers the LN outputs its weight gradients read, so B skips
  // the re-gathers (block_backward_weight).
  // MLP
  tp_->sp_all_gather(full, dres, rows * C, Site::block_backward);  // g's conjugate
  if (w.moe_router_w != nullptr) {
    // The router's backward reads all rows of the LN output: re-gathered, as the dense block's
    // fc weight gradient does. The experts all-reduce their inputs' gradients, so dln is whole
    // (no reduce-scatter): this rank's rows go to the LayerNorm.
    std::vector<float> x(static_cast<size_t>(BT * C));
    tp_->sp_all_gather(x.data(), a.ln2_out, rows * C, Site::regather);
    zero(dfull, BT * C);
    moe_mlp_backward(acts, l, x.data(), full, dfull, keep != nullptr);
    norm_backward(config_, dres, dw.ln2_w, dw.ln2_b, dfull + tp_->rank() * rows * C, a.ln2_in,
                  w.ln2_w, a.ln2_mean, a.ln2_rstd, 1, rows, C);
  } else {
    zero(ws.dfc_gelu, BT * wd.act);
    matmul_backward_or_keep(ws.dfc_gelu, dw.fc_proj_w, dw.fc_proj_b, full, a.fc_gelu, w.fc_proj_w,
                            BT, wd.act, C, keep != nullptr ? keep->dfc_proj : nullptr, cx);
    zero(ws.dfc, BT * wd.fc);
    block::activation_backward(config_, ws.dfc, a.fc, ws.dfc_gelu, BT, wd, cx);
    if (keep == nullptr) tp_->sp_all_gather(full, a.ln2_out, rows * C, Site::regather);
    zero(dfull, BT * C);
    matmul_backward_or_keep(dfull, dw.fc_w, dw.fc_b, ws.dfc, full, w.fc_w, BT, C, wd.fc,
                            keep != nullptr ? keep->dfc : nullptr, cx);
    tp_->sp_reduce_scatter(full, dfull, rows * C, Site::block_backward);  // f's conjugate
    norm_backward(config_, dres, dw.ln2_w, dw.ln2_b, full, a.ln2_in, w.ln2_w, a.ln2_mean,
                  a.ln2_rstd, 1, rows, C);
  }

  // attention
  tp_->sp_all_gather(full, dres, rows * C, Site::block_backward);  // g's conjugate
  float* datty = dfull;                                            // (B, T, C_local)
  zero(datty, BT * C_local);
  matmul_backward_or_keep(datty, dw.proj_w, dw.proj_b, full, a.atty, w.proj_w, BT, C_local, C,
                          keep != nullptr ? keep->dproj : nullptr, cx);
  zero(ws.dqkv, BT * wd.qkv);
  attention_core_backward(acts, ws, l, a, datty, B, T, C_local, NH_local);
  rotate_qk(ws.dqkv, B, T, true);
  if (keep == nullptr) tp_->sp_all_gather(full, a.ln1_out, rows * C, Site::regather);
  zero(dfull, BT * C);
  matmul_backward_or_keep(dfull, dw.qkv_w, dw.qkv_b, ws.dqkv, full, w.qkv_w, BT, C, wd.qkv,
                          keep != nullptr ? keep->dqkv : nullptr, cx);
  tp_->sp_reduce_scatter(full, dfull, rows * C, Site::block_backward);  // f's conjugate
  norm_backward(config_, dres, dw.ln1_w, dw.ln1_b, full, a.ln1_in, w.ln1_w, a.ln1_mean, a.ln1_rstd,
                1, rows, C);
}

}  // namespace dtrain::model
