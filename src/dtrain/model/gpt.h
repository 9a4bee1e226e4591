// GptModel: a GPT-2-style decoder (token + position embedding, L pre-LayerNorm blocks of
// causal self-attention and a GELU MLP, final LayerNorm, LM head tied to wte, mean
// cross-entropy). Parameters live in one contiguous buffer and gradients in another, laid out
// by ParamTable. Forward and backward run block by block on a GptActivations, so a pipeline
// stage can run a range of blocks and keep one GptActivations per micro-batch in flight.
// Activation recomputation (Korthikanti et al. 2022) lives here, below every layout: under
// selective a block's backward first recomputes the attention core's softmax output, under full
// it first reruns the block's forward from the kept block input, both into the workspace. The
// rerun is the same ops on the same inputs and shapes, so gradients are the bits of none's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dtrain/core/buffer.h"
#include "dtrain/model/activations.h"
#include "dtrain/model/cp_hooks.h"
#include "dtrain/model/ep_hooks.h"
#include "dtrain/model/gemm.h"
#include "dtrain/model/gpt_config.h"
#include "dtrain/model/gpt_stage.h"
#include "dtrain/model/ops/moe.h"
#include "dtrain/model/ops/rope.h"
#include "dtrain/model/param_table.h"
#include "dtrain/model/tp_hooks.h"
#include "dtrain/model/weight_grad_stash.h"

namespace dtrain::model {

// Pointers to one block's tensors (parameters, or at the same offsets, gradients).
struct LayerWeights {
  float* ln1_w;      // (C)
  float* ln1_b;      // (C)
  float* qkv_w;      // (3*C, C)
  float* qkv_b;      // (3*C)
  float* proj_w;     // (C, C)
  float* proj_b;     // (C)
  float* ln2_w;      // (C)
  float* ln2_b;      // (C)
  float* fc_w;       // (4*C, C)
  float* fc_b;       // (4*C)
  float* fc_proj_w;  // (C, 4*C)
  float* fc_proj_b;  // (C)
  // An MoE block (model/ops/moe.h): the four MLP fields above hold E experts each
  // ((E, 4*C, C), (E, 4*C), (E, C, 4*C), (E, C); a Llama block's (E, 2F, C) [gate | up] and
  // (E, C, F), no biases), and the router is here; null otherwise.
  float* moe_router_w = nullptr;  // (E, C)
};
struct GptWeights {
  float* wte;  // (V, C)
  float* wpe;  // (context, C)
  std::vector<LayerWeights> layers;
  float* lnf_w;  // (C)
  float* lnf_b;  // (C)
  // Llama's untied output head (V, C); null when the head is the word embedding. The GPT
  // family's absent tensors (Llama's biases, wpe, lnf_b) are null too.
  float* lm_head = nullptr;
  // The output head's weights: the word embedding, or the untied head.
  float* head() const { return lm_head != nullptr ? lm_head : wte; }
};

class GptModel {
 public:
  // `tracker` is charged for params, grads and activations; `tp` defaults to the serial
  // hooks (TP=1); with a `team` the ops split their work across its threads (same bits as
  // without). All three must outlive the model. Parameters start at zero: call init_params.
  // `recompute`: what each block keeps for its backward; the GptActivations and GptWorkspace
  // the model runs on must be built with the same mode (set_batch_shape's are).
  // `ep` (expert parallelism, ep_hooks.h): with size() > 1 the model holds its EP rank's E/size
  // experts of each routed layer (ep_local_table) and its routed layers exchange rows over it.
  GptModel(const GptConfig& config, MemoryTracker* tracker, TensorParallelHooks* tp = nullptr,
           ThreadTeam* team = nullptr, Recompute recompute = Recompute::none,
           ExpertParallelHooks* ep = nullptr);
  // A pipeline stage's model: only `stage`'s tensors (gpt_stage_param_table: the whole
  // model's names and order), so its memory is the stage's. Run it piece by piece
  // (embedding_forward, block_forward of its blocks, head_forward, ...); the whole passes are
  // for the whole model (bind_params / bind_grads take ranges of the stage's own table).
  // init_params gives every tensor the values it has in the whole model, so two stages' copies of
  // the tied wte start equal.
  GptModel(const GptConfig& config, const GptStage& stage, MemoryTracker* tracker,
           TensorParallelHooks* tp = nullptr, ThreadTeam* team = nullptr,
           Recompute recompute = Recompute::none, ExpertParallelHooks* ep = nullptr);
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const GptConfig& config() const { return config_; }
  const GptStage& stage() const { return stage_; }
  Recompute recompute() const { return recompute_; }
  const ParamTable& param_table() const { return table_; }
  // The TP group the model is cut for: with size() > 1 the table holds this tp_rank's shards
  // (model/tp_shard.h), under the serial names.
  const TensorParallelHooks& tp() const { return *tp_; }
  // Context parallelism (cp_hooks.h): with a group of N > 1 every activation holds this CP rank's
  // T/N tokens and attention runs across the group. Set before the first pass; must outlive the
  // model. Null: the serial hooks (CP = 1).
  void set_context_parallel(ContextParallelHooks* cp) { cp_ = cp != nullptr ? cp : &serial_cp_; }
  const ContextParallelHooks& cp() const { return *cp_; }
  // After a forward no backward follows (evaluation): the CP group drops what it kept.
  void release_attention_state() { cp_->release_all(); }
  const ExpertParallelHooks& ep() const { return *ep_; }
  int64_t param_count() const { return table_.total_count(); }
  std::span<float> params() { return params_.span(); }
  std::span<const float> params() const { return params_.span(); }
  std::span<float> grads() { return grads_.span(); }
  std::span<const float> grads() const { return grads_.span(); }
  std::span<float> param(int index);  // one tensor of the table
  std::span<float> grad(int index);

