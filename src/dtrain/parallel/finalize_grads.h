// Gradient finalization between backward and the optimizer step, written once for every layout
// (Megatron's finalize_model_grads): the tied embedding's two halves summed, sequence
// parallelism's LayerNorm gradients completed, and the global gradient norm from one ownership
// rule, with its clip scale. Each part is a no-op where its group is absent or has one rank, so
// the serial engine runs the same code as a mesh with every axis of size 1.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "dtrain/comm/chunks.h"
#include "dtrain/comm/collective_kind.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/core/bf16.h"
#include "dtrain/model/gpt.h"
#include "dtrain/parallel/mesh.h"

namespace dtrain::parallel {

// The tied wte's all-reduce runs the ring, whatever its size: the engines' counters are set
// beside plan::collective_traffic for this algorithm (one choice, so every layout moves the
// tied gradient alike).
inline constexpr comm::Algorithm kTiedEmbeddingAlgorithm = comm::Algorithm::ring;

// The LM head is tied to wte: under a pipeline the first stage's embedding gradient and the last
// stage's head gradient are two halves of one gradient. Sums `dwte` (this end stage's wte
// gradient, wherever it lives) over `embedding` (Megatron's embedding group: the first and last
// stage of one (dp, tp) column), so both copies hold the whole. Returns this rank's traffic; a
// no-op when `embedding` is null (no pipeline, or a stage in between).
comm::Traffic sum_tied_embedding_grads(std::span<float> dwte, comm::Communicator* embedding);

// Sequence parallelism: each TP rank's LayerNorm weight and bias gradients (ln1, ln2, lnf) are
// sums over its slice of the tokens only; one ring all-reduce per tensor over `tp` completes
// them (Megatron's "sequence-parallel parameters"). `grads` holds the flat elements [first,
// first + size) of the rank's table (all of them, or a ZeRO shard after the DP sync: every rank
// of a TP group has the same dp rank, so the same range), and only the LayerNorm elements inside
// it are reduced. A no-op unless `sequence_parallel` and `tp` has more than one rank. The biases
// added after g (attn.proj.b, mlp.proj.b) need none: backward gathers their full gradient before
// the row-parallel linear's backward sums it over all rows.
comm::Traffic all_reduce_sequence_parallel_norm_grads(const model::ParamTable& table,
                                                      std::span<float> grads, int64_t first,
                                                      comm::Communicator* tp,
                                                      bool sequence_parallel);
// Mixed precision's bf16 gradients: each tensor is widened, summed over an fp32 wire (the same
// bytes) and rounded once.
comm::Traffic all_reduce_sequence_parallel_norm_grads(const model::ParamTable& table,
                                                      std::span<bf16> grads, int64_t first,
                                                      comm::Communicator* tp,
                                                      bool sequence_parallel);

// More TP ranks than K/V heads (GptConfig::kv_head_copies): each K/V head's rows of every qkv
// weight (a TP rank's [q | k | v] holds one head's K and V after its query rows) are held by the
// head's copies, each gradient a sum over its own query heads' attention only; one ring
// all-reduce per tensor over `copies` (the ranks holding the same head) completes them, as SP's
// LayerNorm sums (`grads` and `first` likewise). The input gradient needs none: TP's all-reduce
// of the qkv product's input gradient already sums every copy's share.
struct KvCopyRows {
  int64_t offset = 0, count = 0;  // elements within each qkv weight; count 0: no copies
};
KvCopyRows kv_copy_rows(const model::GptConfig& config, int tp);
std::pair<int64_t, int64_t> kv_copy_part(const model::ParamTensor& t, KvCopyRows rows);
comm::Traffic all_reduce_kv_copy_grads(const model::ParamTable& table, std::span<float> grads,
                                       int64_t first, comm::Communicator* copies, KvCopyRows rows);
comm::Traffic all_reduce_kv_copy_grads(const model::ParamTable& table, std::span<bf16> grads,
                                       int64_t first, comm::Communicator* copies, KvCopyRows rows);

// Who counts a gradient element in the global norm, so that over the whole mesh every element of
// the serial model is counted exactly once:
//   - DP: at ZeRO 0 the replicas hold the same averaged gradient and DP rank 0 counts it; at
//     stages 1-3 each DP rank counts the flat range it owns (`zero_shard`);
//   - TP: a tensor TP cuts is counted by every TP rank (its slice), a replicated one (LayerNorms,
//     wpe, the biases after g) by TP rank 0 only, a K/V head's copied rows by its first copy;
//   - PP: each stage counts its own tensors, except the last stage's copy of the tied wte, which
//     the first stage counts (`tied_copy`).
// The default is the serial model: everything counted.
struct GradOwnership {
  MeshCoord coord;         // this rank's (dp, tp, pp)
  int zero_stage = 0;      // 0..3
  comm::Chunk zero_shard;  // stages 1-3: the flat elements this DP rank owns (ShardLayout::owned)
  bool tied_copy = false;  // the stage holds the last stage's copy of the tied wte
  // Expert parallelism (ZeRO 0): the expert tensors (model::is_expert_tensor) are counted by the
  // first expert-DP replica, the DP ranks below `ep` (each its own experts), not DP rank 0 alone.
  int ep = 1;
  // More TP ranks than K/V heads: the copied K/V rows of each qkv weight, and whether this rank
  // is the copy that counts them.
  KvCopyRows kv_copy;
  bool counts_kv_copy = true;
};

// Whether `stage` holds the copy of the tied wte that another stage counts: the head without the
// embedding (a pipeline's last stage).
bool holds_tied_copy(const model::GptStage& stage);

// The ownership rule as data: the flat ranges of a rank's local table (`table`: its stage, cut
// for its TP rank) that it counts, ascending, adjacent ranges merged (so a rank that counts all
// it holds sums its squares in one pass, the serial model's order).
std::vector<comm::Chunk> counted_grad_ranges(const model::ParamTable& table,
                                             const GradOwnership& owner);

// The sum of squares (double) of the elements counted_grad_ranges gives this rank. `grads` is
// the rank's gradient, its element 0 being flat element `grads_first` (0 for the model's whole
// buffer, the shard's offset for a ZeRO gradient shard); it must hold every counted element.
double owned_sum_of_squares(const model::ParamTable& table, const GradOwnership& owner,
                            std::span<const float> grads, int64_t grads_first = 0);
double owned_sum_of_squares(const model::ParamTable& table, const GradOwnership& owner,
                            std::span<const bf16> grads, int64_t grads_first = 0);

struct GradNorm {
  double norm = 0;       // of the whole model's gradient, before clipping
  float clip_scale = 1;  // optim::clip_scale(norm, max_norm): AdamW's grad_scale
};

// The global norm: the owned sums of squares of the ranks of `world` (the ranks that split the
// gradient's ownership; null for a single rank holding the whole model) added in rank order
// (comm::sum_in_rank_order), so every rank clips by the same bits; and its clip scale.
GradNorm global_grad_norm(double owned_squares, comm::Communicator* world, float max_norm);

}  // namespace dtrain::parallel
