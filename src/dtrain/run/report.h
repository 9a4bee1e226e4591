// The end-of-run summary of `dtrain train`, as a readable table or as JSON with the same
// figures.
#pragma once

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "dtrain/report/layout_report.h"
#include "dtrain/run/trainer.h"

namespace dtrain::train {

void print_summary(std::ostream& out, const TrainSummary& summary);
// "SIGINT", "SIGTERM", or "signal N".
std::string signal_name(int signal_number);
nlohmann::json summary_to_json(const TrainSummary& summary);

}  // namespace dtrain::train
