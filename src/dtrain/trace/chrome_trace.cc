// chrome_trace: metadata events first (process and track names, track order), then one complete
// event per span. Spans of kind `other` go on the compute track.
#include "dtrain/trace/chrome_trace.h"

#include "dtrain/core/check.h"
#include "dtrain/trace/write_file.h"

namespace dtrain::trace {
namespace {

nlohmann::json metadata(const char* what, int pid, int tid, const nlohmann::json& args) {
  return {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", args}};
}

}  // namespace

nlohmann::json chrome_trace(const Timeline& timeline, const ChromeTraceOptions& options) {
  DTRAIN_CHECK(options.us_per_time_unit > 0, "trace time scale must be > 0, got ",
               options.us_per_time_unit);
  nlohmann::json events = nlohmann::json::array();
  events.push_back(metadata("process_name", options.pid, 0, {{"name", options.process_name}}));
  for (size_t r = 0; r < timeline.rows.size(); ++r) {
    const int rank = static_cast<int>(r);
    const std::string& row = timeline.rows[r].name;
    events.push_back(
        metadata("thread_name", options.pid, compute_track(rank), {{"name", row + " compute"}}));
    events.push_back(
        metadata("thread_name", options.pid, communication_track(rank), {{"name", row + " comm"}}));
    events.push_back(metadata("thread_sort_index", options.pid, compute_track(rank),
                              {{"sort_index", compute_track(rank)}}));
    events.push_back(metadata("thread_sort_index", options.pid, communication_track(rank),
                              {{"sort_index", communication_track(rank)}}));
    events.push_back(
        metadata("thread_name", options.pid, async_track(rank), {{"name", row + " comm thread"}}));
    events.push_back(metadata("thread_sort_index", options.pid, async_track(rank),
                              {{"sort_index", async_track(rank)}}));
    events.push_back(metadata("thread_name", options.pid, context_parallel_track(rank),
                              {{"name", row + " cp"}}));
    events.push_back(metadata("thread_sort_index", options.pid, context_parallel_track(rank),
                              {{"sort_index", context_parallel_track(rank)}}));
  }
  for (size_t r = 0; r < timeline.rows.size(); ++r) {
    const int rank = static_cast<int>(r);
    for (const Span& s : timeline.rows[r].spans) {
      const int tid = s.kind == SpanKind::async_collective   ? async_track(rank)
                      : s.kind == SpanKind::context_parallel ? context_parallel_track(rank)
                      : is_communication(s.kind)             ? communication_track(rank)
                                                             : compute_track(rank);
      nlohmann::json args = {
          {"kind", name(s.kind)}, {"microbatch", s.microbatch}, {"chunk", s.chunk}};
      if (s.bytes >= 0) args["bytes"] = s.bytes;
      events.push_back({{"name", s.label},
                        {"cat", name(s.kind)},
                        {"ph", "X"},
                        {"ts", s.start * options.us_per_time_unit},
                        {"dur", (s.end - s.start) * options.us_per_time_unit},
                        {"pid", options.pid},
                        {"tid", tid},
                        {"args", args}});
    }
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

void write_chrome_trace(const Timeline& timeline, const std::string& path,
                        const ChromeTraceOptions& options) {
  write_file(path, chrome_trace(timeline, options).dump(1) + "\n");
}

}  // namespace dtrain::trace