  // GPT-2 initialisation from `seed`, tensor by tensor in table order: weights N(0, 0.02),
  // the two residual projections (attn.proj.w, mlp.proj.w) N(0, 0.02 / sqrt(2L)), biases 0,
  // LayerNorm weights 1. Tensor i draws from its own Rng seeded with the i-th output of
  // Rng(seed) (core/rng.h), so a shard can initialise its tensors without drawing the rest.
  // Under TP each rank draws a sharded tensor whole and keeps its slice (tp_slice), so the
  // shards are the serial model's.
  void init_params(uint64_t seed);
  void zero_grads() { grads_.zero(); }

  // --- whole passes on the model's own activations, sized on first use or by set_batch_shape
  void set_batch_shape(int64_t B, int64_t T);
  GptActivations& activations();
  GptWorkspace& workspace();
  // Runs the forward pass on tokens (B, T); with targets (B, T) returns the mean loss and
  // leaves probabilities in activations().head().logits, without targets returns 0 and
  // leaves the logits there.
  float forward(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t B,
                int64_t T);
  // Accumulates d(dloss * loss)/dparams into grads() (needs a forward with targets).
  void backward(float dloss = 1.0f);

  // --- the same on caller-owned activations, and the pieces a pipeline stage runs
  float forward(GptActivations& acts, GptWorkspace& ws, std::span<const int32_t> tokens,
                std::span<const int32_t> targets);
  void backward(GptActivations& acts, GptWorkspace& ws, float dloss = 1.0f);
  // `ws`: scratch for sequence parallelism's reduce-scatter of the partial embeddings.
  void embedding_forward(GptActivations& acts, GptWorkspace& ws, std::span<const int32_t> tokens);
  void block_forward(GptActivations& acts, GptWorkspace& ws, int64_t l);
  float head_forward(GptActivations& acts, std::span<const int32_t> targets);
  void head_backward(GptActivations& acts, GptWorkspace& ws, float dloss);  // sets ws.dres
  void block_backward(GptActivations& acts, GptWorkspace& ws, int64_t l);   // ws.dres: out -> in
  // block_backward split in two for a zero-bubble schedule (under sequence parallelism too: W
  // re-gathers the LN-output slices its two column-parallel weight gradients read).
  // _input is everything the previous block needs: ws.dres out -> in through the four
  // linears' input-gradient sgemms, attention, GELU, the residuals and the LayerNorms (whose
  // weight and bias gradients it also adds: they are cheap). It keeps each linear's output
  // gradient in stash.layer(l). _weight, later, adds the four linears' weight and bias
  // gradients from the stash and acts (their inputs). _input then _weight runs the same sgemm
  // calls on the same data as block_backward, so the gradients are the same bits. Under full
  // recompute the linears' inputs are not kept, and B's rerun is overwritten by the next
  // block's, so _weight reruns the block's forward once more (into ws).
  void block_backward_input(GptActivations& acts, GptWorkspace& ws, int64_t l,
                            WeightGradStash& stash);
  void block_backward_weight(const GptActivations& acts, GptWorkspace& ws, WeightGradStash& stash,
                             int64_t l);
  void embedding_backward(GptActivations& acts, GptWorkspace& ws);

