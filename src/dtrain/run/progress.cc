// ProgressPrinter: formatting of the progress line.
#include "dtrain/run/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace dtrain::train {
namespace {

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buf;
}

}  // namespace

bool is_terminal(std::FILE* stream) {
  return isatty(fileno(stream)) != 0;
}

ProgressPrinter::ProgressPrinter(std::FILE* out, bool interactive, int64_t line_every)
    : out_(out), interactive_(interactive), line_every_(line_every) {}

void ProgressPrinter::on_start(const TrainerConfig& config, const StepEngine& engine) {
  steps_ = config.steps;
  tokens_per_step_ = config.batch * config.seq;
  if (line_every_ <= 0) line_every_ = std::max<int64_t>(1, config.steps / 10);
  std::fprintf(out_,
               "training %s model (%s, %lld params) on %s: %lld steps of %lld x %lld tokens\n",
               config.model_name.c_str(), model::describe(config.model).c_str(),
               static_cast<long long>(engine.param_count()), engine.describe().c_str(),
               static_cast<long long>(config.steps), static_cast<long long>(config.batch),
               static_cast<long long>(config.seq));
  for (const std::string& note : config.notes) std::fprintf(out_, "note: %s\n", note.c_str());
  for (const std::string& w : config.warnings) std::fprintf(out_, "warning: %s\n", w.c_str());
  std::fflush(out_);
  wall_.restart();
}

void ProgressPrinter::draw(const StepRecord& r, bool final_draw) {
  // Only the steps this process ran count: after --resume, r.step includes the checkpoint's.
  const double tokens_per_s =
      static_cast<double>(tokens_per_step_ * steps_run_) / std::max(step_seconds_, 1e-9);
  const double eta = wall_.elapsed_s() / static_cast<double>(std::max<int64_t>(steps_run_, 1)) *
                     static_cast<double>(steps_ - r.step);
  // Rounded to 4 decimals like every other loss on screen (the eval line, the summary):
  // 2.51098 reads "2.5110" everywhere, never a truncated "2.5109".
  std::string val;
  if (last_val_ >= 0) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), " val %.4f", static_cast<double>(last_val_));
    val = buf;
  }
  if (!r.stats.expert_tokens.empty()) {  // an MoE model: its load-balancing loss beside the CE
    char buf[32];
    std::snprintf(buf, sizeof(buf), " aux %.4f", r.stats.aux_loss);
    val = buf + val;
  }
  if (interactive_) {
    constexpr int kWidth = 24;
    const auto filled = static_cast<int>(kWidth * r.step / steps_);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r\033[Kstep %lld/%lld [%s] loss %.4f%s | %.0f tok/s | ETA %s",
                 static_cast<long long>(r.step), static_cast<long long>(steps_), bar.c_str(),
                 r.stats.loss, val.c_str(), tokens_per_s, format_duration(eta).c_str());
    line_open_ = !final_draw;
    if (final_draw) std::fputc('\n', out_);
  } else {
    std::fprintf(out_, "step %lld/%lld loss %.4f lr %.2e grad-norm %.3f%s | %.0f tok/s | ETA %s\n",
                 static_cast<long long>(r.step), static_cast<long long>(steps_), r.stats.loss, r.lr,
                 r.stats.grad_norm, val.c_str(), tokens_per_s, format_duration(eta).c_str());
  }
  std::fflush(out_);
}

void ProgressPrinter::on_step(const StepRecord& r) {
  step_seconds_ += r.step_ms * 1e-3;
  ++steps_run_;
  const bool last = r.step == steps_;
  if (interactive_) {
    const double now = now_us();
    if (last || now - last_draw_us_ > 100e3) {  // at most ten redraws a second
      last_draw_us_ = now;
      draw(r, last);
    }
  } else if (last || r.step % line_every_ == 0) {
    draw(r, last);
  }
}

void ProgressPrinter::on_eval(const EvalRecord& r) {
  last_val_ = r.val_loss;
  if (line_open_) {
    std::fputc('\n', out_);
    line_open_ = false;
  }
  std::fprintf(out_, "step %lld/%lld: validation loss %.4f\n", static_cast<long long>(r.step),
               static_cast<long long>(steps_), r.val_loss);
  std::fflush(out_);
}

void ProgressPrinter::on_finish(const TrainSummary& /*summary*/) {
  if (line_open_) std::fputc('\n', out_);
  line_open_ = false;
  std::fflush(out_);
}

}  // namespace dtrain::train
