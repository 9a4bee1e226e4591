// The engine clock's piece shared by its files (engine_clock.cc, engine_compute.cc): the stage
// with the most routed blocks. Not part of the public API.
#pragma once

#include <cstdint>

#include "dtrain/clock/engine_clock.h"

namespace dtrain::plan::detail {

// Routed blocks on the stage that holds the most of them (engine_clock.cc).
int64_t busiest_stage_moe_layers(const EngineClockInput& in);

}  // namespace dtrain::plan::detail
