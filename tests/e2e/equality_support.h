// What the end-to-end equality tests share: the random batches every engine trains on, and
// the comparison of a TP rank's parameter shards with the matching slices of the serial run.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "dtrain/core/rng.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/train/serial_engine.h"

namespace dtrain::train::e2e {

// `steps` batches of uniform random tokens (seed 7), the same for every engine compared.
inline std::vector<Batch> random_batches(const SerialEngineConfig& c, int steps) {
  Rng rng(7);
  std::vector<Batch> out(static_cast<size_t>(steps));
  for (Batch& b : out) {
    b.resize(c.batch, c.seq);
    for (int32_t& t : b.inputs) t = static_cast<int32_t>(rng.uniform_int(c.model.vocab));
    for (int32_t& t : b.targets) t = static_cast<int32_t>(rng.uniform_int(c.model.vocab));
  }
  return out;
}

struct SliceDiff {
  double max_abs = 0;  // 1e30 when a tensor's name or shard size does not match
  int tensors = 0;     // tensors compared
};

// Max |local - tp_slice(serial)| over every tensor of the serial table, for TP rank `rank`
// of `tp`.
inline SliceDiff diff_to_serial_slices(model::GptModel& serial, model::GptModel& local,
                                       const model::GptConfig& config, int tp, int rank) {
  SliceDiff d;
  const model::ParamTable& table = serial.param_table();
  for (size_t i = 0; i < table.size(); ++i) {
    const auto idx = static_cast<int>(i);
    const std::span<float> s = serial.param(idx);
    const std::vector<float> want =
        model::tp_slice(table[i], {s.begin(), s.end()}, config, tp, rank);
    const std::span<float> got = local.param(idx);
    if (local.param_table()[i].name != table[i].name || got.size() != want.size()) {
      d.max_abs = 1e30;  // a shape or name mismatch fails the test
      continue;
    }
    for (size_t j = 0; j < got.size(); ++j) {
      d.max_abs = std::max(d.max_abs, static_cast<double>(std::fabs(got[j] - want[j])));
    }
    ++d.tensors;
  }
  return d;
}

}  // namespace dtrain::train::e2e
