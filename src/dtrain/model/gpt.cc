// GptModel: the block-by-block forward and backward passes over the ops in ops/.
// block_backward also runs split in two (input gradients, then weight gradients) for ZB-H1;
// under recompute a block's backward first re-creates the tensors its forward did not keep.
// (The parameters, their initialisation and the passes' storage: gpt_params.cc.)
#include "dtrain/model/gpt.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/model/block_ops.h"
#include "dtrain/model/cp_route_group.h"
#include "dtrain/model/moe_dispatch.h"
#include "dtrain/model/ops/attention.h"
#include "dtrain/model/ops/crossentropy.h"
#include "dtrain/model/ops/encoder.h"
#include "dtrain/model/ops/matmul.h"
#include "dtrain/model/ops/moe.h"
#include "dtrain/model/ops/residual.h"
#include "dtrain/model/ops/vocab_parallel.h"
#include "dtrain/model/tp_shard.h"

namespace dtrain::model {

using block::matmul_backward_or_keep;
using block::norm_backward;
using block::norm_forward;
using block::Widths;
using block::widths;
using block::zero;

namespace {

void check_batch(std::span<const int32_t> ids, int64_t BT, int64_t V, const char* what) {
  DTRAIN_CHECK(static_cast<int64_t>(ids.size()) == BT, what, ": expected ", BT,
               " token ids (B*T), got ", ids.size());
  for (int32_t id : ids) {
    DTRAIN_CHECK(id >= 0 && id < V, what, ": token id ", id, " is outside the vocabulary [0, ", V,
                 ")");
  }
}

// Full recompute's rerun of a block forward, for the TP hooks to count its f and g apart (and
// the model's `rerunning` flag: the CP group keeps its state from the rerun only); off again
// however the rerun ends.
class RecomputingScope {
 public:
  RecomputingScope(TensorParallelHooks& tp, ContextParallelHooks& cp, bool& rerunning)
      : tp_(tp), cp_(cp), rerunning_(rerunning) {
    tp_.set_recomputing(true);
    cp_.set_recomputing(true);
    rerunning_ = true;
  }
  ~RecomputingScope() {
    tp_.set_recomputing(false);
    cp_.set_recomputing(false);
    rerunning_ = false;
  }
  RecomputingScope(const RecomputingScope&) = delete;
  RecomputingScope& operator=(const RecomputingScope&) = delete;

 private:
  TensorParallelHooks& tp_;
  ContextParallelHooks& cp_;
  bool& rerunning_;
};

}  // namespace

const RopeTable& GptModel::rope_table(int64_t T) {
  if (rope_seq_ != T) {
    // Each token's angle from its position in the whole sequence (under CP its global one).
    std::vector<int64_t> positions(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) positions[static_cast<size_t>(t)] = cp_->position(t, T);
    rope_ = make_rope_table(positions, config_.head_size(), config_.rope_theta);
    rope_seq_ = T;
  }
  return rope_;
}

void GptModel::rotate_qk(float* qkv, int64_t B, int64_t T, bool backward) {
  if (!config_.llama()) return;
  // Kept rotated: what attention reads in forward and backward.
  const int tp = tp_->size();
  const int64_t heads = config_.heads / tp + config_.kv_heads_per_tp_rank(tp);
  const int64_t row = block::widths(config_, tp).qkv;
  if (backward) {
    rope_backward(qkv, rope_table(T), B, T, heads, row, cx_);
  } else {
    rope_forward(qkv, rope_table(T), B, T, heads, row, cx_);
  }
}

int64_t GptModel::vocab_local() const {
  return tp_->size() == 1 ? config_.vocab : tp_vocab_local(config_.vocab, tp_->size());
}

int64_t GptModel::vocab_begin() const {
  return tp_->size() == 1 ? 0 : tp_vocab_begin(config_.vocab, tp_->size(), tp_->rank());
}

float GptModel::forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                        int64_t B, int64_t T) {
  set_batch_shape(B, T);
  return forward(*acts_, *ws_, tokens, targets);
}

void GptModel::backward(float dloss) {
  backward(activations(), workspace(), dloss);
}

