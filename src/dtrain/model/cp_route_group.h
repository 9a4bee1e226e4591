// The MoE router's view of a context-parallel group (ops/moe.h's MoeRouteGroup over
// cp_hooks.h): the CP ranks of one micro-batch route their T/N tokens of each of its B sequences
// together, so capacity and the aux loss are the whole micro-batch's, as in the serial model.
// A rank's runs are its stretches of consecutive positions in each sequence (balanced split:
// two per sequence, chunks r and 2N-1-r; contiguous: one).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dtrain/model/cp_hooks.h"
#include "dtrain/model/ops/moe.h"

namespace dtrain::model {

class CpRouteGroup final : public MoeRouteGroup {
 public:
  // B sequences of T_local tokens each on this rank.
  CpRouteGroup(ContextParallelHooks& cp, int64_t B, int64_t T_local);

  int size() const override { return cp_.size(); }
  int rank() const override { return cp_.rank(); }
  int64_t tokens() const override { return B_ * T_local_ * cp_.size(); }
  int64_t runs() const override { return B_ * static_cast<int64_t>(run_first_.size()); }
  int64_t run_of(int64_t n) const override;
  int64_t run_start(int q, int64_t j) const override;
  std::vector<double> gather(std::span<const double> values) override {
    return cp_.gather_routing(values);
  }

 private:
  ContextParallelHooks& cp_;
  int64_t B_, T_local_;
  std::vector<int64_t> run_first_;  // each run's first local position in a sequence
  std::vector<int64_t> run_index_;  // (T_local) the run of each local position
};

}  // namespace dtrain::model
