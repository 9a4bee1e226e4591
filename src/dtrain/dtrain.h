// dtrain's user API in one include: collectives over thread ranks (or MPI processes), the
// planner, training runs and checkpoints. Headers reached only through the implementation
// (backends, kernels, the executor's internals) are installed too but may change between minor
// versions; these entry points are what a 0.x minor release keeps.
#pragma once

#include "dtrain/checkpoint/checkpoint.h"  // checkpoint::load_checkpoint
#include "dtrain/comm/collectives.h"       // all_reduce, reduce_scatter, all_gather, ...
#include "dtrain/comm/threads/backend.h"   // comm::threads::run_ranks: N ranks as N threads
#include "dtrain/core/check.h"             // dtrain::Error
#include "dtrain/core/version.h"           // dtrain::version()
#include "dtrain/cost/collective_cost.h"   // plan::collective_traffic and the alpha-beta cost
#include "dtrain/cost/model_presets.h"     // plan::model_preset
#include "dtrain/machine/hardware.h"       // plan::parse_cluster
#include "dtrain/plan/planner.h"           // plan::evaluate, plan::search
#include "dtrain/plan/report.h"            // plan::plan_json, plan::format_plan
#include "dtrain/run/run.h"                // train::run_training