float GptModel::forward(GptActivations& acts, GptWorkspace& ws, std::span<const int32_t> tokens,
                        std::span<const int32_t> targets) {
  DTRAIN_CHECK(ws.batch == acts.batch() && ws.seq == acts.seq(), "GptModel: workspace shape (",
               ws.batch, ", ", ws.seq, ") differs from the activations' (", acts.batch(), ", ",
               acts.seq(), ")");
  DTRAIN_CHECK(ws.threads >= cx_.threads(), "GptModel: workspace for ", ws.threads,
               " threads, but the model's team has ", cx_.threads());
  DTRAIN_CHECK(local_index_.empty(), "GptModel::forward: a stage model runs piece by piece");
  embedding_forward(acts, ws, tokens);
  for (int64_t l = 0; l < config_.layers; ++l) block_forward(acts, ws, l);
  return head_forward(acts, targets);
}

void GptModel::backward(GptActivations& acts, GptWorkspace& ws, float dloss) {
  DTRAIN_CHECK(local_index_.empty(), "GptModel::backward: a stage model runs piece by piece");
  head_backward(acts, ws, dloss);
  for (int64_t l = config_.layers - 1; l >= 0; --l) block_backward(acts, ws, l);
  embedding_backward(acts, ws);
}

void GptModel::embedding_forward(GptActivations& acts, GptWorkspace& ws,
                                 std::span<const int32_t> tokens) {
  const int64_t B = acts.batch(), T = acts.seq(), C = config_.channels;
  check_batch(tokens, B * T, config_.vocab, "tokens");
  std::copy(tokens.begin(), tokens.end(), acts.head().tokens);
  // x_0 (B, T, C) = wte[tokens] + wpe[0..T) (under CP at each token's global position)
  const float* wpe = config_.llama() ? nullptr : position_rows(T);
  if (tp_->size() == 1) {
    encoder_forward(acts.layer(0).ln1_in, acts.head().tokens, w_.wte, wpe, B, T, C);
    return;
  }
  // Vocabulary-parallel: the rank holding a token's row contributes it, the others 0; the sum
  // over the group is exact (one non-zero term), then wpe is added as in the serial op.
  if (sp()) {
    // Sequence parallel: the partial embeddings of all B*T rows are reduce-scattered to this
    // rank's rows (the all-reduce above becomes a reduce-scatter: still one non-zero term per
    // row, exact), then wpe is added at each row's position t.
    float* full = ws.d_btc2;  // (B, T, C) scratch: free before the first block runs
    vocab_embedding_forward(full, acts.head().tokens, w_.wte, vocab_begin(), vocab_local(), B * T,
                            C);
    const int64_t rows = sp_rows(acts), begin = rows * tp_->rank();
    float* slice = acts.layer(0).ln1_in;  // (B*T/N, C)
    tp_->sp_reduce_scatter(slice, full, rows * C, TensorParallelHooks::SpSite::vocab);
    for (int64_t r = 0; wpe != nullptr && r < rows; ++r) {
      float* o = slice + r * C;
      const float* p = wpe + ((begin + r) % T) * C;
      for (int64_t i = 0; i < C; ++i) o[i] = o[i] + p[i];
    }
    return;
  }
  float* x = acts.layer(0).ln1_in;
  vocab_embedding_forward(x, acts.head().tokens, w_.wte, vocab_begin(), vocab_local(), B * T, C);
  tp_->all_reduce_sum(x, B * T * C);
  if (wpe == nullptr) return;  // rotary positions: nothing to add
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      float* o = x + (b * T + t) * C;
      const float* p = wpe + t * C;
      for (int64_t i = 0; i < C; ++i) o[i] = o[i] + p[i];
    }
  }
}

void GptModel::block_forward(GptActivations& acts, GptWorkspace& ws, int64_t l) {
  const LayerActivations a = block_tensors(acts, ws, l);
  if (sp()) {
    block_forward_sp(acts, ws, l, a, acts.block_output(l));
  } else {
    block_forward_dense(acts, ws, l, a, acts.block_output(l));
  }
  pack_block(acts, l, a);
}

namespace {

// Each packed tensor of a block with its fp32 working copy and its element count.
template <typename Fn>
void for_each_packed(const PackedLayer& p, const LayerActivations& a, const GptConfig& g, int64_t B,
                     int64_t T, int tp, int64_t rows, Fn fn) {
  const int64_t BT = B * T, C = g.channels, C_local = C / tp;
  fn(p.ln1_out, a.ln1_out, rows * C);
  const Widths w = widths(g, tp);
  fn(p.qkv, a.qkv, BT * w.qkv);
  fn(p.atty, a.atty, BT * C_local);
  fn(p.ln2_out, a.ln2_out, rows * C);
  fn(p.fc_gelu, a.fc_gelu, BT * w.act);
}

}  // namespace

