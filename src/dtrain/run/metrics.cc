// The metrics file: the writer's three kinds of line and the reader of numeric series.
#include "dtrain/run/metrics.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "dtrain/checkpoint/run_record.h"
#include "dtrain/core/check.h"

namespace dtrain::train {

MetricsWriter::MetricsWriter(const std::string& path, const TrainerConfig& config, bool append)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
  DTRAIN_CHECK(out_.good(), "--metrics ", path, ": cannot be written (", std::strerror(errno), ")");
  const nlohmann::json line = {{"type", "run"},
                               {"run", checkpoint::run_record_to_json(config.run)},
                               {"model",
                                {{"name", config.model_name},
                                 {"vocab", config.model.vocab},
                                 {"context", config.model.context},
                                 {"layers", config.model.layers},
                                 {"heads", config.model.heads},
                                 {"channels", config.model.channels}}},
                               {"steps", config.steps},
                               {"batch", config.batch},
                               {"seq", config.seq}};
  write(line.dump());
}

void MetricsWriter::step(const StepRecord& r, int64_t tokens_per_step, int64_t memory_peak_bytes) {
  const nlohmann::json line = {
      {"type", "step"},
      {"step", r.step},
      {"loss", r.stats.loss},
      {"lr", r.lr},
      {"grad_norm", r.stats.grad_norm},
      {"step_ms", r.step_ms},
      {"tokens_per_s", static_cast<double>(tokens_per_step) / (r.step_ms * 1e-3)},
      {"memory_peak_bytes", memory_peak_bytes},
      {"page_faults", r.page_faults}};
  write(line.dump());
}

void MetricsWriter::eval(const EvalRecord& r) {
  write(nlohmann::json{{"type", "eval"}, {"step", r.step}, {"val_loss", r.val_loss}}.dump());
}

// A failed write (a full disk) costs the metrics, not the run: it is said once on stderr and
// the lines after it are dropped, so the training and its checkpoints go on.
void MetricsWriter::write(const std::string& line) {
  if (failed_) return;
  errno = 0;
  out_ << line << '\n';
  out_.flush();
  if (out_.good()) return;
  failed_ = true;
  std::fprintf(stderr,
               "warning: --metrics %s: cannot be written (%s); training continues without "
               "metrics from here on\n",
               path_.c_str(), errno != 0 ? std::strerror(errno) : "write failed");
}

std::vector<MetricsSeries> read_metrics_series(const std::string& path,
                                               std::span<const std::string> names) {
  std::ifstream in(path);
  DTRAIN_CHECK(in.good(), path, ": cannot be read");
  std::vector<MetricsSeries> series;
  for (const std::string& n : names) series.push_back({n, {}, {}});
  std::set<std::string> fields;
  std::string text;
  for (int64_t line = 1; std::getline(in, text); ++line) {
    if (text.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw Error(str(path, ":", line, ": not a JSON object (", e.what(), ")"));
    }
    DTRAIN_CHECK(j.is_object(), path, ":", line, ": not a JSON object");
    const std::string type = j.value("type", "");
    if (type != "step" && type != "eval") continue;
    DTRAIN_CHECK(j.contains("step") && j["step"].is_number(), path, ":", line, ": a ", type,
                 " line without a numeric \"step\"");
    for (const auto& [key, value] : j.items()) {
      if (value.is_number() && key != "step") fields.insert(key);
    }
    for (MetricsSeries& s : series) {
      if (!j.contains(s.name)) continue;
      DTRAIN_CHECK(j[s.name].is_number(), path, ":", line, ": \"", s.name, "\" is not a number");
      s.steps.push_back(j["step"].get<double>());
      s.values.push_back(j[s.name].get<double>());
    }
  }
  for (const MetricsSeries& s : series) {
    std::string known;
    for (const std::string& f : fields) known += (known.empty() ? "" : ", ") + f;
    DTRAIN_CHECK(!s.steps.empty(), path, ": no step or eval line has \"", s.name,
                 "\" (the numeric fields are: ", known.empty() ? "none" : known, ")");
  }
  return series;
}

int64_t metrics_tokens_per_step(const std::string& path) {
  std::ifstream in(path);
  DTRAIN_CHECK(in.good(), path, ": cannot be read");
  std::string text;
  for (int64_t line = 1; std::getline(in, text); ++line) {
    if (text.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.value("type", "") != "run") continue;
    DTRAIN_CHECK(j.contains("batch") && j["batch"].is_number_integer() && j.contains("seq") &&
                     j["seq"].is_number_integer(),
                 path, ":", line, ": a run line without integer \"batch\" and \"seq\"");
    const int64_t tokens = j["batch"].get<int64_t>() * j["seq"].get<int64_t>();
    DTRAIN_CHECK(tokens > 0, path, ":", line, ": batch x seq must be positive, got ", tokens);
    return tokens;
  }
  throw Error(str(path, ": no run line ({\"type\": \"run\"}) to read the tokens per step from"));
}

}  // namespace dtrain::train
