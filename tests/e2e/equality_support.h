// What the equality tests share: the random batches every run is compared on, the serial run's
// outcome (losses, then every parameter and both moments gathered from the ranks' pieces) and the
// largest differences of another run from it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "dtrain/checkpoint/train_state.h"
#include "dtrain/core/rng.h"
#include "dtrain/data/data.h"
#include "dtrain/engine/step_config.h"
#include "dtrain/model/gpt_config.h"
#include "dtrain/model/param_table.h"
#include "reference/serial_engine.h"

namespace dtrain::train::e2e {

// `steps` batches of uniform random tokens (seed 7), the same for every run compared.
inline std::vector<data::Batch> random_batches(const StepConfig& c, int steps) {
  Rng rng(7);
  std::vector<data::Batch> out(static_cast<size_t>(steps));
  for (data::Batch& b : out) {
    b.resize(c.batch, c.seq);
    for (int32_t& t : b.inputs) t = static_cast<int32_t>(rng.uniform_int(c.model.vocab));
    for (int32_t& t : b.targets) t = static_cast<int32_t>(rng.uniform_int(c.model.vocab));
  }
  return out;
}

// A run's losses (every step, then the evaluation loss) and its state as the serial model's flat
// tensors, with how many ranks wrote each element (each must be written exactly once).
struct Outcome {
  std::vector<float> losses;
  std::vector<float> state[checkpoint::kStateKindCount];
  std::vector<int> writes[checkpoint::kStateKindCount];
};

inline Outcome empty_outcome(const model::GptConfig& g) {
  Outcome o;
  const auto n = static_cast<size_t>(model::gpt_param_count(g));
  for (int k = 0; k < checkpoint::kStateKindCount; ++k) {
    o.state[k].assign(n, 0.0f);
    o.writes[k].assign(n, 0);
  }
  return o;
}

// Writes one rank's exported pieces into the serial layout.
inline void add_pieces(const model::ParamTable& serial, const checkpoint::RankState& s,
                       Outcome& out) {
  for (const checkpoint::StatePiece& p : s.pieces) {
    const model::ParamTensor& t = serial[static_cast<size_t>(serial.index_of(p.tensor))];
    size_t at = 0;
    for (const model::FlatRange& r : p.ranges) {
      for (int64_t i = 0; i < r.count; ++i) {
        const auto e = static_cast<size_t>(t.offset + r.offset + i);
        out.state[static_cast<int>(p.kind)][e] = p.data[at++];
        ++out.writes[static_cast<int>(p.kind)][e];
      }
    }
  }
}

// The serial reference: one step per batch at learning rate `lr` (each batch cut into
// `microbatches` for gradient accumulation), then the evaluation loss on the first batch.
inline Outcome run_serial(const StepConfig& c, const std::vector<data::Batch>& data, float lr,
                          int64_t microbatches = 1) {
  SerialEngine engine(c, microbatches);
  Outcome o = empty_outcome(c.model);
  for (const data::Batch& b : data) o.losses.push_back(engine.train_step(b, lr).loss);
  o.losses.push_back(engine.eval_loss(data[0]));
  add_pieces(model::gpt_param_table(c.model), engine.export_state(), o);
  return o;
}

// The largest differences of a run from the reference: the losses, the parameters (absolute)
// and both moments (relative to each tensor's largest |value|). Every element must be written
// exactly once (a failed expectation, and the comparison stops there).
struct Worst {
  double loss = 0, state[checkpoint::kStateKindCount] = {0, 0, 0};
};

inline Worst compare(const StepConfig& c, const Outcome& want, const Outcome& got) {
  Worst w;
  EXPECT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < std::min(got.losses.size(), want.losses.size()); ++s) {
    w.loss = std::max(w.loss, static_cast<double>(std::fabs(got.losses[s] - want.losses[s])));
  }
  const model::ParamTable serial = model::gpt_param_table(c.model);
  for (int k = 0; k < checkpoint::kStateKindCount; ++k) {
    for (const model::ParamTensor& t : serial.tensors()) {
      double scale = 0, diff = 0;
      for (int64_t i = t.offset; i < t.offset + t.count; ++i) {
        const auto e = static_cast<size_t>(i);
        EXPECT_EQ(got.writes[k][e], 1) << name(static_cast<checkpoint::StateKind>(k)) << " of "
                                       << t.name << " element " << i - t.offset;
        if (got.writes[k][e] != 1) return w;
        scale = std::max(scale, static_cast<double>(std::fabs(want.state[k][e])));
        diff = std::max(diff, static_cast<double>(std::fabs(got.state[k][e] - want.state[k][e])));
      }
      w.state[k] = std::max(w.state[k], k == 0 ? diff : (scale > 0 ? diff / scale : diff));
    }
  }
  return w;
}

}  // namespace dtrain::train::e2e