void GptModel::pack_block(GptActivations& acts, int64_t l, const LayerActivations& a) const {
  if (!acts.packed()) return;
  for_each_packed(acts.packed_layer(l), a, config_, acts.batch(), acts.seq(), tp_->size(),
                  sp_rows(acts), [&](bf16* packed, const float* work, int64_t n) {
                    parallel_ranges(cx_.team, n, 4096, [&](Range r) {
                      to_bf16(work + r.begin, packed + r.begin, r.end - r.begin);
                    });
                  });
}

void GptModel::unpack_block(const GptActivations& acts, int64_t l,
                            const LayerActivations& a) const {
  if (!acts.packed()) return;
  for_each_packed(acts.packed_layer(l), a, config_, acts.batch(), acts.seq(), tp_->size(),
                  sp_rows(acts), [&](const bf16* packed, float* work, int64_t n) {
                    parallel_ranges(cx_.team, n, 4096, [&](Range r) {
                      to_float(packed + r.begin, work + r.begin, r.end - r.begin);
                    });
                  });
}

LayerActivations GptModel::block_tensors(const GptActivations& acts, const GptWorkspace& ws,
                                         int64_t l) const {
  DTRAIN_CHECK(acts.recompute() == recompute_ && ws.recompute == recompute_,
               "GptModel: activations (recompute ", name(acts.recompute()), ") and workspace (",
               name(ws.recompute), ") are not built for the model's recompute ", name(recompute_));
  DTRAIN_CHECK(recompute_ != Recompute::full || ws.sequence_parallel == sp(),
               "GptModel: full recompute needs a workspace built ", sp() ? "with" : "without",
               " sequence parallelism, as the model");
  // Packed activations need a bf16 model (their tensors are rounded as its products round
  // them) and the workspace's working copies.
  DTRAIN_CHECK(!acts.packed() || (bf16_activations() && ws.bf16_storage),
               "GptModel: bf16-stored activations need a bf16 model and a workspace built for "
               "them");
  LayerActivations a = acts.layer(l);
  if (acts.packed()) {
    // The packed tensors' fp32 working copies (in full recompute's scratch set), the block's
    // fp32 ones from the block (the softmax output from scratch where selective drops it).
    const LayerActivations kept = a;
    a = ws.dropped;
    a.ln1_in = kept.ln1_in;
    a.ln1_mean = kept.ln1_mean;
    a.ln1_rstd = kept.ln1_rstd;
    a.ln2_in = kept.ln2_in;
    a.ln2_mean = kept.ln2_mean;
    a.ln2_rstd = kept.ln2_rstd;
    a.fc = kept.fc;
    if (kept.att != nullptr) a.att = kept.att;
    return a;
  }
  switch (recompute_) {
    case Recompute::none:
      break;
    case Recompute::selective:
      a.att = ws.dropped.att;
      break;
    case Recompute::full: {
      float* input = a.ln1_in;
      a = ws.dropped;
      a.ln1_in = input;
      break;
    }
  }
  return a;
}

void GptModel::recompute_block(const GptActivations& acts, GptWorkspace& ws, int64_t l,
                               const LayerActivations& a) {
  switch (recompute_) {
    case Recompute::none:
      return;
    case Recompute::selective: {
      // Under CP the blockwise backward recomputes each block's probabilities from the kept
      // log-sum-exp: nothing to rerun (and no communication, cost/context_parallel.h).
      if (cp_->size() > 1) return;
      // The attention core again from the kept Q, K, V (both its s x s products, as Megatron's
      // checkpointed core attention and plan::recompute_flops_per_layer count): a.att for the
      // backward. Its output equals the kept atty, so it goes to scratch (free until backward
      // uses d_btc2 for datty).
      const int64_t NH_local = config_.heads / tp_->size();
      gqa_attention_forward(ws.d_btc2, a.att, a.qkv, acts.batch(), acts.seq(), NH_local,
                            config_.kv_heads_per_tp_rank(tp_->size()), config_.head_size(), cx_);
      return;
    }
    case Recompute::full: {
      // The block forward again from its kept input, every op and collective as in forward.
      // The output equals the next block's kept input (which a pipeline may be sending), so it
      // goes to scratch: a buffer the forward body has finished with before its last residual.
      const RecomputingScope scope(*tp_, *cp_, rerunning_);
      if (sp()) {
        block_forward_sp(acts, ws, l, a, ws.d_btc1);
      } else {
        block_forward_dense(acts, ws, l, a, ws.d_btc2);
      }
      return;
    }
  }
}

