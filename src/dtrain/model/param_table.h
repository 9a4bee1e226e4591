// ParamTable: the one description of where every parameter tensor lives in the contiguous
// parameter buffer (and, at the same offsets, in the gradient buffer). Bucketing, ZeRO
// sharding and checkpoints walk this table; nothing else knows the layout.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dtrain/model/gpt_config.h"

namespace dtrain::model {

struct ParamTensor {
  std::string name;            // "wte", "h.0.attn.qkv.w", ...
  std::vector<int64_t> shape;  // row-major; a Linear weight is (out, in)
  int64_t offset = 0;          // in elements, from the start of the buffer
  int64_t count = 0;           // product of shape
};

class ParamTable {
 public:
  // Appends a tensor right after the previous one (no padding: offsets are prefix sums).
  void add(std::string name, std::vector<int64_t> shape);
  // The order in which a backward pass finishes each tensor's gradient (indices into
  // tensors()); gradient buckets are filled in this order.
  void set_backward_order(std::vector<int> order);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const ParamTensor& operator[](size_t i) const { return tensors_[i]; }
  size_t size() const { return tensors_.size(); }
  int64_t total_count() const { return total_count_; }
  const std::vector<int>& backward_order() const { return backward_order_; }
  // Index of the tensor called `name`; throws Error if there is none. A hash look-up: callers
  // look up every tensor of a table, and a model of 100,000 blocks has 1.2 million of them.
  int index_of(std::string_view name) const;
  bool contains(std::string_view name) const { return index_by_name_.contains(std::string(name)); }

 private:
  std::vector<ParamTensor> tensors_;
  std::unordered_map<std::string, int> index_by_name_;
  std::vector<int> backward_order_;
  int64_t total_count_ = 0;
};

// GPT tensors of one block, in canonical order; a block's tensor k of layer l is at index
// gpt_layer_param(l, k) of the table.
enum class LayerParam {
  ln1_w,
  ln1_b,
  qkv_w,
  qkv_b,
  attn_proj_w,
  attn_proj_b,
  ln2_w,
  ln2_b,
  fc_w,
  fc_b,
  fc_proj_w,
  fc_proj_b,
  moe_router_w,  // MoE blocks only (model/ops/moe.h): their four MLP slots hold E experts each
};
inline constexpr int kLayerParamCount = 12;  // a dense block's; an MoE block has 13
inline constexpr int kWteIndex = 0;
inline constexpr int kWpeIndex = 1;
inline int gpt_layer_param(int64_t layer, LayerParam k) {
  return 2 + static_cast<int>(layer) * kLayerParamCount + static_cast<int>(k);
}
inline int gpt_lnf_w_index(int64_t layers) {
  return 2 + static_cast<int>(layers) * kLayerParamCount;
}
inline int gpt_lnf_b_index(int64_t layers) {
  return gpt_lnf_w_index(layers) + 1;
}
// The same for any model, MoE blocks and the Llama family included (the forms above are a dense
// GPT's). A Llama block holds six of the slots (ln1.w, attn.qkv.w, attn.proj.w, ln2.w, mlp.fc.w
// as [gate | up], mlp.proj.w as down) and no biases; its model has no wpe and no lnf.b, and an
// untied head lm_head.w after lnf.w; a routed Llama block (Mixtral's) holds its two MLP slots
// as E SwiGLU experts and the router in a seventh. An index of a tensor the family lacks is -1.
inline constexpr int kLlamaLayerParamCount = 6;
inline int gpt_layer_slot(const GptConfig& c, LayerParam k) {
  if (!c.llama()) return static_cast<int>(k);
  switch (k) {
    case LayerParam::ln1_w:
      return 0;
    case LayerParam::qkv_w:
      return 1;
    case LayerParam::attn_proj_w:
      return 2;
    case LayerParam::ln2_w:
      return 3;
    case LayerParam::fc_w:
      return 4;
    case LayerParam::fc_proj_w:
      return 5;
    case LayerParam::moe_router_w:
      return 6;
    default:
      return -1;
  }
}
inline int gpt_embedding_param_count(const GptConfig& c) {
  return c.llama() ? 1 : 2;  // wte (and GPT's wpe)
}
inline int gpt_wpe_index(const GptConfig& c) {
  return c.llama() ? -1 : kWpeIndex;
}
inline int gpt_layer_param_count(const GptConfig& c, int64_t layer) {
  return (c.llama() ? kLlamaLayerParamCount : kLayerParamCount) +
         (is_moe_layer(c.moe, layer) ? 1 : 0);
}
inline int gpt_layer_param(const GptConfig& c, int64_t layer, LayerParam k) {
  const int slot = gpt_layer_slot(c, k);
  if (slot < 0) return -1;
  const int routers_before = static_cast<int>(moe_layers_before(c.moe, layer));
  if (c.llama()) {
    return 1 + static_cast<int>(layer) * kLlamaLayerParamCount + routers_before + slot;
  }
  return gpt_layer_param(layer, k) + routers_before;
}
inline int gpt_lnf_w_index(const GptConfig& c) {
  const int routers = static_cast<int>(moe_layers_before(c.moe, c.layers));
  if (c.llama()) return 1 + static_cast<int>(c.layers) * kLlamaLayerParamCount + routers;
  return gpt_lnf_w_index(c.layers) + routers;
}
inline int gpt_lnf_b_index(const GptConfig& c) {
  return c.llama() ? -1 : gpt_lnf_w_index(c) + 1;
}
inline int gpt_lm_head_index(const GptConfig& c) {
  return c.tied_head() ? -1 : gpt_lnf_w_index(c) + 1;
}
// Block `layer`'s tensors in canonical order.
std::vector<LayerParam> gpt_layer_params(const GptConfig& c, int64_t layer);

// The GPT table in canonical order:
//   wte (V, C), wpe (T, C),
//   for each layer l: h.l.ln1.w (C), h.l.ln1.b (C), h.l.attn.qkv.w (3C, C), h.l.attn.qkv.b (3C),
//     h.l.attn.proj.w (C, C), h.l.attn.proj.b (C), h.l.ln2.w (C), h.l.ln2.b (C),
//     h.l.mlp.fc.w (4C, C), h.l.mlp.fc.b (4C), h.l.mlp.proj.w (C, 4C), h.l.mlp.proj.b (C),
//   lnf.w (C), lnf.b (C).
// An MoE block l (is_moe_layer) holds instead of the four MLP tensors h.l.moe.fc.w (E, 4C, C),
// h.l.moe.fc.b (E, 4C), h.l.moe.proj.w (E, C, 4C), h.l.moe.proj.b (E, C), then
// h.l.moe.router.w (E, C); its backward finishes the router after the experts.
// Backward finishes them in this order: lnf.w, lnf.b; then for l = L-1 down to 0:
//   mlp.proj.w, mlp.proj.b, mlp.fc.w, mlp.fc.b, ln2.w, ln2.b, attn.proj.w, attn.proj.b,
//   attn.qkv.w, attn.qkv.b, ln1.w, ln1.b; then wte (the LM head adds to it first, the
//   embedding last) and wpe.
ParamTable gpt_param_table(const GptConfig& config);

}  // namespace dtrain::model
