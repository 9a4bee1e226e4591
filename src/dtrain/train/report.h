// The end-of-run summary of `dtrain train`, as a readable table or as JSON with the same
// figures.
#pragma once

#include <ostream>

#include <nlohmann/json.hpp>

#include "dtrain/train/trainer.h"

namespace dtrain::train {

void print_summary(std::ostream& out, const TrainSummary& summary);
nlohmann::json summary_to_json(const TrainSummary& summary);

}  // namespace dtrain::train