void GptModel::block_forward_dense(const GptActivations& acts, GptWorkspace& ws, int64_t l,
                                   const LayerActivations& a, float* out) {
  const int64_t B = acts.batch(), T = acts.seq(), C = config_.channels;
  const int64_t BT = B * T;
  // This TP rank's heads and channels (C_local = C, NH_local = NH serially).
  const int64_t C_local = C / tp_->size(), NH_local = config_.heads / tp_->size();
  const LayerWeights& w = w_.layers[static_cast<size_t>(l)];
  float* linear_out = ws.d_btc1;  // (B, T, C) row-parallel output before g
  const Compute& cx = cx_;

  // attention: ln2_in = x + proj(attention(ln1(x)))
  const Widths wd = widths(config_, tp_->size());
  norm_forward(config_, a.ln1_out, a.ln1_mean, a.ln1_rstd, a.ln1_in, w.ln1_w, w.ln1_b, B, T, C, cx);
  matmul_forward(a.qkv, a.ln1_out, w.qkv_w, w.qkv_b, BT, C, wd.qkv, cx);  // f: identity
  rotate_qk(a.qkv, B, T, false);
  attention_core_forward(acts, l, a, B, T, C_local, NH_local);
  matmul_forward(linear_out, a.atty, w.proj_w, nullptr, BT, C_local, C, cx);
  tp_->g_forward(linear_out, BT * C);
  residual_forward(a.ln2_in, a.ln1_in, linear_out, w.proj_b, BT, C, cx);

  // MLP: x_next = ln2_in + fc_proj(gelu(fc(ln2(ln2_in))))
  norm_forward(config_, a.ln2_out, a.ln2_mean, a.ln2_rstd, a.ln2_in, w.ln2_w, w.ln2_b, B, T, C, cx);
  if (w.moe_router_w != nullptr) {
    moe_mlp_forward(acts, l, a.ln2_out, linear_out);
    residual_forward(out, a.ln2_in, linear_out, nullptr, BT, C, cx);
    return;
  }
  matmul_forward(a.fc, a.ln2_out, w.fc_w, w.fc_b, BT, C, wd.fc, cx);  // f: identity
  block::activation_forward(config_, a.fc_gelu, a.fc, BT, wd, cx);
  matmul_forward(linear_out, a.fc_gelu, w.fc_proj_w, nullptr, BT, wd.act, C, cx);
  tp_->g_forward(linear_out, BT * C);
  residual_forward(out, a.ln2_in, linear_out, w.fc_proj_b, BT, C, cx);
}

float GptModel::head_forward(GptActivations& acts, std::span<const int32_t> targets) {
  const int64_t B = acts.batch(), T = acts.seq(), C = config_.channels, V = config_.vocab;
  HeadActivations& h = acts.head();
  if (sp()) {
    // Sequence parallel: the final LN runs on this rank's rows (x_final's first B*T/N rows),
    // written at their place in lnf_out, which is then all-gathered in place: the
    // vocabulary-parallel head needs every row (Megatron gathers before the output layer).
    const int64_t rows = sp_rows(acts);
    float* mine = h.lnf_out + tp_->rank() * rows * C;
    norm_forward(config_, mine, h.lnf_mean, h.lnf_rstd, h.x_final, w_.lnf_w, w_.lnf_b, 1, rows, C,
                 cx_);
    tp_->sp_all_gather(h.lnf_out, mine, rows * C, TensorParallelHooks::SpSite::vocab);
  } else {
    norm_forward(config_, h.lnf_out, h.lnf_mean, h.lnf_rstd, h.x_final, w_.lnf_w, w_.lnf_b, B, T, C,
                 cx_);
  }
  // logits (B, T, V_local) = lnf_out @ head^T (the LM head tied to the token embedding, or
  // Llama's own; under TP each rank's vocabulary rows: f is the identity on lnf_out)
  matmul_forward(h.logits, h.lnf_out, w_.head(), nullptr, B * T, C, vocab_local(), cx_);
  h.has_targets = !targets.empty();
  if (!h.has_targets) return 0.0f;
  check_batch(targets, B * T, V, "targets");
  std::copy(targets.begin(), targets.end(), h.targets);
  if (tp_->size() > 1) {
    return vocab_parallel_crossentropy_forward(h.logits, h.losses, h.targets, B * T, vocab_begin(),
                                               vocab_local(), V, *tp_, cx_);
  }
  return crossentropy_softmax_forward(h.logits, h.losses, h.logits, h.targets, B * T, V, cx_);
}

