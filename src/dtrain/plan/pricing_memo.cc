// PricingMemo's tables and lookups, and the step's compute bound search orders the fitting
// layouts by (pricing_memo.h).
#include "dtrain/plan/pricing_memo.h"

#include <algorithm>

#include "dtrain/clock/engine_clock.h"
#include "dtrain/clock/time_model.h"
#include "dtrain/cost/placement.h"

namespace dtrain::plan::detail {

size_t PricingMemo::KeyHash::operator()(const Key& k) const {
  // Multiply and fold each field in, then mix the high bits down: linear probing reads the
  // low bits.
  // Each field by its own odd constant, summed (the products run side by side), then mixed.
  constexpr std::array<uint64_t, 8> kOdd{
      0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull, 0xD6E8FEB86659FD93ull,
      0xFF51AFD7ED558CCDull, 0xC4CEB9FE1A85EC53ull, 0x94D049BB133111EBull, 0xBF58476D1CE4E5B9ull};
  uint64_t h = 0;
  for (size_t i = 0; i < k.size(); ++i) h += static_cast<uint64_t>(k[i]) * kOdd[i];
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return static_cast<size_t>(h ^ (h >> 29));
}

namespace {

// A layout's CP choice and TP seconds depend on it through these, and its group's placement.
PricingMemo::Key group_key(const Layout& l, const GroupPlacement& group) {
  return {l.tp,
          l.cp,
          l.micro_batch,
          static_cast<int64_t>(l.recompute),
          l.sequence_parallel,
          group.stride,
          group.nodes,
          group.ranks_per_node};
}

}  // namespace

std::optional<CpAlgorithm> PricingMemo::cp_algorithm(const Layout& l, const GroupPlacement& group) {
  const CpAlgorithm* known = cp_algorithms_.find(group_key(l, group));
  if (known == nullptr) return std::nullopt;
  return *known;
}

void PricingMemo::set_cp_algorithm(const Layout& l, const GroupPlacement& group,
                                   CpAlgorithm algorithm) {
  const Key key = group_key(l, group);
  if (cp_algorithms_.find(key) == nullptr) cp_algorithms_.insert(key, algorithm);
}

const StageBlocks& PricingMemo::blocks(const PlanInput& in, const Layout& l, int stage) {
  const Key key{l.tp, l.pp, l.vp, l.ep, stage, 0, 0, 0};
  const StageBlocks* known = blocks_.find(key);
  return known != nullptr ? *known : blocks_.insert(key, stage_blocks(in, l, stage));
}

const LayerTimes& PricingMemo::times(const PlanInput& in, const ModelShape& real_model,
                                     const Layout& l) {
  const Key key{
      l.tp, l.cp, l.micro_batch, static_cast<int64_t>(l.recompute), l.sequence_parallel, l.ep,
      0,    0};
  const LayerTimes* known = times_.find(key);
  return known != nullptr ? *known : times_.insert(key, layer_times(in, real_model, l));
}

std::pair<double, double> PricingMemo::tp_layer(const PlanInput& in, const Layout& l) {
  const GroupPlacement group =
      place_group(Axis::tp, AxisSizes{l.dp, l.tp, l.pp, l.cp}, l.order, in.cluster.gpus_per_node);
  const Key key = group_key(l, group);
  if (const std::pair<double, double>* known = tp_layers_.find(key)) return *known;
  PlanInput priced = in;
  priced.cluster = effective_links(in.cluster);
  return tp_layers_.insert(key, tp_layer_seconds(priced, l, group));
}

const PlanInput& PricingMemo::linked(const PlanInput& given) {
  for (const auto& [kv_heads, in] : linked_) {
    if (kv_heads == given.model.kv_heads) return *in;
  }
  linked_.emplace_back(given.model.kv_heads, std::make_unique<PlanInput>(linked_input(given)));
  return *linked_.back().second;
}

const LayerActivations& PricingMemo::activations(const PlanInput& in, const Layout& l) {
  const Key key{l.tp,
                l.cp,
                static_cast<int64_t>(l.cp_algo),
                l.micro_batch,
                static_cast<int64_t>(l.recompute),
                l.sequence_parallel,
                l.ep,
                static_cast<int64_t>(schedule_of(l))};
  const LayerActivations* known = activations_.find(key);
  return known != nullptr ? *known : activations_.insert(key, layer_activations(in, l));
}

double step_compute_bound(const PlanInput& in, const Layout& l, PricingMemo& memo) {
  // The step is the makespan plus terms that are not negative, except where the engine clock
  // or a measured step sets it (then nothing is bounded here).
  if (has_measured_rates(in.cluster) || in.training.step_time_s > 0 ||
      in.training.achieved_flops_per_gpu > 0 || !l.stage_layers.empty()) {
    return 0;
  }
  auto bound = [&](const PlanInput& local) {
    const LayerTimes& lt = memo.times(local, in.model, l);
    // One block's forward, backward (B + W) and all three, rescaled as stage_compute rescales
    // them (the FLOPs convention); with routed layers the lighter of a dense and a routed one.
    auto forward = [&](const PassTimes& p) { return p.forward_s * lt.model_scale; };
    auto backward = [&](const PassTimes& p) {
      return ((p.backward_input_s - p.recompute_s) * lt.model_scale +
              p.recompute_s * lt.recompute_scale) +
             p.backward_weight_s * lt.model_scale;
    };
    double f = forward(lt.dense_layer), b = backward(lt.dense_layer);
    double c = f + b;
    if (in.model.moe.enabled()) {
      f = std::min(f, forward(lt.moe_layer));
      b = std::min(b, backward(lt.moe_layer));
      c = std::min(c, forward(lt.moe_layer) + backward(lt.moe_layer));
    }
    // And each block's TP collectives (tp_times charges every block of a stage its calls).
    const auto [tp_forward_s, tp_backward_s] = memo.tp_layer(local, l);
    f += tp_forward_s;
    b += tp_backward_s;
    c += tp_forward_s + tp_backward_s;
    // Every virtual stage holds at least floor(L / (P v)) blocks (pipeline_stages.h), and every
    // chunk of the interleaved schedule 1/v of a stage's. The last rank's bound in
    // pipeline_makespan_lower_bound: the forwards of the P - 1 virtual stages before it, its own
    // M v chunks, and with a fused backward the backwards of those P - 1 on the way back.
    const int vstages = l.pp * l.vp;
    const double blocks = static_cast<double>(in.model.layers / vstages);
    const double microbatches = static_cast<double>(in.training.global_batch /
                                                    (static_cast<int64_t>(l.dp) * l.micro_batch));
    const bool fused = schedule_of(l) != ScheduleKind::zero_bubble_h1;
    const double before = static_cast<double>(l.pp - 1);
    const double work = blocks * (before * f + microbatches * static_cast<double>(l.vp) * c +
                                  (fused ? before * b : 0));
    // That bound sums the same products in another order, with collectives and sends besides:
    // lowered by far more than the rounding of either sum.
    constexpr double kOrderSlack = 1e-4;
    return work * (1 - kOrderSlack);
  };
  if (in.model.kv_heads_or_heads() < l.tp) return bound(per_rank_input(in, l));
  return bound(in);
}

}  // namespace dtrain::plan::detail