  // --- caller-owned storage (ZeRO-2 and 3 keep no full gradient / parameter buffer)
  // Frees the model's own flat parameter (gradient) buffer: params() (grads()) become empty, and
  // every tensor must be bound below before a pass touches it.
  void release_params();
  void release_grads();
  // Points the parameter (gradient) tensors inside the flat range [offset, offset + count) at
  // `storage`: tensor t moves to storage + (t.offset - offset). ZeRO-3 binds one unit's gathered
  // weights (embeddings, block l, final LayerNorm) just before running it; ZeRO-2 and 3 bind
  // gradient buckets. A tensor straddling the range's boundary is an error.
  void bind_params(int64_t offset, int64_t count, float* storage);
  void bind_grads(int64_t offset, int64_t count, float* storage);

  // MoE: the sum over MoE blocks of the load-balancing loss of the last forward on `acts` (the
  // loss trained is forward's cross-entropy + moe.aux_loss_coef times this), and each block's
  // routing (null for a dense block).
  double moe_aux_loss(const GptActivations& acts) const;
  const MoeRouting* moe_routing(const GptActivations& acts, int64_t l) const;
  // The rows block l's experts on this rank computed in the last forward on `acts` (0 for a
  // dense block).
  int64_t moe_expert_rows(const GptActivations& acts, int64_t l) const;

  // When set, every sgemm call is timed and counted there (null turns counting off).
  void set_gemm_stats(GemmStats* stats) { cx_.gemm_stats = stats; }
  // bf16: every matrix product (the linears, attention's two, the LM head) on bf16-rounded
  // operands with fp32 sums (bf16_gemm.h); everything else stays fp32.
  // Under bf16 the activations a block keeps for its backward are also stored in bf16
  // (GptActivations' bf16_storage), the block input and LayerNorm statistics excepted.
  void set_precision(Precision p);
  bool bf16_activations() const { return cx_.precision == Precision::bf16; }
  Precision precision() const { return cx_.precision; }
  int threads() const { return cx_.threads(); }

