// A timeline: per rank, the spans of work it did (forward, backward, sends, receives) with
// start and end times. The pipeline simulator and the pipeline executor both produce one, and
// every renderer (ASCII, SVG, Chrome trace) reads only this, so simulated and measured runs look
// the same.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::trace {

// What a span did. Compute kinds are drawn as boxes; communication kinds on a separate lane.
enum class SpanKind {
  forward,           // F
  backward,          // B+W fused: input and weight gradients in one pass
  backward_input,    // B: gradient with respect to the stage's input (zero-bubble split)
  backward_weight,   // W: gradient with respect to the weights
  send,              // posting a send until it completed
  recv,              // posting a receive until the data arrived (waiting shows here)
  collective,        // a collective the compute thread runs (TP's f and g, vocabulary reductions)
  async_collective,  // a collective the communication thread runs (DP buckets, ZeRO gathers)
  context_parallel,  // a CP attention exchange: a ring hop, the K/V gather, a Ulysses all-to-all
  other,             // anything else the engine measures (gradient norm, optimizer step, ...)
};

constexpr bool is_compute(SpanKind kind) {
  return kind == SpanKind::forward || kind == SpanKind::backward ||
         kind == SpanKind::backward_input || kind == SpanKind::backward_weight;
}

// The compute thread's communication: drawn on the rank's communication lane (the Chrome trace
// gives context_parallel a track of its own).
constexpr bool is_communication(SpanKind kind) {
  return kind == SpanKind::send || kind == SpanKind::recv || kind == SpanKind::collective ||
         kind == SpanKind::context_parallel;
}

// "forward", "backward", "backward_input", "backward_weight", "send", "recv", "collective",
// "async_collective", "context_parallel", "other".
constexpr std::string_view name(SpanKind kind) {
  switch (kind) {
    case SpanKind::forward:
      return "forward";
    case SpanKind::backward:
      return "backward";
    case SpanKind::backward_input:
      return "backward_input";
    case SpanKind::backward_weight:
      return "backward_weight";
    case SpanKind::send:
      return "send";
    case SpanKind::recv:
      return "recv";
    case SpanKind::collective:
      return "collective";
    case SpanKind::async_collective:
      return "async_collective";
    case SpanKind::context_parallel:
      return "context_parallel";
    case SpanKind::other:
      return "other";
  }
  return "?";
}

// One letter per kind, the letter the ASCII timeline draws: F, B (fused or input gradient), W.
constexpr char letter(SpanKind kind) {
  switch (kind) {
    case SpanKind::forward:
      return 'F';
    case SpanKind::backward:
      return 'B';
    case SpanKind::backward_input:
      return 'B';
    case SpanKind::backward_weight:
      return 'W';
    case SpanKind::send:
      return '>';
    case SpanKind::recv:
      return '<';
    case SpanKind::collective:
      return 'c';
    case SpanKind::async_collective:
      return 'a';
    case SpanKind::context_parallel:
      return 'p';
    case SpanKind::other:
      return 'o';
  }
  return '?';
}

struct Span {
  std::string label;  // short text drawn inside the box: "F3", "B3b", "recv act 3"
  SpanKind kind = SpanKind::other;
  int microbatch = -1;  // mb, or -1 when the span is not about one micro-batch
  int chunk = -1;       // model chunk on this rank (interleaving), or -1
  double start = 0;     // in Timeline::time_unit, from the step's start
  double end = 0;
  int64_t bytes = -1;  // bytes this rank sent in the span, when measured (CP exchanges); else -1
};

struct TimelineRow {
  std::string name;  // "rank 0"
  std::vector<Span> spans;
};

struct Timeline {
  std::string title;
  std::string time_unit = "units";  // "units" for simulated unit times, "us" when measured
  std::vector<TimelineRow> rows;    // one per rank, top to bottom

  double end_time() const {
    double end = 0;
    for (const TimelineRow& row : rows) {
      for (const Span& s : row.spans) end = s.end > end ? s.end : end;
    }
    return end;
  }
};

}  // namespace dtrain::trace
