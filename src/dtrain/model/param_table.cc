// ParamTable and the GPT's canonical tensor list.
#include "dtrain/model/param_table.h"

#include <algorithm>
#include <numeric>

#include "dtrain/core/check.h"

namespace dtrain::model {

void ParamTable::add(std::string name, std::vector<int64_t> shape) {
  const int64_t count =
      std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
  DTRAIN_CHECK(count > 0, "parameter '", name, "' has no elements");
  index_by_name_.emplace(name, static_cast<int>(tensors_.size()));  // the first of a name wins
  tensors_.push_back({std::move(name), std::move(shape), total_count_, count});
  total_count_ += count;
}

void ParamTable::set_backward_order(std::vector<int> order) {
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> all(tensors_.size());
  std::iota(all.begin(), all.end(), 0);
  DTRAIN_CHECK(sorted == all, "backward order must list every one of the ", tensors_.size(),
               " tensors exactly once (got ", order.size(), " entries)");
  backward_order_ = std::move(order);
}

int ParamTable::index_of(std::string_view name) const {
  const auto found = index_by_name_.find(std::string(name));
  if (found != index_by_name_.end()) return found->second;
  throw Error(str("no parameter tensor named '", name, "'"));
}

ParamTable gpt_param_table(const GptConfig& c) {
  validate(c);
  const int64_t C = c.channels;
  ParamTable t;
  t.add("wte", {c.vocab, C});
  t.add("wpe", {c.context, C});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string h = str("h.", l, ".");
    t.add(h + "ln1.w", {C});
    t.add(h + "ln1.b", {C});
    t.add(h + "attn.qkv.w", {3 * C, C});
    t.add(h + "attn.qkv.b", {3 * C});
    t.add(h + "attn.proj.w", {C, C});
    t.add(h + "attn.proj.b", {C});
    t.add(h + "ln2.w", {C});
    t.add(h + "ln2.b", {C});
    if (is_moe_layer(c.moe, l)) {
      const int64_t E = c.moe.experts;
      t.add(h + "moe.fc.w", {E, 4 * C, C});
      t.add(h + "moe.fc.b", {E, 4 * C});
      t.add(h + "moe.proj.w", {E, C, 4 * C});
      t.add(h + "moe.proj.b", {E, C});
      t.add(h + "moe.router.w", {E, C});
      continue;
    }
    t.add(h + "mlp.fc.w", {4 * C, C});
    t.add(h + "mlp.fc.b", {4 * C});
    t.add(h + "mlp.proj.w", {C, 4 * C});
    t.add(h + "mlp.proj.b", {C});
  }
  t.add("lnf.w", {C});
  t.add("lnf.b", {C});

  std::vector<int> order = {gpt_lnf_w_index(c), gpt_lnf_b_index(c)};
  const LayerParam layer_order[] = {
      LayerParam::fc_proj_w,   LayerParam::fc_proj_b,   LayerParam::fc_w,
      LayerParam::fc_b,        LayerParam::ln2_w,       LayerParam::ln2_b,
      LayerParam::attn_proj_w, LayerParam::attn_proj_b, LayerParam::qkv_w,
      LayerParam::qkv_b,       LayerParam::ln1_w,       LayerParam::ln1_b};
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    for (LayerParam k : layer_order) {
      order.push_back(gpt_layer_param(c, l, k));
      if (k == LayerParam::fc_b && is_moe_layer(c.moe, l)) {
        order.push_back(gpt_layer_param(c, l, LayerParam::moe_router_w));
      }
    }
  }
  order.push_back(kWteIndex);
  order.push_back(kWpeIndex);
  t.set_backward_order(std::move(order));
  return t;
}

}  // namespace dtrain::model
