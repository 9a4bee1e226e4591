// The planner's reports: a readable table for people and the same figures as JSON for tools
// (`dtrain plan` and `dtrain plan --json`). Raw numbers in the JSON are in bytes, seconds,
// FLOPs and fractions; the text rounds them (GB = 10^9 bytes).
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "dtrain/plan/planner.h"

namespace dtrain::plan {

std::string format_input(const PlanInput& input);  // model, cluster, training: a few lines
std::string format_plan(const PlanInput& input, const Plan& plan);
std::string format_search(const PlanInput& input, const SearchResult& result);

nlohmann::json input_json(const PlanInput& input);
nlohmann::json plan_json(const Plan& plan);
nlohmann::json layout_json(const Layout& layout);
nlohmann::json search_json(const PlanInput& input, const SearchResult& result);

}  // namespace dtrain::plan
