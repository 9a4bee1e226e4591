// Tensor-parallel shapes of the GPT (Megatron, Shoeybi et al. 2019, §3): how each parameter
// tensor is cut across the N ranks of a TP group, the local table each rank holds (the serial
// table's names and order, local shapes), and the one function that maps a serial tensor to a
// rank's slice (used by the tests, the initialisation and checkpoint resharding).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "dtrain/model/gpt_config.h"
#include "dtrain/model/param_table.h"

namespace dtrain::model {

// How a tensor is cut. Rows/columns follow the (out, in) layout of a Linear weight.
enum class TpSplit {
  replicated,  // LayerNorms, wpe, the biases added after g (attn.proj.b, mlp.proj.b)
  rows,        // column-parallel linear (mlp.fc.w, mlp.fc.b): rank r holds rows r*R/N ..
  qkv_rows,    // attn.qkv.w/b: the rows of each of Q, K, V cut by heads: nh_local heads each
  columns,     // row-parallel linear (attn.proj.w, mlp.proj.w): rank r holds columns r*K/N ..
  vocab_rows,  // wte: rank r holds padded_vocab/N rows from r*padded_vocab/N; rows >= V are 0
  // A routed layer's stacked experts (expert tensor parallelism: each expert's MLP cut as the
  // dense MLP is; the router and moe.proj.b, added after the reduction, are replicated):
  expert_rows,     // moe.fc.w (E, 4C, C), moe.fc.b (E, 4C): each expert's rows r*4C/N ..
                   // (Llama's (E, 2F, C): each expert's gate and up rows r*F/N .. of each)
  expert_columns,  // moe.proj.w (E, C, 4C) or (E, C, F): each expert's columns r*4C/N ..
};
TpSplit tp_split_of(std::string_view name);

// V rounded up to a multiple of tp: the padded rows never match a token and get no gradient.
int64_t tp_padded_vocab(int64_t vocab, int tp);
// This rank's first vocabulary row and its row count (padded_vocab / tp).
int64_t tp_vocab_begin(int64_t vocab, int tp, int tp_rank);
int64_t tp_vocab_local(int64_t vocab, int tp);

// Throws Error naming both values unless tp >= 1, tp <= NH, tp divides NH and 4*C:
// "--tp 3 does not divide n_head 4".
void check_tensor_parallel(const GptConfig& config, int tp);

// Sequence parallelism cuts the batch's B*T token rows into tp contiguous slices: throws Error
// naming --global-batch, --seq-length and --tp unless tp divides B*T.
void check_sequence_parallel(int64_t B, int64_t T, int tp);

// `whole` (a serial or stage table) with every tensor's local shape for TP size `tp`: same
// names, order and backward order; offsets are the local prefix sums. tp = 1 returns `whole`.
ParamTable tp_local_table(const ParamTable& whole, const GptConfig& config, int tp);

// The rank's local shard of the serial tensor `whole` whose values are `values` (whole.count
// of them); padded vocabulary rows are 0.
std::vector<float> tp_slice(const ParamTensor& whole, std::span<const float> values,
                            const GptConfig& config, int tp, int tp_rank);

// A run of `count` elements from `offset` in a tensor's row-major flat index space.
struct FlatRange {
  int64_t offset = 0;
  int64_t count = 0;
  bool operator==(const FlatRange&) const = default;
};

// The serial tensor's elements that tp_slice puts in the rank's shard, in the shard's order:
// the shard's first sum(count) elements are these ranges, one after the other. Padded
// vocabulary rows are not elements of the serial tensor and have no range. (Checkpoints.)
std::vector<FlatRange> tp_slice_ranges(const ParamTensor& whole, const GptConfig& config, int tp,
                                       int tp_rank);

}  // namespace dtrain::model
