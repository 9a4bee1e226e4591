// Chrome trace event JSON (loads in Perfetto and chrome://tracing) from a Timeline: one
// process, and per rank three tracks, compute, communication and the communication thread's, so
// waiting on a receive shows beside the work it delays and DP syncs beside what hides them.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "dtrain/trace/timeline.h"

namespace dtrain::trace {

struct ChromeTraceOptions {
  double us_per_time_unit = 1;  // trace timestamps are microseconds; scales simulated units
  int pid = 0;
  std::string process_name = "dtrain";
};

// Track ids: rank r's compute spans (and the step's other phases) go on tid 3r, its compute
// thread's sends, receives and collectives on 3r+1, its communication thread's collectives on
// 3r+2 (they overlap the other two).
constexpr int compute_track(int rank) {
  return 3 * rank;
}
constexpr int communication_track(int rank) {
  return 3 * rank + 1;
}
constexpr int async_track(int rank) {
  return 3 * rank + 2;
}

// {"traceEvents": [...], "displayTimeUnit": "ms"}: a complete ("X") event per span with
// args {microbatch, chunk, kind}, and metadata events naming the process and each track.
nlohmann::json chrome_trace(const Timeline& timeline, const ChromeTraceOptions& options = {});

// Writes chrome_trace(timeline) to `path`; throws dtrain::Error naming the path if it cannot.
void write_chrome_trace(const Timeline& timeline, const std::string& path,
                        const ChromeTraceOptions& options = {});

}  // namespace dtrain::trace
