// A run's identity and the settings that decide its numbers, recorded in every checkpoint
// manifest (and, the identity, in the --save directory's run.json), so that a directory belongs
// to one run and a --resume that would quietly change the run is caught.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrain::checkpoint {

// What a resumed run must share with the run that wrote the checkpoint for the continuation to
// be the same training run: the optimizer, the learning-rate schedule, the data, the numbers.
struct RunSettings {
  double lr = 0, min_lr = 0;
  int64_t warmup = 0, schedule_steps = 0;  // the schedule's warmup and its length (--steps)
  double beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0, grad_clip = 0;
  uint64_t init_seed = 0;
  std::string data_name;    // the --data file as given (or the default corpus)
  int64_t data_tokens = 0;  // training + validation tokens
  uint32_t data_crc32 = 0;  // CRC-32 of the tokens (int32, little-endian), train then val
  std::string precision = "fp32";
  bool operator==(const RunSettings&) const = default;
};

struct RunRecord {
  std::string id;       // 32 hex digits, new for every fresh run; a resumed run keeps its own
  std::string version;  // dtrain's version and commit that wrote it
  RunSettings settings;
};

// A fresh random run id (std::random_device).
std::string new_run_id();

nlohmann::json run_record_to_json(const RunRecord& run);
// Throws Error prefixed by `source` when a field is missing or of the wrong type.
RunRecord run_record_from_json(const nlohmann::json& j, std::string_view source);

// One line per setting that differs, as the user would write it: "--lr 0.003 -> 0.001".
// The data is compared by its tokens (count and CRC), not by the file's name. The layout and
// the precision may change on a resume (checkpoints reshard), and the init seed no longer
// matters once the weights are loaded: those are recorded, not compared.
std::vector<std::string> setting_differences(const RunSettings& checkpoint, const RunSettings& now);

}  // namespace dtrain::checkpoint
