// The tensor-parallel cut of every GPT tensor: local shapes and serial-to-shard slicing.
#include "dtrain/model/tp_shard.h"

#include <algorithm>
#include <vector>

#include "dtrain/core/check.h"

namespace dtrain::model {
namespace {

// Elements of one "row" (the product of every dimension after the first; 1 for a vector).
int64_t row_length(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// A stacked expert tensor's slice, expert by expert: expert_rows cuts dimension 1 (each expert's
// 4C rows, or its 4C bias entries; a SwiGLU expert's gate and up rows, F each, as a block of
// each), expert_columns the last (each of the E*C rows' 4C or F columns).
std::vector<FlatRange> expert_ranges(const ParamTensor& whole, const GptConfig& c, int tp,
                                     int tp_rank) {
  std::vector<FlatRange> out;
  if (tp_split_of(whole.name) == TpSplit::expert_rows) {
    const int64_t experts = whole.shape[0], per_expert = whole.count / experts;
    const int64_t blocks = c.llama() ? 2 : 1, per_block = per_expert / blocks;
    const int64_t local = per_block / tp;
    for (int64_t e = 0; e < experts; ++e) {
      for (int64_t b = 0; b < blocks; ++b) {
        out.push_back({e * per_expert + b * per_block + tp_rank * local, local});
      }
    }
    return out;
  }
  const int64_t width = whole.shape.back(), local = width / tp, rows = whole.count / width;
  for (int64_t r = 0; r < rows; ++r) out.push_back({r * width + tp_rank * local, local});
  return out;
}

}  // namespace

TpSplit tp_split_of(std::string_view name) {
  if (name == "wte" || name == "lm_head.w") return TpSplit::vocab_rows;
  if (name.ends_with("attn.qkv.w") || name.ends_with("attn.qkv.b")) return TpSplit::qkv_rows;
  if (name.ends_with("mlp.fc.w") || name.ends_with("mlp.fc.b")) return TpSplit::rows;
  if (name.ends_with("attn.proj.w") || name.ends_with("mlp.proj.w")) return TpSplit::columns;
  if (name.ends_with("moe.fc.w") || name.ends_with("moe.fc.b")) return TpSplit::expert_rows;
  if (name.ends_with("moe.proj.w")) return TpSplit::expert_columns;
  return TpSplit::replicated;
}

int64_t tp_padded_vocab(int64_t vocab, int tp) {
  return (vocab + tp - 1) / tp * tp;
}

int64_t tp_vocab_local(int64_t vocab, int tp) {
  return tp_padded_vocab(vocab, tp) / tp;
}

int64_t tp_vocab_begin(int64_t vocab, int tp, int tp_rank) {
  return tp_rank * tp_vocab_local(vocab, tp);
}

void check_tensor_parallel(const GptConfig& c, int tp) {
  DTRAIN_CHECK(tp >= 1, "--tp must be at least 1 (got ", tp, ")");
  DTRAIN_CHECK(tp <= c.heads, "--tp ", tp, " is larger than n_head ", c.heads,
               " (each rank needs at least one head)");
  DTRAIN_CHECK(c.heads % tp == 0, "--tp ", tp, " does not divide n_head ", c.heads);
  if (!c.llama()) {
    DTRAIN_CHECK((4 * c.channels) % tp == 0, "--tp ", tp, " does not divide the MLP width 4*C ",
                 4 * c.channels);
    return;
  }
  // Llama: each rank keeps NH / tp query heads and NKV / tp K/V heads (Megatron's split), and
  // F / tp of the gate, the up and the down projection.
  // With more TP ranks than K/V heads each rank holds a copy of one (GptConfig::kv_head_copies).
  const int64_t kv = c.kv_heads_or_heads();
  DTRAIN_CHECK(kv % tp == 0 || tp % kv == 0, "--tp ", tp, " and --kv-heads ", kv,
               ": one must divide the other (each TP rank holds kv / tp K/V heads, or, for tp "
               "above them, a copy of one shared by tp / kv ranks)");
  DTRAIN_CHECK(c.ffn() % tp == 0, "--tp ", tp, " does not divide --ffn-hidden ", c.ffn());
}

void check_sequence_parallel(int64_t B, int64_t T, int tp) {
  DTRAIN_CHECK(tp >= 1 && (B * T) % tp == 0, "--sequence-parallel splits the B*T = ", B * T,
               " token rows (--global-batch ", B, " x --seq-length ", T, ") across --tp ", tp,
               " ranks: --tp ", tp, " does not divide --seq-length ", T, " x --global-batch ", B);
}

namespace {

// A row-split tensor's blocks, each cut over the TP ranks (a rank keeps its slice of each): the
// qkv product's Q, K and V (C each for GPT, NH HS and NKV HS twice for Llama's grouped-query
// attention), Llama's [gate | up] (F each), and one block of every row otherwise.
std::vector<int64_t> row_blocks(const ParamTensor& whole, const GptConfig& c) {
  if (tp_split_of(whole.name) == TpSplit::qkv_rows) {
    const int64_t q = c.heads * c.head_size(), kv = c.kv_heads_or_heads() * c.head_size();
    return {q, kv, kv};
  }
  if (c.llama() && whole.name.ends_with("mlp.fc.w")) return {c.ffn(), c.ffn()};
  return {whole.shape[0]};
}

// The rows of a row-split tensor TP rank `tp_rank` holds, as (first, count) per block: its slice
// of each; with more TP ranks than K/V heads, K's and V's block whole K/V head r / copies.
std::vector<std::pair<int64_t, int64_t>> row_runs(const ParamTensor& whole, const GptConfig& c,
                                                  int tp, int tp_rank) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  const bool qkv = tp_split_of(whole.name) == TpSplit::qkv_rows;
  const int copies = qkv ? c.kv_head_copies(tp) : 1;
  int64_t first = 0, block_index = 0;
  for (const int64_t block : row_blocks(whole, c)) {
    if (qkv && block_index > 0 && copies > 1) {
      const int64_t head = c.head_size();
      runs.emplace_back(first + (tp_rank / copies) * head, head);
    } else {
      runs.emplace_back(first + tp_rank * (block / tp), block / tp);
    }
    first += block;
    ++block_index;
  }
  return runs;
}

}  // namespace

ParamTable tp_local_table(const ParamTable& whole, const GptConfig& config, int tp) {
  if (tp == 1) return whole;
  check_tensor_parallel(config, tp);
  ParamTable local;
  for (const ParamTensor& t : whole.tensors()) {
    std::vector<int64_t> shape = t.shape;
    switch (tp_split_of(t.name)) {
      case TpSplit::replicated:
        break;
      case TpSplit::rows:
        shape[0] /= tp;
        break;
      case TpSplit::qkv_rows:
        shape[0] = 0;
        for (const auto& [first, count] : row_runs(t, config, tp, 0)) shape[0] += count;
        break;
      case TpSplit::columns:
        shape[1] /= tp;
        break;
      case TpSplit::vocab_rows:
        shape[0] = tp_vocab_local(config.vocab, tp);
        break;
      case TpSplit::expert_rows:
        shape[1] /= tp;
        break;
      case TpSplit::expert_columns:
        shape.back() /= tp;
        break;
    }
    local.add(t.name, std::move(shape));
  }
  local.set_backward_order(whole.backward_order());
  return local;
}

std::vector<float> tp_slice(const ParamTensor& whole, std::span<const float> values,
                            const GptConfig& config, int tp, int tp_rank) {
  DTRAIN_CHECK(static_cast<int64_t>(values.size()) == whole.count, "tp_slice: ", whole.name,
               " has ", whole.count, " elements, got ", values.size());
  DTRAIN_CHECK(tp_rank >= 0 && tp_rank < tp, "tp_slice: tp_rank ", tp_rank, " outside [0, ", tp,
               ")");
  const int64_t row = row_length(whole.shape);
  const int64_t rows = whole.shape[0];
  std::vector<float> out;
  auto take_rows = [&](int64_t first, int64_t count) {
    const auto begin = values.begin() + first * row;
    out.insert(out.end(), begin, begin + count * row);
  };
  switch (tp_split_of(whole.name)) {
    case TpSplit::replicated:
      out.assign(values.begin(), values.end());
      break;
    case TpSplit::rows:
    case TpSplit::qkv_rows:
      for (const auto& [first, count] : row_runs(whole, config, tp, tp_rank)) {
        take_rows(first, count);
      }
      break;
    case TpSplit::columns: {
      const int64_t K_local = row / tp;
      for (int64_t r = 0; r < rows; ++r) {
        const auto begin = values.begin() + r * row + tp_rank * K_local;
        out.insert(out.end(), begin, begin + K_local);
      }
      break;
    }
    case TpSplit::vocab_rows: {
      const int64_t V_local = tp_vocab_local(config.vocab, tp);
      const int64_t first = tp_vocab_begin(config.vocab, tp, tp_rank);
      const int64_t real = std::clamp<int64_t>(rows - first, 0, V_local);
      if (real > 0) take_rows(first, real);
      out.resize(static_cast<size_t>(V_local * row), 0.0f);
      break;
    }
    case TpSplit::expert_rows:
    case TpSplit::expert_columns:
      for (const FlatRange& r : expert_ranges(whole, config, tp, tp_rank)) {
        const auto begin = values.begin() + r.offset;
        out.insert(out.end(), begin, begin + r.count);
      }
      break;
  }
  return out;
}

std::vector<FlatRange> tp_slice_ranges(const ParamTensor& whole, const GptConfig& config, int tp,
                                       int tp_rank) {
  DTRAIN_CHECK(tp_rank >= 0 && tp_rank < tp, "tp_slice_ranges: tp_rank ", tp_rank, " outside [0, ",
               tp, ")");
  const int64_t row = row_length(whole.shape);
  const int64_t rows = whole.shape[0];
  std::vector<FlatRange> out;
  auto take_rows = [&](int64_t first, int64_t count) {
    if (count > 0) out.push_back({first * row, count * row});
  };
  switch (tp_split_of(whole.name)) {
    case TpSplit::replicated:
      out.push_back({0, whole.count});
      break;
    case TpSplit::rows:
    case TpSplit::qkv_rows:
      for (const auto& [first, count] : row_runs(whole, config, tp, tp_rank)) {
        take_rows(first, count);
      }
      break;
    case TpSplit::columns: {
      const int64_t K_local = row / tp;
      for (int64_t r = 0; r < rows; ++r) out.push_back({r * row + tp_rank * K_local, K_local});
      break;
    }
    case TpSplit::vocab_rows: {
      const int64_t first = tp_vocab_begin(config.vocab, tp, tp_rank);
      take_rows(first, std::clamp<int64_t>(rows - first, 0, tp_vocab_local(config.vocab, tp)));
      break;
    }
    case TpSplit::expert_rows:
    case TpSplit::expert_columns:
      out = expert_ranges(whole, config, tp, tp_rank);
      break;
  }
  return out;
}

}  // namespace dtrain::model
