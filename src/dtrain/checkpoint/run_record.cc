// RunRecord: JSON in and out, and the differences a --resume is checked for.
#include "dtrain/checkpoint/run_record.h"

#include <cstdio>
#include <random>

#include "dtrain/core/check.h"

namespace dtrain::checkpoint {
using nlohmann::json;

std::string new_run_id() {
  std::random_device device;
  std::string id;
  for (int i = 0; i < 4; ++i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(device()));
    id += buf;
  }
  return id;
}

json run_record_to_json(const RunRecord& run) {
  const RunSettings& s = run.settings;
  return {{"id", run.id},
          {"version", run.version},
          {"settings",
           {{"lr", s.lr},
            {"min_lr", s.min_lr},
            {"warmup", s.warmup},
            {"schedule_steps", s.schedule_steps},
            {"beta1", s.beta1},
            {"beta2", s.beta2},
            {"eps", s.eps},
            {"weight_decay", s.weight_decay},
            {"grad_clip", s.grad_clip},
            {"init_seed", s.init_seed},
            {"data", {{"name", s.data_name}, {"tokens", s.data_tokens}, {"crc32", s.data_crc32}}},
            {"precision", s.precision}}}};
}

namespace {

template <typename T>
T get(const json& obj, const char* key, std::string_view where, std::string_view source) {
  DTRAIN_CHECK(obj.is_object() && obj.contains(key), source, ": ", where, " has no field \"", key,
               "\"");
  const json& v = obj[key];
  if constexpr (std::is_same_v<T, std::string>) {
    DTRAIN_CHECK(v.is_string(), source, ": ", where, ".", key, " is not a string");
  } else if constexpr (std::is_integral_v<T>) {
    DTRAIN_CHECK(v.is_number_integer(), source, ": ", where, ".", key, " is not an integer");
  } else {
    DTRAIN_CHECK(v.is_number(), source, ": ", where, ".", key, " is not a number");
  }
  return v.get<T>();
}

void differ(std::vector<std::string>& out, const char* flag, double a, double b) {
  if (a != b) out.push_back(str(flag, " ", a, " -> ", b));
}

}  // namespace

RunRecord run_record_from_json(const json& j, std::string_view source) {
  RunRecord r;
  r.id = get<std::string>(j, "id", "run", source);
  r.version = get<std::string>(j, "version", "run", source);
  DTRAIN_CHECK(j.contains("settings"), source, ": run has no field \"settings\"");
  const json& s = j["settings"];
  RunSettings& out = r.settings;
  out.lr = get<double>(s, "lr", "run.settings", source);
  out.min_lr = get<double>(s, "min_lr", "run.settings", source);
  out.warmup = get<int64_t>(s, "warmup", "run.settings", source);
  out.schedule_steps = get<int64_t>(s, "schedule_steps", "run.settings", source);
  out.beta1 = get<double>(s, "beta1", "run.settings", source);
  out.beta2 = get<double>(s, "beta2", "run.settings", source);
  out.eps = get<double>(s, "eps", "run.settings", source);
  out.weight_decay = get<double>(s, "weight_decay", "run.settings", source);
  out.grad_clip = get<double>(s, "grad_clip", "run.settings", source);
  out.init_seed = get<uint64_t>(s, "init_seed", "run.settings", source);
  DTRAIN_CHECK(s.contains("data"), source, ": run.settings has no field \"data\"");
  out.data_name = get<std::string>(s["data"], "name", "run.settings.data", source);
  out.data_tokens = get<int64_t>(s["data"], "tokens", "run.settings.data", source);
  out.data_crc32 = get<uint32_t>(s["data"], "crc32", "run.settings.data", source);
  out.precision = get<std::string>(s, "precision", "run.settings", source);
  return r;
}

std::vector<std::string> setting_differences(const RunSettings& a, const RunSettings& b) {
  std::vector<std::string> out;
  differ(out, "--lr", a.lr, b.lr);
  differ(out, "--min-lr", a.min_lr, b.min_lr);
  differ(out, "--warmup", static_cast<double>(a.warmup), static_cast<double>(b.warmup));
  differ(out, "--steps (the schedule's length)", static_cast<double>(a.schedule_steps),
         static_cast<double>(b.schedule_steps));
  differ(out, "--beta1", a.beta1, b.beta1);
  differ(out, "--beta2", a.beta2, b.beta2);
  differ(out, "AdamW eps", a.eps, b.eps);
  differ(out, "--weight-decay", a.weight_decay, b.weight_decay);
  differ(out, "--grad-clip", a.grad_clip, b.grad_clip);
  if (a.data_tokens != b.data_tokens || a.data_crc32 != b.data_crc32) {
    out.push_back(str("--data ", a.data_name, " (", a.data_tokens, " tokens) -> ", b.data_name,
                      " (", b.data_tokens, " tokens",
                      a.data_tokens == b.data_tokens ? ", other text" : "", ")"));
  }
  return out;
}

}  // namespace dtrain::checkpoint
