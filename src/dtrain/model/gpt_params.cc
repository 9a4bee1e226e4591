// GptModel's parameters and storage: the constructors and the rank's parameter table (stage, TP
// and EP cuts of the whole model's), the weights' pointers and their rebinding to outside
// storage, initialisation, and the whole passes' activations and workspace.
#include "dtrain/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/model/moe_dispatch.h"
#include "dtrain/model/tp_shard.h"

namespace dtrain::model {

GptModel::GptModel(const GptConfig& config, MemoryTracker* tracker, TensorParallelHooks* tp,
                   ThreadTeam* team, Recompute recompute, ExpertParallelHooks* ep)
    : GptModel(config, whole_model(config), tracker, tp, team, recompute, ep) {}

GptModel::GptModel(const GptConfig& config, const GptStage& stage, MemoryTracker* tracker,
                   TensorParallelHooks* tp, ThreadTeam* team, Recompute recompute,
                   ExpertParallelHooks* ep)
    : config_(config),
      recompute_(recompute),
      table_(ep_local_table(tp_local_table(gpt_stage_param_table(config, stage), config,
                                           tp != nullptr ? tp->size() : 1),
                            config.moe, ep != nullptr ? ep->size() : 1)),
      tracker_(tracker),
      tp_(tp != nullptr ? tp : &serial_tp_),
      ep_(ep != nullptr ? ep : &serial_ep_),
      params_(table_.total_count(), MemoryTag::params, tracker),
      grads_(table_.total_count(), MemoryTag::grads, tracker),
      stage_(stage) {
  if (!stage.is_whole(config)) {
    const ParamTable whole = gpt_param_table(config);
    local_index_.assign(whole.size(), -1);
    for (size_t i = 0; i < table_.size(); ++i) {
      const int w = whole.index_of(table_[i].name);
      local_index_[static_cast<size_t>(w)] = static_cast<int>(i);
      whole_index_.push_back(w);
    }
  }
  w_ = weights_at(params_.data());
  dw_ = weights_at(grads_.data());
  cx_.team = team;
}

GptWeights GptModel::weights_at(float* base) const {
  auto at = [&](int index) -> float* {
    const int i = local_index(index);  // -1: a tensor this stage does not hold
    return base == nullptr || i < 0 ? nullptr : base + table_[static_cast<size_t>(i)].offset;
  };
  GptWeights w;
  w.wte = at(kWteIndex);
  w.wpe = at(gpt_wpe_index(config_));
  for (int64_t l = 0; l < config_.layers; ++l) {
    auto p = [&](LayerParam k) { return at(gpt_layer_param(config_, l, k)); };
    w.layers.push_back({p(LayerParam::ln1_w), p(LayerParam::ln1_b), p(LayerParam::qkv_w),
                        p(LayerParam::qkv_b), p(LayerParam::attn_proj_w),
                        p(LayerParam::attn_proj_b), p(LayerParam::ln2_w), p(LayerParam::ln2_b),
                        p(LayerParam::fc_w), p(LayerParam::fc_b), p(LayerParam::fc_proj_w),
                        p(LayerParam::fc_proj_b)});
    if (is_moe_layer(config_.moe, l)) w.layers.back().moe_router_w = p(LayerParam::moe_router_w);
  }
  w.lnf_w = at(gpt_lnf_w_index(config_));
  w.lnf_b = at(gpt_lnf_b_index(config_));
  w.lm_head = at(gpt_lm_head_index(config_));
  return w;
}

void GptModel::release_params() {
  params_.release();
  w_ = weights_at(nullptr);
}

void GptModel::release_grads() {
  grads_.release();
  dw_ = weights_at(nullptr);
}

void GptModel::bind_params(int64_t offset, int64_t count, float* storage) {
  bind_range(w_, offset, count, storage);
}

void GptModel::bind_grads(int64_t offset, int64_t count, float* storage) {
  bind_range(dw_, offset, count, storage);
}

void GptModel::bind_range(GptWeights& w, int64_t offset, int64_t count, float* storage) const {
  DTRAIN_CHECK(offset >= 0 && count >= 0 && offset + count <= table_.total_count(),
               "GptModel::bind: range [", offset, ", ", offset + count,
               ") is outside the parameter buffer of ", table_.total_count());
  // Whether tensor `index` (of the whole model's table) is held here and lies inside the range
  // (and is to move to storage + t.offset - offset); a stage model skips the tensors it lacks.
  auto inside = [&](int index) {
    const int i = local_index(index);  // -1: not held here, or not in the family
    if (i < 0) return false;
    const ParamTensor& t = table_[static_cast<size_t>(i)];
    const bool in = t.offset >= offset && t.offset + t.count <= offset + count;
    const bool out = t.offset + t.count <= offset || t.offset >= offset + count;
    DTRAIN_CHECK(in || out, "GptModel::bind: tensor ", t.name, " straddles the range [", offset,
                 ", ", offset + count, ")");
    return in;
  };
  auto moved = [&](int index) {
    return storage + (table_[static_cast<size_t>(local_index(index))].offset - offset);
  };
  auto bind = [&](float*& field, int index) {
    if (inside(index)) field = moved(index);
  };
  bind(w.wte, kWteIndex);
  bind(w.wpe, gpt_wpe_index(config_));
  for (int64_t l = 0; l < config_.layers; ++l) {
    LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    auto p = [&](LayerParam k) { return gpt_layer_param(config_, l, k); };
    bind(lw.ln1_w, p(LayerParam::ln1_w));
    bind(lw.ln1_b, p(LayerParam::ln1_b));
    bind(lw.qkv_w, p(LayerParam::qkv_w));
    bind(lw.qkv_b, p(LayerParam::qkv_b));
    bind(lw.proj_w, p(LayerParam::attn_proj_w));
    bind(lw.proj_b, p(LayerParam::attn_proj_b));
    bind(lw.ln2_w, p(LayerParam::ln2_w));
    bind(lw.ln2_b, p(LayerParam::ln2_b));
    bind(lw.fc_w, p(LayerParam::fc_w));
    bind(lw.fc_b, p(LayerParam::fc_b));
    bind(lw.fc_proj_w, p(LayerParam::fc_proj_w));
    bind(lw.fc_proj_b, p(LayerParam::fc_proj_b));
    if (is_moe_layer(config_.moe, l)) bind(lw.moe_router_w, p(LayerParam::moe_router_w));
  }
  bind(w.lnf_w, gpt_lnf_w_index(config_));
  bind(w.lnf_b, gpt_lnf_b_index(config_));
  bind(w.lm_head, gpt_lm_head_index(config_));
}

std::span<float> GptModel::param(int index) {
  const ParamTensor& t = table_[static_cast<size_t>(index)];
  return params_.span().subspan(static_cast<size_t>(t.offset), static_cast<size_t>(t.count));
}

std::span<float> GptModel::grad(int index) {
  const ParamTensor& t = table_[static_cast<size_t>(index)];
  return grads_.span().subspan(static_cast<size_t>(t.offset), static_cast<size_t>(t.count));
}

void GptModel::init_params(uint64_t seed) {
  Rng seeder(seed);
  const double std_base = 0.02;
  const double std_residual = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.layers));
  // A stage model draws every seed of the whole model and takes its tensors' by their index there.
  std::vector<uint64_t> stage_seeds;
  for (size_t i = 0; !whole_index_.empty() && i < local_index_.size(); ++i) {
    stage_seeds.push_back(seeder.next_u64());
  }
  // TP: a sharded tensor is drawn whole (its serial shape) and sliced.
  const int tp = tp_->size();
  const ParamTable serial =
      tp > 1 || ep_->size() > 1 ? gpt_stage_param_table(config_, stage_) : ParamTable{};
  std::vector<float> whole;
  for (size_t i = 0; i < table_.size(); ++i) {
    const ParamTensor& t = table_[i];
    Rng rng(whole_index_.empty() ? seeder.next_u64()
                                 : stage_seeds[static_cast<size_t>(whole_index_[i])]);
    // EP: a stacked expert tensor is drawn whole too and the rank keeps its experts' rows.
    const bool expert_cut = ep_->size() > 1 && is_expert_tensor(t.name);
    const bool sharded = (tp > 1 && tp_split_of(t.name) != TpSplit::replicated) || expert_cut;
    if (sharded) whole.assign(static_cast<size_t>(serial[i].count), 0.0f);
    std::span<float> p = sharded ? std::span<float>(whole) : param(static_cast<int>(i));
    const bool is_bias = t.name.ends_with(".b");
    const bool is_ln_weight =
        t.name.ends_with("ln1.w") || t.name.ends_with("ln2.w") || t.name == "lnf.w";
    // Llama's down projection is its MLP's output into the residual (mlp.proj.w): scaled the
    // same. The untied head draws at 0.02 as the word embedding.
    if (is_bias) {
      std::fill(p.begin(), p.end(), 0.0f);
    } else if (is_ln_weight) {
      std::fill(p.begin(), p.end(), 1.0f);
    } else {
      const bool residual = t.name.ends_with("attn.proj.w") || t.name.ends_with("mlp.proj.w") ||
                            t.name.ends_with("moe.proj.w");
      const double stddev = residual ? std_residual : std_base;
      for (float& x : p) x = static_cast<float>(stddev * rng.normal());
    }
    if (expert_cut) {
      const std::vector<float> slice =
          expert_slice(serial[i], whole, config_, tp, tp_->rank(), ep_->size(), ep_->rank());
      std::copy(slice.begin(), slice.end(), param(static_cast<int>(i)).begin());
    } else if (sharded) {
      const std::vector<float> slice = tp_slice(serial[i], whole, config_, tp, tp_->rank());
      std::copy(slice.begin(), slice.end(), param(static_cast<int>(i)).begin());
    }
  }
}

void GptModel::set_batch_shape(int64_t B, int64_t T) {
  if (acts_ != nullptr && acts_->batch() == B && acts_->seq() == T) return;
  ws_.reset();
  acts_.reset();
  const int tp = tp_->size();
  acts_ = std::make_unique<GptActivations>(config_, B, T, tracker_, LayerRange{0, config_.layers},
                                           true, true, tp, sp(), recompute_, bf16_activations());
  ws_ = std::make_unique<GptWorkspace>(config_, B, T, tracker_, cx_.threads(), tp, sp(), recompute_,
                                       bf16_activations());
}

void GptModel::set_precision(Precision p) {
  if (p == cx_.precision) return;
  cx_.precision = p;
  ws_.reset();  // the whole passes' storage is built for a precision
  acts_.reset();
}

GptActivations& GptModel::activations() {
  DTRAIN_CHECK(acts_ != nullptr, "GptModel: no activations yet (call set_batch_shape or forward)");
  return *acts_;
}

GptWorkspace& GptModel::workspace() {
  DTRAIN_CHECK(ws_ != nullptr, "GptModel: no workspace yet (call set_batch_shape or forward)");
  return *ws_;
}

}  // namespace dtrain::model
