// GptStage checks and the stage's parameter table: the whole model's table, filtered.
#include "dtrain/model/gpt_stage.h"

#include <algorithm>

#include "dtrain/core/check.h"

namespace dtrain::model {

bool GptStage::has_layer(int64_t l) const {
  return std::any_of(chunks.begin(), chunks.end(),
                     [l](const LayerRange& r) { return r.contains(l); });
}

int64_t GptStage::layer_count() const {
  int64_t n = 0;
  for (const LayerRange& r : chunks) n += r.count;
  return n;
}

bool GptStage::is_whole(const GptConfig& config) const {
  return embedding && head && layer_count() == config.layers;
}

GptStage whole_model(const GptConfig& config) {
  return {{{0, config.layers}}, true, true};
}

void validate(const GptStage& stage, const GptConfig& config) {
  const int64_t L = config.layers;
  std::vector<bool> seen(static_cast<size_t>(L), false);
  for (const LayerRange& r : stage.chunks) {
    DTRAIN_CHECK(r.count > 0 && r.first >= 0 && r.end() <= L, "stage chunk: blocks [", r.first,
                 ", ", r.end(), ") are empty or outside the model's ", L, " blocks");
    for (int64_t l = r.first; l < r.end(); ++l) {
      DTRAIN_CHECK(!seen[static_cast<size_t>(l)], "stage: block ", l, " is in two chunks");
      seen[static_cast<size_t>(l)] = true;
    }
  }
  const bool any = !stage.chunks.empty();
  DTRAIN_CHECK(!stage.embedding || !any || stage.has_layer(0),
               "stage: the embedding must come with block 0");
  DTRAIN_CHECK(!stage.head || !any || stage.has_layer(L - 1),
               "stage: the head must come with block ", L - 1);
  DTRAIN_CHECK(any || stage.embedding || stage.head, "stage: holds no blocks, embedding or head");
}

ParamTable gpt_stage_param_table(const GptConfig& config, const GptStage& stage) {
  const ParamTable whole = gpt_param_table(config);
  if (stage.is_whole(config)) return whole;
  validate(stage, config);
  std::vector<bool> keep(whole.size(), false);
  // The word embedding on the first stage, and on the last while the head is tied to it.
  keep[kWteIndex] = stage.embedding || (stage.head && config.tied_head());
  if (gpt_wpe_index(config) >= 0)
    keep[static_cast<size_t>(gpt_wpe_index(config))] = stage.embedding;
  for (int64_t l = 0; l < config.layers; ++l) {
    if (!stage.has_layer(l)) continue;
    for (LayerParam k : gpt_layer_params(config, l)) {
      keep[static_cast<size_t>(gpt_layer_param(config, l, k))] = true;
    }
  }
  for (const int head :
       {gpt_lnf_w_index(config), gpt_lnf_b_index(config), gpt_lm_head_index(config)}) {
    if (head >= 0) keep[static_cast<size_t>(head)] = stage.head;
  }

  ParamTable table;
  std::vector<int> new_index(whole.size(), -1);
  int next = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    if (!keep[i]) continue;
    table.add(whole[i].name, whole[i].shape);
    new_index[i] = next++;
  }
  std::vector<int> order;
  for (int i : whole.backward_order()) {
    if (keep[static_cast<size_t>(i)]) order.push_back(new_index[static_cast<size_t>(i)]);
  }
  table.set_backward_order(std::move(order));
  return table;
}

}  // namespace dtrain::model
