// --metrics FILE.jsonl: one JSON object per line, flushed as it is written, so a run that dies
// keeps every line before it. The first line is the run ({"type": "run"}: the run record, the
// model, the batch shape); then {"type": "step"} after every step (step, loss, lr, grad_norm,
// step_ms, tokens_per_s, memory_peak_bytes) and {"type": "eval"} after every evaluation (step,
// val_loss). read_metrics_series reads any numeric field back as a series over the steps, for
// `dtrain plot`. A write that fails (a full disk) is warned about once on stderr and the run
// goes on without metrics: they must never cost a run its checkpoints.
#pragma once

#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "dtrain/run/trainer.h"

namespace dtrain::train {

class MetricsWriter {
 public:
  // Creates (or, when `append`, extends: a resumed run) `path` and writes the run line. Errors
  // name --metrics and the path.
  MetricsWriter(const std::string& path, const TrainerConfig& config, bool append);
  void step(const StepRecord& record, int64_t tokens_per_step, int64_t memory_peak_bytes);
  void eval(const EvalRecord& record);

 private:
  void write(const std::string& line);
  std::string path_;
  std::ofstream out_;
  bool failed_ = false;  // a write failed: warned once, nothing more is written
};

// A numeric field of the step or eval lines, as (step, value) points in file order.
struct MetricsSeries {
  std::string name;
  std::vector<double> steps, values;
};
// The series `names` of a metrics file (a name no line holds is an error naming it and the
// fields there are); errors name the file and the line.
std::vector<MetricsSeries> read_metrics_series(const std::string& path,
                                               std::span<const std::string> names);

// Tokens one step of the file's run consumes (its run line's batch x seq), for plots against
// tokens; errors name the file when it has no run line.
int64_t metrics_tokens_per_step(const std::string& path);

}  // namespace dtrain::train
