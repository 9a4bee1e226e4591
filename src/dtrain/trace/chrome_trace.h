// Chrome trace event JSON (loads in Perfetto and chrome://tracing) from a Timeline: one
// process, and per rank four tracks, compute, communication, the communication thread's and
// context parallelism's, so waiting on a receive shows beside the work it delays, DP syncs beside
// what hides them, and the CP ring's hops beside the attention they feed.
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

// Track ids: rank r's compute spans (and the step's other phases) go on tid 4r, its compute
// thread's sends, receives and collectives on 4r+1, its communication thread's collectives on
// 4r+2 (they overlap the other two), its CP attention exchanges (ring hops, K/V gathers and
// dK/dV reduce-scatters, Ulysses all-to-alls) on 4r+3: a ring hop is in flight while the block
// before it is computed, so it would overlap the TP collectives on the communication track.
inline constexpr int kTracksPerRank = 4;
constexpr int compute_track(int rank) {
  return kTracksPerRank * rank;
}
constexpr int communication_track(int rank) {
  return kTracksPerRank * rank + 1;
}
constexpr int async_track(int rank) {
  return kTracksPerRank * rank + 2;
}
constexpr int context_parallel_track(int rank) {
  return kTracksPerRank * rank + 3;
}

// {"traceEvents": [...], "displayTimeUnit": "ms"}: a complete ("X") event per span with
// args {microbatch, chunk, kind} (and bytes, where the span measured them), and metadata events
// naming the process and each track.
nlohmann::json chrome_trace(const Timeline& timeline, const ChromeTraceOptions& options = {});

// Writes chrome_trace(timeline) to `path`; throws dtrain::Error naming the path if it cannot.
void write_chrome_trace(const Timeline& timeline, const std::string& path,
                        const ChromeTraceOptions& options = {});

}  // namespace dtrain::trace
