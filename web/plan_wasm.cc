// The planner's WebAssembly entry: `dtrain plan`'s flags as JSON in, its --json report out
// (plan/plan_request.h), for the page in this folder. Built by web/CMakeLists.txt with em++.
#include <string>

#include <emscripten/emscripten.h>
#include <nlohmann/json.hpp>

#include "dtrain/cost/model_presets.h"
#include "dtrain/plan/plan_request.h"

namespace {

// The text handed back stays alive until the next call (the page copies it at once).
std::string answer;

}  // namespace

extern "C" {

// The report `dtrain plan --json` prints for these flags (less "build"), or {"error": "..."}.
EMSCRIPTEN_KEEPALIVE const char* plan_json(const char* request) {
  answer = dtrain::plan::plan_request(request);
  return answer.c_str();
}

// The model presets' names, for the page's list: ["gpt3-175b", ...].
EMSCRIPTEN_KEEPALIVE const char* plan_model_presets() {
  nlohmann::json names = nlohmann::json::array();
  for (const dtrain::plan::ModelShape& m : dtrain::plan::model_presets()) names.push_back(m.name);
  answer = names.dump();
  return answer.c_str();
}

}  // extern "C"
