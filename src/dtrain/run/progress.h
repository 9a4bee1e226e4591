// Live progress of a training run on a terminal (one redrawn line: step, bar, loss, tokens/s,
// ETA) or, when the stream is not a terminal, a plain line every k steps.
#pragma once

#include <cstdint>
#include <cstdio>

#include "dtrain/core/timer.h"
#include "dtrain/run/trainer.h"

namespace dtrain::train {

bool is_terminal(std::FILE* stream);

class ProgressPrinter final : public TrainObserver {
 public:
  // interactive: redraw one line in place; otherwise print every `line_every` steps
  // (0: about ten lines per run).
  ProgressPrinter(std::FILE* out, bool interactive, int64_t line_every = 0);

  void on_start(const TrainerConfig& config, const StepEngine& engine) override;
  void on_step(const StepRecord& record) override;
  void on_eval(const EvalRecord& record) override;
  void on_finish(const TrainSummary& summary) override;

 private:
  void draw(const StepRecord& r, bool final_draw);

  std::FILE* out_;
  bool interactive_;
  int64_t line_every_;
  int64_t steps_ = 0, tokens_per_step_ = 0;
  double step_seconds_ = 0;  // sum of step times so far
  int64_t steps_run_ = 0;    // steps seen by this printer (not those before a --resume)
  double last_draw_us_ = 0;
  float last_val_ = -1;
  bool line_open_ = false;  // an interactive line is on screen without a newline
  Stopwatch wall_;
};

}  // namespace dtrain::train
