// The routing report of an MoE run: per step, the load-balancing loss, the assignments each
// expert took (summed over the MoE blocks and the global batch) and the dropped ones, as a
// table and as JSON with the same figures.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/model/moe_config.h"

namespace dtrain::train {

struct MoeStepRow {
  int64_t step = 0;
  double aux_loss = 0;                 // mean over micro-batches, summed over MoE blocks
  std::vector<int64_t> expert_tokens;  // (E)
  int64_t assignments = 0;             // tokens * k * MoE blocks
  int64_t dropped = 0;                 // sum(expert_tokens) = assignments - dropped
};

// (max - min) / mean of a step's tokens per expert: 0 when perfectly balanced.
double expert_spread(const std::vector<int64_t>& expert_tokens);

void print_moe_report(std::ostream& out, const model::MoeConfig& m,
                      const std::vector<MoeStepRow>& steps);
nlohmann::json moe_report_to_json(const model::MoeConfig& m, const std::vector<MoeStepRow>& steps);

}  // namespace dtrain::train
