// PricingMemo: what search keeps between the layouts of one input, and the memory, bounds and
// step bound search asks for through it. Each piece is computed by the function evaluate calls
// (planner_internal.h) and looked up by the axes it reads, so the figures are evaluate's to the
// bit (tests/plan/search_test.cc, Search.MemoPricesAsEvaluateDoes).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "dtrain/plan/planner_internal.h"

namespace dtrain::plan::detail {

// What search keeps between the layouts of one input: the pieces of a price that depend on
// fewer axes than a layout, each computed by the same functions once for all the layouts alike
// in those axes (so the same bits as without it). Valid for one PlanInput only.
class PricingMemo {
 public:
  // The CP algorithm resolve_cp chooses for an automatic layout (tp, cp, b, recompute, sp and
  // the CP group's placement decide it).
  std::optional<CpAlgorithm> cp_algorithm(const Layout& l, const GroupPlacement& cp_group);
  void set_cp_algorithm(const Layout& l, const GroupPlacement& cp_group, CpAlgorithm algorithm);
  // linked_input of the search's input or of its per-rank form (which differs in the K/V heads
  // alone: per_rank_input).
  const PlanInput& linked(const PlanInput& given);
  // layer_activations of the layout, computed on first use.
  const LayerActivations& activations(const PlanInput& in, const Layout& l);
  // layer_times of the layout, computed on first use.
  const LayerTimes& times(const PlanInput& in, const ModelShape& real_model, const Layout& l);
  // tp_layer_seconds of the layout on its TP group, the links at their share (effective_links).
  std::pair<double, double> tp_layer(const PlanInput& in, const Layout& l);
  // stage_blocks of a layout of the balanced split priced on the per-rank model shape.
  const StageBlocks& blocks(const PlanInput& in, const Layout& l, int stage);

  using Key = std::array<int64_t, 8>;

 private:
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct KeyEqual {  // field by field: a key is built in place, and read back the same way
    bool operator()(const Key& a, const Key& b) const {
      for (size_t i = 0; i < a.size(); ++i) {
        if (a[i] != b[i]) return false;
      }
      return true;
    }
  };
  // An open-addressing hash table (linear probing, a power-of-two slot count) with the last
  // entry found kept aside: one layout asks for the same piece several times (its bound, its
  // memory, its step), and the next layout often for it again. Values live in a deque, so a
  // reference to one stays valid while others are added.
  template <class Value>
  class Table {
   public:
    const Value* find(const Key& key) {
      if (last_ != nullptr && KeyEqual{}(last_key_, key)) return last_;
      if (slots_.empty()) return nullptr;
      for (size_t i = KeyHash{}(key) & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
        const uint32_t slot = slots_[i];
        if (slot == 0) return nullptr;
        if (KeyEqual{}(keys_[slot - 1], key)) {
          last_key_ = key;
          last_ = &values_[slot - 1];
          return last_;
        }
      }
    }
    // `key` must not be in the table yet.
    const Value& insert(const Key& key, Value value) {
      if (2 * (keys_.size() + 1) > slots_.size()) grow();
      keys_.push_back(key);
      values_.push_back(std::move(value));
      place(keys_.size() - 1);
      last_key_ = key;
      last_ = &values_.back();
      return *last_;
    }

   private:
    void place(size_t index) {
      size_t i = KeyHash{}(keys_[index]) & (slots_.size() - 1);
      while (slots_[i] != 0) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = static_cast<uint32_t>(index + 1);
    }
    void grow() {
      slots_.assign(std::max<size_t>(64, 2 * slots_.size()), 0);
      for (size_t k = 0; k < keys_.size(); ++k) place(k);
    }
    std::vector<Key> keys_;
    std::deque<Value> values_;
    std::vector<uint32_t> slots_;  // 1 + the entry's index; 0: empty
    Key last_key_{};
    const Value* last_ = nullptr;
  };
  std::vector<std::pair<int64_t, std::unique_ptr<PlanInput>>> linked_;  // by K/V heads
  Table<CpAlgorithm> cp_algorithms_;
  Table<LayerActivations> activations_;
  Table<StageBlocks> blocks_;
  Table<LayerTimes> times_;
  Table<std::pair<double, double>> tp_layers_;
};

// evaluate_memory and step_lower_bound (planner.h) with the memo's pieces: the same figures.
Plan evaluate_memory(const PlanInput& in, const Layout& l, PricingMemo& memo);
// Its memory alone, no plan built around it (what search asks of 1e5 layouts).
MemoryBreakdown layout_memory(const PlanInput& in, const Layout& l, PricingMemo& memo);
double step_lower_bound(const PlanInput& in, const Layout& l, PricingMemo& memo);
// A bound on step_lower_bound from the blocks' compute and TP collectives alone, through the
// pipeline's last rank (no other collective, send or schedule priced): a few products with the
// memo's pieces, what search orders the fitting layouts by before it asks for the step's bound.
// 0 where it bounds nothing.
double step_compute_bound(const PlanInput& in, const Layout& l, PricingMemo& memo);
// memory_lower_bound (planner.h), the first stage's model states; and with the first stage's
// blocks' activations added to those `states`: still never above evaluate's total, and far
// closer.
double first_stage_states(const PlanInput& in, const Layout& l, PricingMemo& memo);
double memory_lower_bound(const PlanInput& in, const Layout& l, PricingMemo& memo, double states);

}  // namespace dtrain::plan::detail
