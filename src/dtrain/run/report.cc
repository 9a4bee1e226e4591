// print_summary / summary_to_json.
#include "dtrain/run/report.h"

#include <algorithm>
#include <charconv>
#include <csignal>

#include <cstdio>
#include <string>
#include <thread>

#include "dtrain/core/units.h"
#include "dtrain/data/data.h"
#include "dtrain/report/text_table.h"

namespace dtrain::train {
std::string signal_name(int signal_number) {
  if (signal_number == SIGINT) return "SIGINT";
  if (signal_number == SIGTERM) return "SIGTERM";
  if (signal_number == SIGUSR1) return "SIGUSR1";
  return "signal " + std::to_string(signal_number);
}

namespace {

// The layout report's clock with the measured step: the median step time printed above.
std::optional<ClockReport> measured_clock(const TrainSummary& s) {
  if (!s.layout || !s.layout->clock) return std::nullopt;
  ClockReport clock = *s.layout->clock;
  clock.measured.step_s = s.median_ms_per_step * 1e-3;
  clock.other_load_cores = s.other_load_cores;
  clock.other_load_window_s = s.other_load_window_s;
  clock.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return clock;
}

// The float the run trains with, as the shortest decimal that reads back as that float (the
// number the user wrote, 0.003, rather than the double nearest the float, 0.003000000026).
double as_decimal(float x) {
  char text[32];
  const std::to_chars_result r = std::to_chars(text, text + sizeof text, x);
  double d = x;
  std::from_chars(text, r.ptr, d);
  return d;
}

// The engine as fields (its layout, as the layout report holds it), with the one-line
// description the table prints under "text".
nlohmann::json engine_to_json(const TrainSummary& s) {
  nlohmann::json j = {{"text", s.engine}};
  if (!s.layout) return j;
  const LayoutReport& l = *s.layout;
  j["backend"] = l.backend;
  j["ranks"] = l.dp * l.cp * l.tp * l.pp;
  j["dp"] = l.dp;
  j["cp"] = l.cp;
  j["tp"] = l.tp;
  j["pp"] = l.pp;
  j["ep"] = l.ep;
  j["zero"] = l.zero_stage;
  j["cp_algo"] = l.cp > 1 ? nlohmann::json(l.cp_algorithm) : nlohmann::json(nullptr);
  j["sequence_parallel"] = l.sequence_parallel;
  j["schedule"] = l.pp > 1 ? nlohmann::json(l.schedule) : nlohmann::json(nullptr);
  j["chunks"] = l.chunks;
  j["microbatches"] = l.microbatches;
  j["micro_batch"] = l.micro_batch;
  j["recompute"] = name(l.recompute);
  j["precision"] = s.config.run.settings.precision;
  return j;
}

}  // namespace

void print_summary(std::ostream& out, const TrainSummary& s) {
  const TrainerConfig& c = s.config;
  out << "dtrain train: " << c.model_name << " model (" << model::describe(c.model) << ", "
      << grouped(static_cast<double>(s.param_count)) << " parameters) on " << s.engine << "\n";
  out << "  data " << s.data_source << ": " << grouped(static_cast<double>(s.train_tokens))
      << " training + " << grouped(static_cast<double>(s.val_tokens)) << " validation tokens"
      << (c.model.vocab == data::kByteVocab ? " (bytes)" : "") << "\n";
  out << "  " << c.steps << " steps of batch " << c.batch << " x seq " << c.seq << " = "
      << s.tokens_per_step << " tokens; lr " << c.schedule.lr << " (warmup "
      << c.schedule.warmup_steps << ", cosine to " << c.schedule.min_lr << ")\n";
  if (s.first_step > 0) {
    out << "  resumed at step " << s.first_step << " from " << c.checkpoint.resume << "\n";
  }
  if (s.stop_signal != 0) {
    out << "  stopped by " << signal_name(s.stop_signal) << " after step " << s.last_step << " of "
        << c.steps << "\n";
  }
  if (!s.last_checkpoint.empty()) out << "  checkpoint written: " << s.last_checkpoint << "\n";
  for (const std::string& note : c.notes) out << "  note: " << note << "\n";
  out << "\n";

  out << "  loss           train    validation\n";
  out << "  at start   " << right_aligned(fixed(s.first_train_loss, 4), 9)
      << right_aligned(fixed(s.first_val_loss, 4), 14) << "\n";
  out << "  at end     " << right_aligned(fixed(s.final_train_loss, 4), 9)
      << right_aligned(fixed(s.final_val_loss, 4), 14) << "   (train: mean of the last 10 steps "
      << fixed(s.final_train_loss_avg, 4) << ")\n";
  out << "  ln V       " << right_aligned(fixed(s.ln_vocab, 4), 9)
      << "                (the loss of a uniform guess over V = " << c.model.vocab << ")\n\n";

  out << "  speed      " << grouped(s.tokens_per_s) << " tokens/s, " << fixed(s.ms_per_step, 3)
      << " ms/step (median " << fixed(s.median_ms_per_step, 3) << "; forward "
      << fixed(s.forward_ms, 3) << ", backward " << fixed(s.backward_ms, 3) << ", optimizer "
      << fixed(s.optimizer_ms, 3) << "), " << fixed(s.train_seconds, 2) << " s of steps\n\n";

  out << "  memory (this rank)   current          peak\n";
  for (const MemoryRow& m : s.memory) {
    out << "  " << left_aligned(std::string(memory_tag_name(m.tag)), 16)
        << right_aligned(format_bytes(static_cast<double>(m.current_bytes)), 12)
        << right_aligned(format_bytes(static_cast<double>(m.peak_bytes)), 14) << "\n";
  }
  out << "  " << left_aligned("total (peak)", 16) << right_aligned("", 12)
      << right_aligned(format_bytes(static_cast<double>(s.peak_total_bytes)), 14) << "   (plan/ "
      << format_bytes(s.planned_peak_total_bytes)
      << ": model states, activations, ZeRO-2's bucket and ZeRO-3's gathered units; the "
         "figure --max-rank-memory is checked against)\n";
  out << "  activations planned by plan/ (micro-batches in flight x blocks, head and stage "
         "boundary, + workspace): "
      << format_bytes(s.planned_activation_bytes) << "; recompute " << name(c.recompute) << "\n";
  if (!s.moe_steps.empty()) print_moe_report(out, c.model.moe, s.moe_steps);
  if (s.layout) print_layout_report(out, *s.layout);
  if (const std::optional<ClockReport> clock = measured_clock(s)) {
    print_clock_report(out, *clock);
  } else {
    out << "Clock: " << kClockHint << "\n";
  }
}

nlohmann::json summary_to_json(const TrainSummary& s) {
  const TrainerConfig& c = s.config;
  nlohmann::json j;
  j["engine"] = engine_to_json(s);
  j["model"] = {{"name", c.model_name},       {"vocab", c.model.vocab},
                {"context", c.model.context}, {"layers", c.model.layers},
                {"heads", c.model.heads},     {"channels", c.model.channels},
                {"params", s.param_count}};
  j["data"] = {
      {"source", s.data_source}, {"train_tokens", s.train_tokens}, {"val_tokens", s.val_tokens}};
  j["run"] = {{"steps", c.steps},
              {"batch", c.batch},
              {"seq", c.seq},
              {"tokens_per_step", s.tokens_per_step},
              {"lr", as_decimal(c.schedule.lr)},
              {"min_lr", as_decimal(c.schedule.min_lr)},
              {"warmup", c.schedule.warmup_steps},
              {"eval_every", c.eval_every},
              {"eval_batches", c.eval_batches},
              {"recompute", name(c.recompute)}};
  j["loss"] = {{"first_train", s.first_train_loss},
               {"final_train", s.final_train_loss},
               {"final_train_avg10", s.final_train_loss_avg},
               {"first_val", s.first_val_loss},
               {"final_val", s.final_val_loss},
               {"ln_vocab", s.ln_vocab}};
  // One object per step, as val_losses: the step counts the updates done after it.
  nlohmann::json losses = nlohmann::json::array();
  for (size_t i = 0; i < s.train_losses.size(); ++i) {
    losses.push_back(
        {{"step", s.first_step + static_cast<int64_t>(i) + 1}, {"loss", s.train_losses[i]}});
  }
  j["train_losses"] = losses;
  j["run_id"] = c.run.id;
  j["last_step"] = s.last_step;
  j["stopped_by"] = s.stop_signal != 0 ? nlohmann::json(signal_name(s.stop_signal)) : nullptr;
  j["notes"] = c.notes;
  j["warnings"] = c.warnings;  // printed on stderr at the start; here for tools
  j["checkpoint"] = {{"first_step", s.first_step},
                     {"resumed_from", c.checkpoint.resume},
                     {"last_saved", s.last_checkpoint}};
  nlohmann::json evals = nlohmann::json::array();
  for (const EvalRecord& e : s.evals) evals.push_back({{"step", e.step}, {"val_loss", e.val_loss}});
  j["val_losses"] = evals;
  j["speed"] = {{"tokens_per_s", s.tokens_per_s},
                {"ms_per_step", s.ms_per_step},
                {"median_ms_per_step", s.median_ms_per_step},
                {"forward_ms", s.forward_ms},
                {"backward_ms", s.backward_ms},
                {"optimizer_ms", s.optimizer_ms},
                {"train_seconds", s.train_seconds}};
  nlohmann::json mem = nlohmann::json::object();
  for (const MemoryRow& m : s.memory) {
    mem[std::string(memory_tag_name(m.tag))] = {{"current_bytes", m.current_bytes},
                                                {"peak_bytes", m.peak_bytes}};
  }
  mem["peak_total_bytes"] = s.peak_total_bytes;
  mem["planned_activation_bytes"] = s.planned_activation_bytes;
  mem["planned_peak_total_bytes"] = s.planned_peak_total_bytes;
  j["memory"] = mem;
  j["moe"] =
      s.moe_steps.empty() ? nlohmann::json(nullptr) : moe_report_to_json(c.model.moe, s.moe_steps);
  if (s.layout) j["layout"] = layout_report_to_json(*s.layout);
  const std::optional<ClockReport> clock = measured_clock(s);
  j["clock"] = clock ? clock_to_json(*clock) : nlohmann::json(nullptr);
  return j;
}

}  // namespace dtrain::train
