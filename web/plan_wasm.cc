// The planner's WebAssembly entry: `dtrain plan`'s flags as JSON in, its --json report out
// (plan/plan_request.h), for the page in this folder; and a layout's pipeline timeline, the SVG
// `dtrain pipeline --svg` writes. Built by web/CMakeLists.txt with em++.
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>

#include <emscripten/emscripten.h>
#include <nlohmann/json.hpp>

#include "dtrain/core/check.h"
#include "dtrain/cost/model_presets.h"
#include "dtrain/cost/pipeline_model.h"
#include "dtrain/parallel/pipeline_checker.h"
#include "dtrain/plan/plan_request.h"
#include "dtrain/schedule/pipeline_schedule.h"
#include "dtrain/trace/timeline_svg.h"

namespace {

// The text handed back stays alive until the next call (the page copies it at once).
std::string answer;

// "12.5%", as `dtrain pipeline` writes a share in its timeline's title.
std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * fraction);
  return text;
}

}  // namespace

extern "C" {

// The report `dtrain plan --json` prints for these flags (less "build"), or {"error": "..."}.
EMSCRIPTEN_KEEPALIVE const char* plan_json(const char* request) {
  answer = dtrain::plan::plan_request(request);
  return answer.c_str();
}

// The timeline `dtrain pipeline --stages P --microbatches M --schedule S [--vp v] --svg FILE`
// writes (unit forward, backward and weight times, eager sends: the command's defaults), or
// "error: ..." for a schedule it refuses.
EMSCRIPTEN_KEEPALIVE const char* plan_pipeline_svg(const char* schedule, int stages,
                                                   int microbatches, int chunks) {
  try {
    using dtrain::plan::ScheduleKind;
    const ScheduleKind kind = dtrain::plan::parse_schedule(schedule);
    const dtrain::plan::PipelineSchedule s =
        dtrain::plan::make_schedule(kind, stages, microbatches, chunks);
    const dtrain::parallel::ScheduleReport report = dtrain::parallel::simulate_schedule(s, {});
    dtrain::trace::Timeline timeline = dtrain::parallel::to_timeline(s, report);
    timeline.title =
        dtrain::str(dtrain::plan::name(kind), " schedule: P = ", stages, ", M = ", microbatches,
                    chunks > 1 ? dtrain::str(", v = ", chunks) : "", "; bubble ",
                    percent(report.bubble_fraction_of_total), " of the makespan");
    answer = dtrain::trace::render_timeline_svg(timeline);
  } catch (const std::exception& e) {
    answer = dtrain::str("error: ", e.what());
  }
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