void GptModel::head_backward(GptActivations& acts, GptWorkspace& ws, float dloss) {
  const int64_t B = acts.batch(), T = acts.seq(), C = config_.channels, V = config_.vocab;
  const int64_t BT = B * T;
  HeadActivations& h = acts.head();
  DTRAIN_CHECK(h.has_targets, "GptModel::backward needs a forward pass with targets");
  h.has_targets = false;
  acts.loss_scale = dloss;  // the probabilities are about to become their gradient
  if (tp_->size() > 1) {
    vocab_parallel_crossentropy_backward(h.logits, h.targets, dloss, BT, vocab_begin(),
                                         vocab_local());
  } else {
    crossentropy_softmax_backward_inplace(h.logits, h.targets, dloss, BT, V, cx_);
  }
  float* dlnf = ws.d_btc1;  // (B, T, C)
  zero(dlnf, BT * C);
  matmul_backward(dlnf, dw_.head(), nullptr, h.logits, h.lnf_out, w_.head(), BT, C, vocab_local(),
                  cx_);
  if (sp()) {
    // Sequence parallel: the partial gradients of lnf_out are reduce-scattered to this rank's
    // rows (the conjugate of the gather before the head), then the final LN's backward on them.
    const int64_t rows = sp_rows(acts);
    float* dslice = ws.d_btc2;  // (B*T/N, C)
    tp_->sp_reduce_scatter(dslice, dlnf, rows * C, TensorParallelHooks::SpSite::vocab);
    zero(ws.dres, rows * C);
    norm_backward(config_, ws.dres, dw_.lnf_w, dw_.lnf_b, dslice, h.x_final, w_.lnf_w, h.lnf_mean,
                  h.lnf_rstd, 1, rows, C);
    return;
  }
  // f of the LM head: each rank's vocabulary rows give a partial gradient of lnf_out.
  if (tp_->size() > 1) tp_->all_reduce_sum(dlnf, BT * C);
  zero(ws.dres, BT * C);
  norm_backward(config_, ws.dres, dw_.lnf_w, dw_.lnf_b, dlnf, h.x_final, w_.lnf_w, h.lnf_mean,
                h.lnf_rstd, B, T, C);
}

void GptModel::block_backward(GptActivations& acts, GptWorkspace& ws, int64_t l) {
  if (sp()) {
    block_backward_sp(acts, ws, l, nullptr);
    return;
  }
  block_backward_dense(acts, ws, l, nullptr);
}

void GptModel::block_backward_input(GptActivations& acts, GptWorkspace& ws, int64_t l,
                                    WeightGradStash& stash) {
  DTRAIN_CHECK(stash.range().contains(l), "GptModel::block_backward_input: block ", l,
               " is not in the stash's blocks [", stash.range().first, ", ", stash.range().end(),
               ")");
  if (sp()) {
    block_backward_sp(acts, ws, l, &stash.layer(l));
    return;
  }
  block_backward_dense(acts, ws, l, &stash.layer(l));
}

void GptModel::block_backward_weight(const GptActivations& acts, GptWorkspace& ws,
                                     WeightGradStash& stash, int64_t l) {
  DTRAIN_CHECK(stash.range().contains(l), "GptModel::block_backward_weight: block ", l,
               " is not in the stash's blocks [", stash.range().first, ", ", stash.range().end(),
               ")");
  const int64_t BT = acts.batch() * acts.seq(), C = config_.channels;
  const int64_t C_local = C / tp_->size();
  const LayerWeights& dw = dw_.layers[static_cast<size_t>(l)];
  const Widths wd = widths(config_, tp_->size());
  const LayerActivations a = block_tensors(acts, ws, l);
  // The linears' inputs: kept unless full recompute dropped them (selective's att is not one);
  // packed ones widened again (later blocks' backwards reused the working copies).
  if (recompute_ == Recompute::full) recompute_block(acts, ws, l, a);
  unpack_block(acts, l, a);
  const BlockOutputGrads& k = stash.layer(l);
  // The column-parallel linears' inputs: under sequence parallelism the kept LN outputs are this
  // rank's rows, gathered again here (the re-gathers the fused backward runs, moved to W).
  const float* ln2_out = a.ln2_out;
  const float* ln1_out = a.ln1_out;
  float* full = ws.d_btc2;  // (B, T, C): free after B and after full recompute's rerun
  const int64_t rows = sp_rows(acts);
  using Site = TensorParallelHooks::SpSite;
  // The dweight halves of the fused backward's four matmul_backward calls, in its order (a routed
  // block's MLP: its experts' from the MoE state; the router's gradient came with B, which
  // re-gathered the LN output for it under SP).
  if (w_.layers[static_cast<size_t>(l)].moe_router_w != nullptr) {
    moe_mlp_backward_weight(acts, l);
  } else {
    matmul_backward_weight(dw.fc_proj_w, dw.fc_proj_b, k.dfc_proj, a.fc_gelu, BT, wd.act, C, cx_);
    if (sp()) {
      tp_->sp_all_gather(full, a.ln2_out, rows * C, Site::regather);
      ln2_out = full;
    }
    matmul_backward_weight(dw.fc_w, dw.fc_b, k.dfc, ln2_out, BT, C, wd.fc, cx_);
  }
  matmul_backward_weight(dw.proj_w, dw.proj_b, k.dproj, a.atty, BT, C_local, C, cx_);
  if (sp()) {
    tp_->sp_all_gather(full, a.ln1_out, rows * C, Site::regather);
    ln1_out = full;
  }
  matmul_backward_weight(dw.qkv_w, dw.qkv_b, k.dqkv, ln1_out, BT, C, wd.qkv, cx_);
}

