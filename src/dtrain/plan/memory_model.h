// Model-state memory per rank under data parallelism and each ZeRO stage (Rajbhandari et al.
// 2020, §5.1 and Figure 1). The engine's ZeRO tests compare each rank's measured params, grads
// and optimizer bytes with model_state_bytes; the planner uses it per pipeline stage.
//
// With Psi parameters, N data-parallel ranks and p, g, o bytes per parameter for the weights,
// gradients and optimizer state (StateBytes), each rank holds:
//   stage 0 (plain DP)          (p + g + o) Psi
//   stage 1 (P_os)              (p + g) Psi + o Psi/N
//   stage 2 (P_os+g)            p Psi + (g + o) Psi/N
//   stage 3 (P_os+g+p)          (p + g + o) Psi/N
// A sharded state holds ceil(Psi/N) elements per rank: the last shard is padded, never refused.
// Stage 3 also needs the full weights of the layers being computed: zero3_gathered_bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dtrain::plan {

// Bytes per parameter of each model state.
struct StateBytes {
  int64_t param = 2;       // p: the weights the forward reads
  int64_t grad = 2;        // g: gradients
  int64_t optimizer = 12;  // o: everything the optimizer keeps (master weights, moments)
  int64_t total() const { return param + grad + optimizer; }
  bool operator==(const StateBytes&) const = default;
};

// Mixed-precision Adam as in the ZeRO paper (§3.1): fp16 weights and gradients, fp32 master
// weights, momentum and variance (K = 12): 16 bytes per parameter.
inline constexpr StateBytes kMixedPrecisionAdam{2, 2, 12};
// Megatron-LM's mixed precision keeps fp32 main gradients: 2 + 4 + 12 = 18 bytes per parameter
// (Megatron-LM docs, distributed optimizer: "float16 param, fp32 grads: 18" without sharding).
inline constexpr StateBytes kMegatronMixedPrecisionAdam{2, 4, 12};
// Plain fp32 Adam: fp32 weights and gradients, fp32 momentum and variance: 4 + 4 + 8.
inline constexpr StateBytes kFp32Adam{4, 4, 8};

// "mixed" (16), "megatron" (18), "fp32" (16, all fp32); nullopt for anything else.
std::optional<StateBytes> parse_precision(std::string_view name);
std::string_view precision_names();  // "mixed, megatron, fp32" for error messages

struct ModelStateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

// ceil(count / ranks): elements of one rank's shard of a state split over `ranks`.
int64_t shard_count(int64_t count, int ranks);

// Model-state bytes one rank holds for `params` parameters replicated over `dp` ranks at
// `zero_stage` 0..3 (0 is plain data parallelism). Throws Error on stages outside 0..3 or
// non-positive dp.
ModelStateBytes model_state_bytes(int64_t params, int dp, int zero_stage, StateBytes bytes);

// The largest model whose states fit in `memory_bytes` per GPU (the ZeRO paper's Table 2, model
// states only): `mp` model-parallel ranks (tensor x pipeline) split it evenly, each of `dp`
// data-parallel ranks holds model_state_bytes(ceil(Psi / mp), dp, zero_stage, bytes). Returns
// the largest such Psi, shards' padding counted (0 when not even one parameter fits).
int64_t largest_model_params(double memory_bytes, int dp, int mp, int zero_stage, StateBytes bytes);

// ZeRO-3's working set on top of its shards: the full weights (p bytes each) of the layer being
// computed plus `prefetch_layers` layers gathered ahead, and the full gradient (g bytes each)
// of one layer waiting for its reduce-scatter. `layer_params` is one layer's parameters.
int64_t zero3_gathered_bytes(int64_t layer_params, StateBytes bytes, int prefetch_layers = 1);

}  // namespace dtrain::plan
