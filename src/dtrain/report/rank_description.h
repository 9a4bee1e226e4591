// The engine side of predict_rank (cost/rank_prediction.h): an engine layout and stage described
// as the formulas read it, the stage's parameter counts without building its table, and the
// planned peak the memory check before a run compares with the machine.
#pragma once

#include <cstdint>

#include "dtrain/cost/rank_prediction.h"
#include "dtrain/engine/engine.h"
#include "dtrain/parallel/data_parallel.h"

namespace dtrain::train {

using plan::StageParamCounts;

// Read off the stage's table (the engine's model holds it; `total` its total_count(), `experts`
// its routed experts' count under EP).
StageParamCounts stage_param_counts(const parallel::StageUnits& units, int64_t total,
                                    int64_t experts = 0);
// Without a table: a block of a GPT is dense or routed (MoE), each kind with the same tensors,
// so a one-block model's TP- and EP-local table of each kind (model::tp_local_table,
// ep_local_table, the shapes' one description) gives each unit's count, and the stage's layout
// says which blocks it holds. Constant work in the layers, where a table of
// a 100,000-block model holds 1.2 million named tensors.
StageParamCounts stage_param_counts(const EngineConfig& config, int stage);

// Pipeline stage `stage` of `config` with its parameters `counts`, as predict_rank reads it (the
// schedule simulated for its in-flight count).
plan::EngineRank describe_rank(const EngineConfig& config, int stage,
                               const StageParamCounts& counts);

// predict_rank's peak bytes of one rank at pipeline stage `stage` of `config`: its model
// states, its activations (the checker's peak in-flight micro-batches, the workspace,
// recompute's scratch) and the working set above the shards. What --max-rank-memory and the
// memory check before a run compare. The counts default to the table-free ones.
double planned_rank_peak_bytes(const EngineConfig& config, int stage);
double planned_rank_peak_bytes(const EngineConfig& config, int stage,
                               const StageParamCounts& counts);

}  // namespace dtrain::train