 private:
  GptWeights weights_at(float* base) const;
  // Block l's tensors for this model's recompute mode: the kept ones from acts, the dropped
  // ones from ws.dropped (after a check that both were built for the mode).
  LayerActivations block_tensors(const GptActivations& acts, const GptWorkspace& ws,
                                 int64_t l) const;
  // Re-creates the tensors the mode dropped from block l into `a` (block_tensors), before a
  // backward reads them: selective reruns the attention core, full the whole block forward.
  void recompute_block(const GptActivations& acts, GptWorkspace& ws, int64_t l,
                       const LayerActivations& a);
  // bf16 storage: a block's kept tensors rounded from their fp32 working copies `a` after its
  // forward, and widened into them before a backward reads them (no-ops otherwise).
  void pack_block(GptActivations& acts, int64_t l, const LayerActivations& a) const;
  void unpack_block(const GptActivations& acts, int64_t l, const LayerActivations& a) const;
  // A block's forward on tensors `a`, its output written to `out` ((B*T or B*T/N, C)).
  void block_forward_dense(const GptActivations& acts, GptWorkspace& ws, int64_t l,
                           const LayerActivations& a, float* out);
  // Sequence parallelism (tp_hooks.h): a block's passes with the residual stream, LayerNorms
  // and residual adds on this rank's B*T/N token rows; f and g become all-gathers and
  // reduce-scatters. The first row of this rank's slice is sp_row_begin(acts).
  void block_forward_sp(const GptActivations& acts, GptWorkspace& ws, int64_t l,
                        const LayerActivations& a, float* out);
  void block_backward_sp(GptActivations& acts, GptWorkspace& ws, int64_t l, BlockOutputGrads* keep);
  // block_backward's non-SP body: fused when `keep` is null, else the input half, keeping
  // the four linears' output gradients there (block_backward_input).
  void block_backward_dense(GptActivations& acts, GptWorkspace& ws, int64_t l,
                            BlockOutputGrads* keep);
  // An MoE block's MLP half on all B*T rows of the LN output x (under SP the gathered rows):
  // routed experts in place of the dense MLP (delta (B*T, C) is what the residual adds, whole
  // on every TP rank), and its backward from dout (B*T, C) into dln (x's gradient, whole).
  void moe_mlp_forward(const GptActivations& acts, int64_t l, const float* x, float* delta);
  // `split`: only the input halves of the experts' products, their output gradients kept in the
  // block's MoE state for moe_mlp_backward_weight (a zero-bubble schedule's W).
  void moe_mlp_backward(const GptActivations& acts, int64_t l, const float* x, const float* dout,
                        float* dln, bool split = false);
  void moe_mlp_backward_weight(const GptActivations& acts, int64_t l);
  // A routed block's tensors for the MoE layer, and its experts' widths on this TP rank (GPT's
  // GELU experts, or Llama's SwiGLU ones).
  MoeWeights moe_weights(const LayerWeights& w) const;
  MoeExpertWidths moe_widths() const;
  bool sp() const { return tp_->sequence_parallel(); }
  // The attention core on block l's tensors: serial (attention.h, a.att kept) or, under CP,
  // across the group (cp_hooks.h); out is a.atty.
  void attention_core_forward(const GptActivations& acts, int64_t l, const LayerActivations& a,
                              int64_t B, int64_t T, int64_t C_local, int64_t NH_local);
  void attention_core_backward(const GptActivations& acts, GptWorkspace& ws, int64_t l,
                               const LayerActivations& a, const float* datty, int64_t B, int64_t T,
                               int64_t C_local, int64_t NH_local);
  // wpe's rows for the T local tokens: wpe itself, or under CP the rows at the tokens' global
  // positions (copied); and where the embedding backward adds their gradients (dwpe, or the
  // copy's, added back at the positions by embedding_backward).
  const float* position_rows(int64_t T_local);
  float* position_grad_rows(int64_t T_local);
  void embedding_backward_into(GptActivations& acts, GptWorkspace& ws, float* dwpe);
  int64_t sp_rows(const GptActivations& acts) const;  // B*T/N (B*T without SP)
  void bind_range(GptWeights& w, int64_t offset, int64_t count, float* storage) const;

  GptConfig config_;
  Recompute recompute_ = Recompute::none;
  ParamTable table_;
  MemoryTracker* tracker_;
  TensorParallelHooks serial_tp_;
  TensorParallelHooks* tp_;
  ContextParallelHooks serial_cp_;
  ContextParallelHooks* cp_ = &serial_cp_;
  std::vector<float> cp_wpe_, cp_dwpe_;  // (T/N, C): position_rows' copies
  RopeTable rope_;                       // Llama: cos and sin of the last T's positions
  int64_t rope_seq_ = -1;
  const RopeTable& rope_table(int64_t T);
  // Llama: rotary positions on q and k (the first NH + NKV heads of each qkv row, this TP
  // rank's), or the inverse on their gradients; nothing for GPT.
  void rotate_qk(float* qkv, int64_t B, int64_t T, bool backward);
  bool rerunning_ = false;  // inside full recompute's rerun of a block forward
  ExpertParallelHooks serial_ep_;
  ExpertParallelHooks* ep_;
  Buffer<float> params_;  // (param_count) tag params
  Buffer<float> grads_;   // (param_count) tag grads
  GptWeights w_;          // views into params_
  GptWeights dw_;         // views into grads_
  std::unique_ptr<GptActivations> acts_;
  std::unique_ptr<GptWorkspace> ws_;
  Compute cx_;  // the team and the GEMM counters every op gets
  // A stage model's tensors: whole-model table index -> this table's (-1: not held), and back.
  // Both empty for the whole model (the identity).
  GptStage stage_;
  std::vector<int> local_index_, whole_index_;
  // This TP rank's rows of wte / columns of the logits: [vocab_begin, vocab_begin + vocab_local)
  // (V and 0 serially).
  int64_t vocab_local() const;
  int64_t vocab_begin() const;
  int local_index(int whole) const {
    if (whole < 0) return -1;  // a tensor the family lacks
    return local_index_.empty() ? whole : local_index_[static_cast<size_t>(whole)];
  }
};

}  // namespace dtrain::model
