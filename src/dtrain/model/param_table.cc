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

std::vector<LayerParam> gpt_layer_params(const GptConfig& c, int64_t layer) {
  std::vector<LayerParam> out;
  for (int k = 0; k <= static_cast<int>(LayerParam::moe_router_w); ++k) {
    const auto p = static_cast<LayerParam>(k);
    if (p == LayerParam::moe_router_w && !is_moe_layer(c.moe, layer)) continue;
    if (gpt_layer_slot(c, p) >= 0) out.push_back(p);
  }
  return out;
}

namespace {

// Llama: wte (V, C); per block h.l.ln1.w (C), h.l.attn.qkv.w ((NH + 2 NKV) HS, C) with rows
// [q | k | v], h.l.attn.proj.w (C, C), h.l.ln2.w (C), h.l.mlp.fc.w (2F, C) with rows
// [gate | up], h.l.mlp.proj.w (C, F); lnf.w (C); lm_head.w (V, C) unless tied. A routed block
// (Mixtral's) holds E SwiGLU experts instead of the two MLP tensors, h.l.moe.fc.w (E, 2F, C) with
// each expert's rows [gate | up] and h.l.moe.proj.w (E, C, F), then h.l.moe.router.w (E, C).
// Backward finishes lm_head.w and lnf.w, the blocks from the last (down, gate|up, the router,
// ln2, proj, qkv, ln1), then wte.
ParamTable llama_param_table(const GptConfig& c) {
  const int64_t C = c.channels, F = c.ffn();
  const int64_t qkv = (c.heads + 2 * c.kv_heads_or_heads()) * c.head_size();
  ParamTable t;
  t.add("wte", {c.vocab, C});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string h = str("h.", l, ".");
    t.add(h + "ln1.w", {C});
    t.add(h + "attn.qkv.w", {qkv, C});
    t.add(h + "attn.proj.w", {C, C});
    t.add(h + "ln2.w", {C});
    if (is_moe_layer(c.moe, l)) {
      const int64_t E = c.moe.experts;
      t.add(h + "moe.fc.w", {E, 2 * F, C});
      t.add(h + "moe.proj.w", {E, C, F});
      t.add(h + "moe.router.w", {E, C});
      continue;
    }
    t.add(h + "mlp.fc.w", {2 * F, C});
    t.add(h + "mlp.proj.w", {C, F});
  }
  t.add("lnf.w", {C});
  if (!c.tied_head()) t.add("lm_head.w", {c.vocab, C});
  std::vector<int> order;
  if (!c.tied_head()) order.push_back(gpt_lm_head_index(c));
  order.push_back(gpt_lnf_w_index(c));
  const LayerParam layer_order[] = {LayerParam::fc_proj_w,   LayerParam::fc_w,  LayerParam::ln2_w,
                                    LayerParam::attn_proj_w, LayerParam::qkv_w, LayerParam::ln1_w};
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    for (LayerParam k : layer_order) {
      order.push_back(gpt_layer_param(c, l, k));
      if (k == LayerParam::fc_w && is_moe_layer(c.moe, l)) {
        order.push_back(gpt_layer_param(c, l, LayerParam::moe_router_w));
      }
    }
  }
  order.push_back(kWteIndex);
  t.set_backward_order(std::move(order));
  return t;
}

}  // namespace

ParamTable gpt_param_table(const GptConfig& c) {
  validate(c);
  if (c.llama()) return llama_param_table(c);
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
