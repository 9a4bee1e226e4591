// pipeline_bubble, the interleaved warm-up, peak_inflight_microbatches and
// peak_weight_stash_microbatches: the closed forms of pipeline_model.h.
#include "dtrain/cost/pipeline_model.h"

#include <algorithm>

#include "dtrain/core/check.h"

namespace dtrain::plan {

std::string_view name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe:
      return "gpipe";
    case ScheduleKind::one_f_one_b:
      return "1f1b";
    case ScheduleKind::interleaved:
      return "interleaved";
    case ScheduleKind::zero_bubble_h1:
      return "zb-h1";
  }
  return "?";
}

ScheduleKind parse_schedule(std::string_view text) {
  std::string known;
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                         ScheduleKind::zero_bubble_h1}) {
    if (text == name(k)) return k;
    if (!known.empty()) known += ", ";
    known += name(k);
  }
  throw Error(str("--schedule \"", text, "\" is not one of ", known));
}

BubbleEstimate pipeline_bubble(ScheduleKind kind, int stages, int microbatches, int chunks,
                               StageTimes t) {
  DTRAIN_CHECK(stages >= 1, "pipeline stages must be >= 1, got ", stages);
  DTRAIN_CHECK(microbatches >= 1, "micro-batches must be >= 1, got ", microbatches);
  DTRAIN_CHECK(chunks >= 1, "model chunks per rank must be >= 1, got ", chunks);
  const double per_microbatch = t.forward + t.backward_input + t.backward_weight;
  BubbleEstimate e;
  e.ideal_time = microbatches * per_microbatch;
  const double p1 = stages - 1;
  switch (kind) {
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b:
      e.bubble_time = p1 * per_microbatch;
      break;
    case ScheduleKind::interleaved:
      e.bubble_time = p1 * per_microbatch / chunks;
      break;
    case ScheduleKind::zero_bubble_h1:
      e.bubble_time = p1 * std::max(0.0, t.forward + t.backward_input - t.backward_weight);
      break;
  }
  e.total_time = e.ideal_time + e.bubble_time;
  e.fraction_of_total = e.bubble_time / e.total_time;
  e.fraction_of_ideal = e.bubble_time / e.ideal_time;
  return e;
}

int interleaved_group_size(int stages, int microbatches) {
  DTRAIN_CHECK(stages >= 1 && microbatches >= 1,
               "interleaved groups need P >= 1 and M >= 1, got P ", stages, ", M ", microbatches);
  const int groups = std::max(1, microbatches / stages);
  return (microbatches + groups - 1) / groups;
}

int interleaved_warmup_forwards(int stages, int microbatches, int chunks, int stage) {
  DTRAIN_CHECK(stage >= 0 && stage < stages, "stage ", stage, " outside 0..", stages - 1);
  DTRAIN_CHECK(chunks >= 1, "model chunks per rank must be >= 1, got ", chunks);
  const int group = microbatches < stages ? stages : interleaved_group_size(stages, microbatches);
  return std::min((stages - stage - 1) * 2 + (chunks - 1) * group, chunks * microbatches);
}

double peak_inflight_microbatches(ScheduleKind kind, int stages, int microbatches, int chunks,
                                  int stage) {
  DTRAIN_CHECK(stage >= 0 && stage < stages, "stage ", stage, " outside 0..", stages - 1);
  switch (kind) {
    case ScheduleKind::gpipe:
      return microbatches;
    case ScheduleKind::one_f_one_b:
    case ScheduleKind::zero_bubble_h1:
      return std::min(stages - stage, microbatches);
    case ScheduleKind::interleaved: {
      const int warmup = interleaved_warmup_forwards(stages, microbatches, chunks, stage);
      return static_cast<double>(std::min(warmup + 1, chunks * microbatches)) / chunks;
    }
  }
  return 0;
}

double peak_weight_stash_microbatches(ScheduleKind kind, int stages, int microbatches, int chunks,
                                      int stage) {
  if (kind == ScheduleKind::zero_bubble_h1) {
    DTRAIN_CHECK(stage >= 0 && stage < stages, "stage ", stage, " outside 0..", stages - 1);
    return std::min(stages, microbatches);
  }
  return peak_inflight_microbatches(kind, stages, microbatches, chunks, stage);
}

}  // namespace dtrain::plan