void GptModel::block_backward_dense(GptActivations& acts, GptWorkspace& ws, int64_t l,
                                    BlockOutputGrads* keep) {
  const int64_t B = acts.batch(), T = acts.seq(), C = config_.channels;
  const int64_t BT = B * T;
  const int64_t C_local = C / tp_->size(), NH_local = config_.heads / tp_->size();
  const LayerWeights& w = w_.layers[static_cast<size_t>(l)];
  const LayerWeights& dw = dw_.layers[static_cast<size_t>(l)];
  const Widths wd = widths(config_, tp_->size());
  const LayerActivations a = block_tensors(acts, ws, l);
  unpack_block(acts, l, a);
  recompute_block(acts, ws, l, a);
  const Compute& cx = cx_;
  float* dres = ws.dres;  // (B, T, C): d block output on entry, d block input on exit
  float* dln = ws.d_btc1;

  // MLP; the residual passes dres through unchanged, the LayerNorm adds to it
  if (w.moe_router_w != nullptr) {
    zero(dln, BT * C);
    moe_mlp_backward(acts, l, a.ln2_out, dres, dln,
                     keep != nullptr);  // dln whole: no f here (in the experts)
    norm_backward(config_, dres, dw.ln2_w, dw.ln2_b, dln, a.ln2_in, w.ln2_w, a.ln2_mean, a.ln2_rstd,
                  B, T, C);
  } else {
    zero(ws.dfc_gelu, BT * wd.act);
    matmul_backward_or_keep(ws.dfc_gelu, dw.fc_proj_w, dw.fc_proj_b, dres, a.fc_gelu, w.fc_proj_w,
                            BT, wd.act, C, keep != nullptr ? keep->dfc_proj : nullptr,
                            cx);  // g: identity
    zero(ws.dfc, BT * wd.fc);
    block::activation_backward(config_, ws.dfc, a.fc, ws.dfc_gelu, BT, wd, cx);
    zero(dln, BT * C);
    matmul_backward_or_keep(dln, dw.fc_w, dw.fc_b, ws.dfc, a.ln2_out, w.fc_w, BT, C, wd.fc,
                            keep != nullptr ? keep->dfc : nullptr, cx);
    tp_->f_backward(dln, BT * C);
    norm_backward(config_, dres, dw.ln2_w, dw.ln2_b, dln, a.ln2_in, w.ln2_w, a.ln2_mean, a.ln2_rstd,
                  B, T, C);
  }

  // attention
  float* datty = ws.d_btc2;
  zero(datty, BT * C_local);
  matmul_backward_or_keep(datty, dw.proj_w, dw.proj_b, dres, a.atty, w.proj_w, BT, C_local, C,
                          keep != nullptr ? keep->dproj : nullptr, cx);
  zero(ws.dqkv, BT * wd.qkv);
  attention_core_backward(acts, ws, l, a, datty, B, T, C_local, NH_local);
  rotate_qk(ws.dqkv, B, T, true);
  zero(dln, BT * C);
  matmul_backward_or_keep(dln, dw.qkv_w, dw.qkv_b, ws.dqkv, a.ln1_out, w.qkv_w, BT, C, wd.qkv,
                          keep != nullptr ? keep->dqkv : nullptr, cx);
  tp_->f_backward(dln, BT * C);
  norm_backward(config_, dres, dw.ln1_w, dw.ln1_b, dln, a.ln1_in, w.ln1_w, a.ln1_mean, a.ln1_rstd,
                B, T, C);
}

