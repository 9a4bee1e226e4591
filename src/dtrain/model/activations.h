// Storage for one micro-batch's forward pass (GptActivations) and the shared backward
// scratch (GptWorkspace), all charged to the activations tag. A block keeps exactly the
// tensors of plan::activation_bytes_per_layer (fp32, no dropout, LayerNorm statistics) for its
// recompute mode; what the mode drops lives once, in the workspace (plan::recompute_scratch_bytes);
// the head's tensors and the rest of the workspace are plan::head_activation_bytes and
// plan::workspace_activation_bytes. A pipeline stage holds one GptActivations per micro-batch
// in flight and one GptWorkspace.
#pragma once

#include <cstdint>
#include <vector>

#include "dtrain/core/bf16.h"
#include "dtrain/core/buffer.h"
#include "dtrain/core/recompute.h"
#include "dtrain/model/gpt_config.h"
#include "dtrain/model/gpt_stage.h"
#include "dtrain/model/moe_dispatch.h"
#include "dtrain/model/ops/moe.h"

namespace dtrain::model {

// What block l's backward reads; pointers into one buffer per block. Under recompute the
// tensors the mode drops are null here and live in GptWorkspace::dropped instead: selective
// drops att, full everything but ln1_in.
struct LayerActivations {
  float* ln1_in = nullptr;    // (B, T, C)     block input x_l (for l = 0: the embedding output)
  float* ln1_out = nullptr;   // (B, T, C)     qkv input
  float* ln1_mean = nullptr;  // (B, T)
  float* ln1_rstd = nullptr;  // (B, T)
  float* qkv = nullptr;       // (B, T, 3*C_local)   Q, K, V
  float* att = nullptr;       // (B, NH_local, T, T) softmax output
  float* atty = nullptr;      // (B, T, C_local)     attention output = projection input
  float* ln2_in = nullptr;    // (B, T, C)     x_l + attention
  float* ln2_out = nullptr;   // (B, T, C)     MLP input
  float* ln2_mean = nullptr;  // (B, T)
  float* ln2_rstd = nullptr;  // (B, T)
  float* fc = nullptr;        // (B, T, 4*C_local)   GELU input
  float* fc_gelu = nullptr;   // (B, T, 4*C_local)   GELU output = second linear input
};

// Mixed precision's storage of a block (GptActivations built with `bf16_storage`): the tensors
// only matrix products read (the qkv and fc inputs, Q K V, the projection inputs) as bf16,
// rounded from the forward's fp32 values, as autocast saves a bf16 matmul's inputs. Those
// products run on bf16-rounded operands anyway, so keeping them rounded changes no bit. What
// an elementwise backward reads (the LayerNorm inputs and statistics, the softmax output, the
// GELU input) stays fp32 in LayerActivations. The forward computes the packed tensors in
// GptWorkspace::dropped and GptModel rounds them in here; a backward widens them there again.
struct PackedLayer {
  bf16* ln1_out = nullptr;
  bf16* qkv = nullptr;
  bf16* atty = nullptr;
  bf16* ln2_out = nullptr;
  bf16* fc_gelu = nullptr;
};

// What lives outside the blocks: the last block's output, the final LayerNorm, the logits
// (which become probabilities in forward and their gradient in backward), the per-position
// losses, and the token ids the batch came with.
struct HeadActivations {
  float* x_final = nullptr;    // (B, T, C) last block output = final LN input
  float* lnf_out = nullptr;    // (B, T, C)
  float* lnf_mean = nullptr;   // (B, T)
  float* lnf_rstd = nullptr;   // (B, T)
  float* logits = nullptr;     // (B, T, V_local)
  float* losses = nullptr;     // (B, T)
  int32_t* tokens = nullptr;   // (B, T) inputs
  int32_t* targets = nullptr;  // (B, T) next tokens
  bool has_targets = false;    // whether the last forward computed the loss
};

// An MoE block's routing and its experts' kept tensors (model/ops/moe.h). Their size follows
// the router's decisions, so they are plain vectors, not charged to the tracker (the dense
// block's fc and fc_gelu, which an MoE block leaves unused, still are).
struct MoeLayerState {
  MoeRouting routing;
  MoeExpertCache cache;  // under EP: this rank's experts' received rows (moe_dispatch.h)
  MoeEpState ep;
  MoeWeightGradStash kept;  // a split backward's input half, for its weight half
};

class GptActivations {
 public:
  GptActivations(const GptConfig& config, int64_t B, int64_t T, MemoryTracker* tracker);
  // One pipeline chunk's share: the blocks in `layers` only (layer(l) of any other block is
  // empty). With `head` the head's tensors as above; without, head().x_final is the one
  // (B, T, C) buffer of the range's last block output (what a pipeline stage sends on) and the
  // other head tensors are null. Token ids: both with the head, the inputs alone with only
  // `embedding`. {0, L}, true, true is the whole model (the constructor above). With tp > 1
  // the head-split tensors are a TP rank's: qkv (B, T, 3*C_local), att (B, NH_local, T, T),
  // atty (B, T, C_local), fc and fc_gelu (B, T, 4*C_local), logits (B, T, V_local).
  // With `sequence_parallel` (tp > 1, tp dividing B*T) a block's ln1_in, ln1_out, ln2_in,
  // ln2_out and LN statistics hold only the rank's B*T/tp token rows (tp_hooks.h); the head
  // keeps its full-size buffers (x_final and the lnf statistics use the slice's rows, lnf_out
  // is gathered whole for the vocabulary-parallel LM head).
  // `recompute` leaves out of each block what the mode drops (LayerActivations): the model
  // that runs these activations must be built with the same mode. `bf16_storage` (mixed
  // precision) keeps a block's other tensors in PackedLayer instead (a no-op under full
  // recompute, which keeps only the fp32 block input). `blockwise_attention` (a CP group runs
  // the attention core, cp_hooks.h): no block keeps `att` in any mode; what the group keeps per
  // block (log-sum-exp, gathered K/V or head-split tensors) it charges to the tracker itself.
  GptActivations(const GptConfig& config, int64_t B, int64_t T, MemoryTracker* tracker,
                 LayerRange layers, bool embedding, bool head, int tp = 1,
                 bool sequence_parallel = false, Recompute recompute = Recompute::none,
                 bool bf16_storage = false, bool blockwise_attention = false);

