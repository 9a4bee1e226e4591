// `dtrain scenario NAME` and `dtrain scenario list`: runs one of plan::scenarios() and prints its
// tables and findings, or with --json the same figures as JSON.
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "build_info.h"
#include "command_registry.h"
#include "dtrain/plan/scenarios.h"

namespace dtrain::cli {
namespace {

struct ScenarioFlags {
  std::string name;
  bool json = false;
};

void run_scenario(const ScenarioFlags& f) {
  if (f.name == "list") {
    if (f.json) {
      nlohmann::json list = nlohmann::json::array();
      for (const plan::ScenarioInfo& s : plan::scenarios()) {
        list.push_back({{"name", s.name}, {"title", s.title}});
      }
      std::cout << list.dump(2) << "\n";
    } else {
      std::cout << plan::format_scenario_list();
    }
    return;
  }
  const plan::ScenarioReport report = plan::run_scenario(f.name);
  if (f.json) {
    std::cout << with_build(plan::scenario_json(report)).dump(2) << "\n";
  } else {
    std::cout << plan::format_scenario(report);
  }
}

void add_scenario(CLI::App& parent) {
  auto flags = std::make_shared<ScenarioFlags>();
  CLI::App* app = parent.add_subcommand(
      "scenario",
      "Worked planning scenarios: size-70b, stalled-scaleout, 3d-placement, gpipe-vs-1f1b, "
      "ddp-vs-fsdp (`dtrain scenario list` describes them)");
  app->add_option("name", flags->name, "Scenario to run, or `list`")->required();
  app->add_flag("--json", flags->json, "Print the same figures as JSON");
  app->callback([flags] { run_scenario(*flags); });
}

const CommandRegistration kRegistration("", add_scenario);

}  // namespace
}  // namespace dtrain::cli
