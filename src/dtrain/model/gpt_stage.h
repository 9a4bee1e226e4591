// A pipeline stage's share of the GPT model: its blocks (a range per model chunk), whether it
// holds the embedding and the head, and its parameter table. A GptModel built for a GptStage
// holds only those tensors, under the whole model's names.
#pragma once

#include <cstdint>
#include <vector>

#include "dtrain/model/gpt_config.h"
#include "dtrain/model/param_table.h"

namespace dtrain::model {

// Blocks [first, first + count).
struct LayerRange {
  int64_t first = 0;
  int64_t count = 0;
  int64_t end() const { return first + count; }
  bool contains(int64_t l) const { return l >= first && l < end(); }
  bool operator==(const LayerRange&) const = default;
};

struct GptStage {
  std::vector<LayerRange> chunks;  // the blocks of each model chunk, in the stage's chunk order
  bool embedding = true;           // wte and wpe: the token + position embedding before block 0
  bool head = true;  // lnf and wte (tied): final LayerNorm, LM head and loss after block L-1

  bool has_layer(int64_t l) const;
  int64_t layer_count() const;
  // Every block, the embedding and the head: the serial model.
  bool is_whole(const GptConfig& config) const;
  bool operator==(const GptStage&) const = default;
};

// The whole model as one stage: chunks {{0, L}}, embedding and head.
GptStage whole_model(const GptConfig& config);

// Throws Error unless every range is non-empty and inside 0..L-1, no block is in two ranges,
// the embedding comes with block 0 (or no blocks) and the head with block L-1 (or no blocks).
void validate(const GptStage& stage, const GptConfig& config);

// The stage's tensors in the order of gpt_param_table, skipping those it does not hold: wte
// (with the embedding or the head, which is tied to it), wpe (embedding), h.l.* for its blocks,
// lnf.* (head). The backward order is gpt_param_table's, filtered the same way. For the whole
// model this is gpt_param_table(config).
ParamTable gpt_stage_param_table(const GptConfig& config, const GptStage& stage);

}  // namespace dtrain::model
