// The engine-neutral state's helpers: names, layout text, and the mapping between flat buffer
// ranges (what ZeRO shards and stage models hold) and per-tensor pieces.
#include "dtrain/checkpoint/train_state.h"

#include <algorithm>
#include <cstring>

#include "dtrain/core/check.h"

namespace dtrain::checkpoint {

std::string_view name(StateKind kind) {
  switch (kind) {
    case StateKind::param:
      return "param";
    case StateKind::adam_m:
      return "adam_m";
    case StateKind::adam_v:
      return "adam_v";
  }
  return "?";
}

std::vector<float>& SerialState::of(StateKind kind) {
  return kind == StateKind::param ? params : kind == StateKind::adam_m ? adam_m : adam_v;
}

const std::vector<float>& SerialState::of(StateKind kind) const {
  return kind == StateKind::param ? params : kind == StateKind::adam_m ? adam_m : adam_v;
}

std::span<const float> SerialState::tensor(const model::ParamTensor& t, StateKind kind) const {
  const std::vector<float>& all = of(kind);
  DTRAIN_CHECK(t.offset + t.count <= static_cast<int64_t>(all.size()), "serial state: tensor ",
               t.name, " lies outside the ", all.size(), " elements of ", name(kind));
  return std::span<const float>(all).subspan(static_cast<size_t>(t.offset),
                                             static_cast<size_t>(t.count));
}

std::string describe(const StateLayout& l) {
  const std::string cp = l.cp > 1 ? str(" cp=", l.cp, " (", l.cp_algo, ", ", l.cp_split, ")") : "";
  return str("dp=", l.dp, cp, " tp=", l.tp, " pp=", l.pp, " zero=", l.zero);
}

void append_flat_range(const model::ParamTable& table, StateKind kind, int64_t offset,
                       int64_t count, std::span<const float> values, std::vector<StatePiece>& out) {
  DTRAIN_CHECK(static_cast<int64_t>(values.size()) >= count, "append_flat_range: ", count,
               " elements wanted, ", values.size(), " given");
  const int64_t end = offset + count;
  for (const model::ParamTensor& t : table.tensors()) {
    const int64_t begin = std::max(offset, t.offset);
    const int64_t stop = std::min(end, t.offset + t.count);
    if (stop <= begin) continue;
    StatePiece p;
    p.tensor = t.name;
    p.kind = kind;
    p.ranges.push_back({begin - t.offset, stop - begin});
    const auto first = values.begin() + (begin - offset);
    p.data.assign(first, first + (stop - begin));
    out.push_back(std::move(p));
  }
}

void append_whole_tensors(const model::ParamTable& table, StateKind kind,
                          std::span<const float> values, std::vector<StatePiece>& out) {
  append_flat_range(table, kind, 0, table.total_count(), values, out);
}

void copy_flat_range(const SerialState& state, const model::ParamTable& table, StateKind kind,
                     int64_t offset, int64_t count, std::span<float> dst) {
  DTRAIN_CHECK(static_cast<int64_t>(dst.size()) >= count, "copy_flat_range: ", count,
               " elements wanted, room for ", dst.size());
  const int64_t end = offset + count;
  for (const model::ParamTensor& t : table.tensors()) {
    const int64_t begin = std::max(offset, t.offset);
    const int64_t stop = std::min(end, t.offset + t.count);
    if (stop <= begin) continue;
    const model::ParamTensor& serial =
        state.table[static_cast<size_t>(state.table.index_of(t.name))];
    DTRAIN_CHECK(serial.count == t.count, "checkpoint: tensor ", t.name, " has ", serial.count,
                 " elements in the checkpoint, ", t.count, " in this model");
    const std::span<const float> src = state.tensor(serial, kind);
    std::memcpy(dst.data() + (begin - offset), src.data() + (begin - t.offset),
                static_cast<size_t>(stop - begin) * sizeof(float));
  }
}

void copy_whole_state(const SerialState& state, const model::ParamTable& table,
                      std::span<float> params, std::span<float> adam_m, std::span<float> adam_v) {
  const int64_t n = table.total_count();
  copy_flat_range(state, table, StateKind::param, 0, n, params);
  copy_flat_range(state, table, StateKind::adam_m, 0, n, adam_m);
  copy_flat_range(state, table, StateKind::adam_v, 0, n, adam_v);
}

}  // namespace dtrain::checkpoint