  int64_t batch() const { return B_; }
  int64_t seq() const { return T_; }
  int64_t layers() const { return static_cast<int64_t>(layers_.size()); }
  LayerActivations& layer(int64_t l) { return layers_[static_cast<size_t>(l)]; }
  const LayerActivations& layer(int64_t l) const { return layers_[static_cast<size_t>(l)]; }
  HeadActivations& head() { return head_; }
  const HeadActivations& head() const { return head_; }
  // Where block l writes its output: block l+1's input, or the head's x_final for the last
  // block of the range.
  float* block_output(int64_t l) {
    return l + 1 < range_.end() ? layer(l + 1).ln1_in : head_.x_final;
  }
  LayerRange range() const { return range_; }
  Recompute recompute() const { return recompute_; }
  // Whether blocks keep PackedLayer tensors (bf16_storage, unless full recompute).
  bool packed() const { return packed_; }
  bool bf16_storage() const { return bf16_storage_; }
  PackedLayer& packed_layer(int64_t l) { return packed_layers_[static_cast<size_t>(l)]; }
  const PackedLayer& packed_layer(int64_t l) const {
    return packed_layers_[static_cast<size_t>(l)];
  }
  // Block l's MoE state (sized for every block of the model; used by MoE blocks only).
  MoeLayerState& moe_layer(int64_t l) { return moe_layers_[static_cast<size_t>(l)]; }
  const MoeLayerState& moe_layer(int64_t l) const { return moe_layers_[static_cast<size_t>(l)]; }
  // The loss scale the head's backward ran with: MoE blocks scale their aux loss's gradient
  // by it (times the coefficient), as the cross-entropy's.
  float loss_scale = 1.0f;

 private:
  int64_t B_ = 0, T_ = 0;
  LayerRange range_;
  Recompute recompute_ = Recompute::none;
  bool bf16_storage_ = false, packed_ = false;
  std::vector<Buffer<float>> layer_storage_;
  std::vector<Buffer<bf16>> packed_storage_;
  std::vector<PackedLayer> packed_layers_;
  Buffer<float> head_storage_;
  Buffer<int32_t> id_storage_;
  std::vector<LayerActivations> layers_;
  std::vector<MoeLayerState> moe_layers_;
  HeadActivations head_;
};

// Scratch shared by all blocks (and all micro-batches) of one model: gradients of the
// activations while backward runs through a block, the row-parallel output before the
// tensor-parallel all-reduce in forward, and under recompute the tensors the mode drops from a
// block (one block's worth: the forward passes through them, the backward re-creates them).
struct GptWorkspace {
  // `threads`: the size of the ThreadTeam the model splits ops across (one datt each).
  // `tp` > 1: dqkv, dfc and dfc_gelu are a TP rank's (3*C_local, 4*C_local wide).
  // `sequence_parallel` and `recompute`: the model's, for the size of `dropped`; with
  // `bf16_storage` `dropped` holds every block tensor but the input (full recompute's set): the
  // fp32 working copies of a block's packed tensors. `blockwise_attention` (CP): no datt and no
  // dropped att (null).
  GptWorkspace(const GptConfig& config, int64_t B, int64_t T, MemoryTracker* tracker,
               int threads = 1, int tp = 1, bool sequence_parallel = false,
               Recompute recompute = Recompute::none, bool bf16_storage = false,
               bool blockwise_attention = false);

  int64_t batch = 0, seq = 0;
  int threads = 1;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  bool bf16_storage = false;
  float* dres = nullptr;      // (B, T, C)   gradient of the residual stream
  float* d_btc1 = nullptr;    // (B, T, C)   gradient of a LayerNorm output; forward: linear out
  float* d_btc2 = nullptr;    // (B, T, C)   gradient of the attention output
  float* dqkv = nullptr;      // (B, T, 3*C_local)
  float* dfc = nullptr;       // (B, T, 4*C_local) gradient of the GELU input
  float* dfc_gelu = nullptr;  // (B, T, 4*C_local) gradient of the GELU output
  float* datt = nullptr;      // (threads, T, T) one (b, head)'s score gradient per thread
  // The block tensors `recompute` drops (shapes as in LayerActivations; the others null):
  // selective att, full all but ln1_in. plan::recompute_scratch_bytes.
  LayerActivations dropped;

 private:
  Buffer<float> storage_;
};

}  // namespace dtrain::model
