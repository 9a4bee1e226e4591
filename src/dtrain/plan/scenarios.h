// Worked scenarios (`dtrain scenario NAME`): five questions users ask before renting a cluster,
// each answered with the planner's own functions, as tables of figures and the findings they
// support. The same report prints as text or JSON.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dtrain::plan {

// A figure: its text, and the raw number (bytes, seconds, fraction, count) for JSON.
struct Cell {
  std::string text;
  std::optional<double> value;
};

struct ScenarioTable {
  std::string title;
  std::vector<std::string> columns;
  std::vector<std::vector<Cell>> rows;
};

struct ScenarioReport {
  std::string name;
  std::string title;
  std::vector<std::string> setup;  // what is being sized, on what
  std::vector<ScenarioTable> tables;
  std::vector<std::string> findings;
};

struct ScenarioInfo {
  std::string_view name;
  std::string_view title;
  ScenarioReport (*run)();
};

// The scenarios, in the order of the issue: size-70b, stalled-scaleout, 3d-placement,
// gpipe-vs-1f1b, ddp-vs-fsdp.
const std::vector<ScenarioInfo>& scenarios();
// Runs scenario `name`; throws Error naming the known scenarios otherwise.
ScenarioReport run_scenario(std::string_view name);

std::string format_scenario(const ScenarioReport& report);
std::string format_scenario_list();
nlohmann::json scenario_json(const ScenarioReport& report);

}  // namespace dtrain::plan
