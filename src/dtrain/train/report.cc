// print_summary / summary_to_json.
#include "dtrain/train/report.h"

#include <cstdio>
#include <string>

#include "dtrain/core/units.h"

namespace dtrain::train {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// 1234567 -> "1,234,567" (built by appending: std::string::insert trips GCC 12's -Wrestrict)
std::string grouped(double v) {
  const std::string digits = fixed(v, 0);
  const size_t start = digits[0] == '-' ? 1 : 0;
  std::string out = digits.substr(0, start);
  for (size_t i = start; i < digits.size(); ++i) {
    if (i > start && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string lpad(const std::string& s, size_t width) {
  return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
}

}  // namespace

void print_summary(std::ostream& out, const TrainSummary& s) {
  const TrainerConfig& c = s.config;
  out << "dtrain train: " << c.model_name << " model (" << model::describe(c.model) << ", "
      << grouped(static_cast<double>(s.param_count)) << " parameters) on " << s.engine << "\n";
  out << "  data " << s.data_source << ": " << grouped(static_cast<double>(s.train_tokens))
      << " training + " << grouped(static_cast<double>(s.val_tokens))
      << " validation tokens (bytes)\n";
  out << "  " << c.steps << " steps of batch " << c.batch << " x seq " << c.seq << " = "
      << s.tokens_per_step << " tokens; lr " << c.schedule.lr << " (warmup "
      << c.schedule.warmup_steps << ", cosine to " << c.schedule.min_lr << ")\n\n";

  out << "  loss           train    validation\n";
  out << "  at start   " << lpad(fixed(s.first_train_loss, 4), 9)
      << lpad(fixed(s.first_val_loss, 4), 14) << "\n";
  out << "  at end     " << lpad(fixed(s.final_train_loss, 4), 9)
      << lpad(fixed(s.final_val_loss, 4), 14) << "   (train: mean of the last 10 steps "
      << fixed(s.final_train_loss_avg, 4) << ")\n";
  out << "  ln V       " << lpad(fixed(s.ln_vocab, 4), 9)
      << "                (the loss of a uniform guess over V = " << c.model.vocab << ")\n\n";

  out << "  speed      " << grouped(s.tokens_per_s) << " tokens/s, " << fixed(s.ms_per_step, 3)
      << " ms/step (median " << fixed(s.median_ms_per_step, 3) << "; forward "
      << fixed(s.forward_ms, 3) << ", backward " << fixed(s.backward_ms, 3) << ", optimizer "
      << fixed(s.optimizer_ms, 3) << "), " << fixed(s.train_seconds, 2) << " s of steps\n\n";

  out << "  memory (this rank)   current          peak\n";
  for (const MemoryRow& m : s.memory) {
    out << "  " << pad(std::string(memory_tag_name(m.tag)), 16)
        << lpad(format_bytes(static_cast<double>(m.current_bytes)), 12)
        << lpad(format_bytes(static_cast<double>(m.peak_bytes)), 14) << "\n";
  }
  out << "  " << pad("total (peak)", 16) << lpad("", 12)
      << lpad(format_bytes(static_cast<double>(s.peak_total_bytes)), 14) << "\n";
  out << "  activations planned by plan/ (L x per layer + head + workspace): "
      << format_bytes(s.planned_activation_bytes) << "\n";
}

nlohmann::json summary_to_json(const TrainSummary& s) {
  const TrainerConfig& c = s.config;
  nlohmann::json j;
  j["engine"] = s.engine;
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
              {"lr", c.schedule.lr},
              {"min_lr", c.schedule.min_lr},
              {"warmup", c.schedule.warmup_steps},
              {"eval_every", c.eval_every},
              {"eval_batches", c.eval_batches}};
  j["loss"] = {{"first_train", s.first_train_loss},
               {"final_train", s.final_train_loss},
               {"final_train_avg10", s.final_train_loss_avg},
               {"first_val", s.first_val_loss},
               {"final_val", s.final_val_loss},
               {"ln_vocab", s.ln_vocab}};
  j["train_losses"] = s.train_losses;
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
  j["memory"] = mem;
  return j;
}

}  // namespace dtrain::train