void GptModel::embedding_backward(GptActivations& acts, GptWorkspace& ws) {
  if (config_.llama()) {  // no learned positions: the token rows alone
    embedding_backward_into(acts, ws, nullptr);
    return;
  }
  float* dwpe = position_grad_rows(acts.seq());
  embedding_backward_into(acts, ws, dwpe);
  if (dwpe == dw_.wpe) return;
  // CP: the local rows' gradients added at their global positions.
  const int64_t C = config_.channels;
  for (int64_t t = 0; t < acts.seq(); ++t) {
    float* g = dw_.wpe + cp_->position(t, acts.seq()) * C;
    for (int64_t i = 0; i < C; ++i) g[i] += dwpe[t * C + i];
  }
}

const float* GptModel::position_rows(int64_t T_local) {
  if (cp_->size() == 1) return w_.wpe;
  const int64_t C = config_.channels;
  cp_wpe_.resize(static_cast<size_t>(T_local * C));
  for (int64_t t = 0; t < T_local; ++t) {
    std::copy_n(w_.wpe + cp_->position(t, T_local) * C, C, cp_wpe_.data() + t * C);
  }
  return cp_wpe_.data();
}

float* GptModel::position_grad_rows(int64_t T_local) {
  if (cp_->size() == 1) return dw_.wpe;
  cp_dwpe_.assign(static_cast<size_t>(T_local * config_.channels), 0.0f);
  return cp_dwpe_.data();
}

void GptModel::attention_core_forward(const GptActivations& acts, int64_t l,
                                      const LayerActivations& a, int64_t B, int64_t T,
                                      int64_t C_local, int64_t NH_local) {
  if (cp_->size() > 1) {
    // Under full recompute the first forward's state would never be read: the rerun in backward
    // computes it again, so the group keeps it only then (plan::cp_activation_bytes_per_layer).
    const bool kept = recompute_ != Recompute::full || rerunning_;
    cp_->attention_forward(a.atty, a.qkv, kept ? &acts.layer(l) : nullptr, B, T, C_local, NH_local,
                           cx_, config_.kv_heads_per_tp_rank(tp_->size()));
    return;
  }
  const int64_t NKV_local = config_.kv_heads_per_tp_rank(tp_->size());
  gqa_attention_forward(a.atty, a.att, a.qkv, B, T, NH_local, NKV_local, C_local / NH_local, cx_);
}

void GptModel::attention_core_backward(const GptActivations& acts, GptWorkspace& ws, int64_t l,
                                       const LayerActivations& a, const float* datty, int64_t B,
                                       int64_t T, int64_t C_local, int64_t NH_local) {
  if (cp_->size() > 1) {
    cp_->attention_backward(ws.dqkv, datty, a.qkv, a.atty, &acts.layer(l), B, T, C_local, NH_local,
                            cx_, config_.kv_heads_per_tp_rank(tp_->size()));
    return;
  }
  const int64_t NKV_local = config_.kv_heads_per_tp_rank(tp_->size());
  gqa_attention_backward(ws.dqkv, ws.datt, datty, a.qkv, a.att, B, T, NH_local, NKV_local,
                         C_local / NH_local, cx_);
}

void GptModel::embedding_backward_into(GptActivations& acts, GptWorkspace& ws, float* dwpe) {
  if (sp()) {
    // Sequence parallel: gather the rows' gradients (the conjugate of the forward's
    // reduce-scatter); every rank then has all of them, so wpe's gradient is whole on each.
    const int64_t rows = sp_rows(acts);
    float* full = ws.d_btc1;  // (B, T, C)
    tp_->sp_all_gather(full, ws.dres, rows * config_.channels, TensorParallelHooks::SpSite::vocab);
    vocab_embedding_backward(dw_.wte, dwpe, full, acts.head().tokens, vocab_begin(), vocab_local(),
                             acts.batch(), acts.seq(), config_.channels);
    return;
  }
  if (tp_->size() > 1) {
    vocab_embedding_backward(dw_.wte, dwpe, ws.dres, acts.head().tokens, vocab_begin(),
                             vocab_local(), acts.batch(), acts.seq(), config_.channels);
    return;
  }
  encoder_backward(dw_.wte, dwpe, ws.dres, acts.head().tokens, acts.batch(), acts.seq(),
                   config_.channels);
}

MoeWeights GptModel::moe_weights(const LayerWeights& w) const {
  return {w.moe_router_w, w.fc_w, w.fc_b, w.fc_proj_w, w.fc_proj_b, moe_widths()};
}

