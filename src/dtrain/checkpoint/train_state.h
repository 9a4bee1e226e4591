// The engine-neutral training state a checkpoint holds: every rank exports the pieces of the
// serial model's tensors (parameters and AdamW moments) that it owns, and imports its share of
// the whole serial state. Any layout can read what any other layout wrote (resharding).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/model/gpt_config.h"
#include "dtrain/model/param_table.h"
#include "dtrain/model/tp_shard.h"

namespace dtrain::checkpoint {

// Which of the three per-element state arrays a piece belongs to.
enum class StateKind { param, adam_m, adam_v };
inline constexpr int kStateKindCount = 3;
std::string_view name(StateKind kind);  // "param", "adam_m", "adam_v"

// Part of one serial tensor: `ranges` are in the tensor's own row-major flat index space
// (element 0 is the tensor's first element, not the buffer's), in the order `data` holds them.
struct StatePiece {
  std::string tensor;  // serial name: "wte", "h.0.attn.qkv.w", ...
  StateKind kind = StateKind::param;
  std::vector<model::FlatRange> ranges;
  std::vector<float> data;  // sum of the ranges' counts
};

// What one rank exports. Every element of every (tensor, kind) of the serial model is owned by
// exactly one rank of the job (replicas are written once), so the union over the ranks of a
// job covers the serial state exactly once.
struct RankState {
  std::vector<StatePiece> pieces;
  int64_t adam_step = 0;  // AdamW updates done (the same on every rank)
};

// The whole serial state, in the serial flat layout (model::gpt_param_table offsets).
struct SerialState {
  model::GptConfig model;
  model::ParamTable table;                    // gpt_param_table(model)
  std::vector<float> params, adam_m, adam_v;  // (param_count) each
  int64_t adam_step = 0;

  std::vector<float>& of(StateKind kind);
  const std::vector<float>& of(StateKind kind) const;
  // The values of serial tensor `t` of `kind`.
  std::span<const float> tensor(const model::ParamTensor& t, StateKind kind) const;
};

// The layout a checkpoint was written with, for the manifest and messages.
struct StateLayout {
  int dp = 1, tp = 1, pp = 1, zero = 0;
  // Context parallelism: the ranks a sequence's tokens were split over, and (cp > 1) the
  // attention algorithm ("ring", "all-gather", "ulysses") and token split ("balanced",
  // "contiguous") the run used. Recorded for the reader; the state itself is replicated over CP,
  // so any layout resumes it. Manifests written before CP have none: cp 1.
  int cp = 1;
  std::string cp_algo, cp_split;
  bool operator==(const StateLayout&) const = default;
};
// "dp=2 tp=1 pp=1 zero=3"; with CP "dp=1 cp=2 (ring, balanced) tp=1 pp=1 zero=0".
std::string describe(const StateLayout& layout);

// Helpers shared by the engines' export_state / import_state.

// The pieces of the flat buffer range [offset, offset + count) of `table` (a serial or stage
// table whose names are the serial names and whose shapes are the serial shapes), one per
// tensor it touches; `values` holds the range's count elements.
void append_flat_range(const model::ParamTable& table, StateKind kind, int64_t offset,
                       int64_t count, std::span<const float> values, std::vector<StatePiece>& out);
// Every tensor of `table` whole, read from `values` (table.total_count() elements).
void append_whole_tensors(const model::ParamTable& table, StateKind kind,
                          std::span<const float> values, std::vector<StatePiece>& out);
// Copies serial state `kind` of every tensor of `table` (serial names and shapes) into
// `dst` at the table's offsets, starting at flat element `offset` and taking `count` elements
// (a ZeRO shard's range; pass 0 and total_count() for all of it).
void copy_flat_range(const SerialState& state, const model::ParamTable& table, StateKind kind,
                     int64_t offset, int64_t count, std::span<float> dst);
// All of `table` of each kind: the parameters and both AdamW moments of a rank that holds every
// element of its tensors (serial, a pipeline stage).
void copy_whole_state(const SerialState& state, const model::ParamTable& table,
                      std::span<float> params, std::span<float> adam_m, std::span<float> adam_v);

}  // namespace dtrain::checkpoint
