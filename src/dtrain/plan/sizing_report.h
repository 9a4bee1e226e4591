// The planner's sizing answers as reports: the largest model whose states fit per ZeRO stage,
// the widest model of a shape family that fits with activations, and DeepSpeed's and
// ZeRO-Offload's offload estimates; each a table for people and the same figures as JSON
// (`dtrain plan --largest-model`, `--offload`). The command checks the flags; these print.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/plan/planner.h"

namespace dtrain::plan {

struct SizingReport {
  std::string text;
  nlohmann::json json;
};

// Per ZeRO stage 0-3: the largest model whose states fit one GPU of `cluster` with `dp` DP
// ranks and model parallelism tp x pp = `model_parallel` (memory_model.h, states only).
SizingReport largest_model_report(const Cluster& cluster, int dp, int model_parallel,
                                  StateBytes bytes);

// Per ZeRO stage in `zero_stages`: the widest member of `input.model`'s shape family that fits
// with activations under `base` (largest_model.h). `zero_given`: one stage was asked for (the
// layout line then names it; otherwise "zero=(each row)").
SizingReport largest_shape_report(const PlanInput& input, const Layout& base,
                                  const std::vector<int>& zero_stages, bool zero_given);

enum class OffloadConvention { deepspeed, deepspeed_zero2_code, zero_offload };
// The offload estimates (cost/offload.h) for `params` parameters whose largest layer holds
// `largest_layer`, on `cluster`'s nodes; `what` names the model in the title and
// `convention_name` is the flag's word for `convention`.
SizingReport offload_report(int64_t params, int64_t largest_layer, const std::string& what,
                            const Cluster& cluster, OffloadConvention convention,
                            const std::string& convention_name);

}  // namespace dtrain::plan