MoeExpertWidths GptModel::moe_widths() const {
  return moe_expert_widths(config_.channels, config_.ffn(), config_.llama(), tp_->size());
}

void GptModel::moe_mlp_forward(const GptActivations& acts, int64_t l, const float* x,
                               float* delta) {
  const int64_t N = acts.batch() * acts.seq(), C = config_.channels;
  const LayerWeights& w = w_.layers[static_cast<size_t>(l)];
  // The MoE state is the activations' own (one per micro-batch in flight); forward fills it.
  MoeLayerState& s = const_cast<GptActivations&>(acts).moe_layer(l);
  // Under TP the router is replicated: every rank routes the same whole rows the same way. Under
  // CP the group routes the micro-batch together (capacity and aux loss of all its tokens).
  if (cp_->size() > 1) {
    CpRouteGroup group(*cp_, acts.batch(), acts.seq());
    moe_route(s.routing, x, w.moe_router_w, N, C, config_.moe, cx_, &group);
  } else {
    moe_route(s.routing, x, w.moe_router_w, N, C, config_.moe, cx_);
  }
  if (ep_->size() > 1) {
    moe_ep_forward(delta, s.ep, s.cache, s.routing, x, moe_weights(w), C, config_.moe, *ep_, cx_,
                   tp_);
    return;
  }
  moe_forward(delta, s.cache, s.routing, x, moe_weights(w), N, C, config_.moe, cx_, tp_);
}

void GptModel::moe_mlp_backward(const GptActivations& acts, int64_t l, const float* x,
                                const float* dout, float* dln, bool split) {
  const int64_t N = acts.batch() * acts.seq(), C = config_.channels;
  const LayerWeights& w = w_.layers[static_cast<size_t>(l)];
  const LayerWeights& dw = dw_.layers[static_cast<size_t>(l)];
  MoeLayerState& s = const_cast<GptActivations&>(acts).moe_layer(l);
  MoeWeightGradStash* keep = split ? &s.kept : nullptr;
  const MoeGrads g{dw.moe_router_w, dw.fc_w, dw.fc_b, dw.fc_proj_w, dw.fc_proj_b};
  const double aux_scale = config_.moe.aux_loss_coef * acts.loss_scale;
  if (ep_->size() > 1) {
    moe_ep_backward(dln, g, dout, s.ep, s.cache, s.routing, x, moe_weights(w), C, config_.moe,
                    aux_scale, *ep_, cx_, tp_, keep);
    return;
  }
  moe_backward(dln, g, dout, s.cache, s.routing, x, moe_weights(w), N, C, config_.moe, aux_scale,
               cx_, tp_, keep);
}

void GptModel::moe_mlp_backward_weight(const GptActivations& acts, int64_t l) {
  const LayerWeights& dw = dw_.layers[static_cast<size_t>(l)];
  const MoeLayerState& s = acts.moe_layer(l);
  const MoeGrads g{dw.moe_router_w, dw.fc_w, dw.fc_b, dw.fc_proj_w, dw.fc_proj_b};
  moe_experts_backward_weight(g, s.kept, s.cache, moe_widths(), config_.channels, cx_);
}

double GptModel::moe_aux_loss(const GptActivations& acts) const {
  double sum = 0;
  for (int64_t l = acts.range().first; l < acts.range().end(); ++l) {
    if (is_moe_layer(config_.moe, l)) sum += acts.moe_layer(l).routing.aux_loss;
  }
  return sum;
}

const MoeRouting* GptModel::moe_routing(const GptActivations& acts, int64_t l) const {
  return is_moe_layer(config_.moe, l) ? &acts.moe_layer(l).routing : nullptr;
}

int64_t GptModel::moe_expert_rows(const GptActivations& acts, int64_t l) const {
  if (!is_moe_layer(config_.moe, l)) return 0;
  return static_cast<int64_t>(acts.moe_layer(l).cache.x.size()) / config_.channels;
}

int64_t GptModel::sp_rows(const GptActivations& acts) const {
  const int64_t BT = acts.batch() * acts.seq();
  return sp() ? BT / tp_->size() : BT;
}

// The block of block_forward with the residual regions on this rank's rows (B*T/N of them):
//   ln1 (slice) -> f: all-gather -> qkv, attention, proj (full rows, local heads) -> g:
//   reduce-scatter -> residual (slice); the same for the MLP. ws.d_btc2 holds the gathered LN
//   output and then the scattered linear output; ws.d_btc1 the row-parallel output before g.
}  // namespace dtrain::model
