// Which transformer blocks each pipeline stage runs: the split lives in cost/pipeline_stages.h,
// where the planner prices each stage on its own blocks; the engine's executor and the commands
// use the same functions under these names.
#pragma once

#include "dtrain/cost/pipeline_stages.h"

namespace dtrain::parallel {

using plan::balanced_partition;
using plan::explicit_partition;
using plan::layer_ranges;
using plan::parse_stage_layers;
using plan::PartitionFlags;
using plan::StagePartition;

}  // namespace dtrain::parallel
