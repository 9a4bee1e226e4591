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
#include <vector>

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
std::string_view precision_names();  // "mixed or bf16, megatron, fp32" for error messages

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

// The units one pipeline chunk computes with, in forward order (parameter counts).
struct ChunkUnitCounts {
  bool embedding = false;       // runs the embedding (first virtual stage)
  bool head = false;            // runs the final LayerNorm and the tied LM head (last one)
  int64_t embeddings = 0;       // the embedding unit: wte and wpe, or the head stage's tied wte
  std::vector<int64_t> blocks;  // the chunk's blocks, first to last
  int64_t final_norm = 0;       // the final LayerNorm, when `head`
};

// Bytes per parameter of a unit's weights while a rank computes with them: `gathered`, the full
// copy ZeRO-3 all-gathers (0 below stage 3: the weights are at rest); `working`, mixed
// precision's fp32 copy made from the bf16 weights (0 in fp32, which computes on the gathered
// copy itself).
struct UnitWeightBytes {
  int64_t gathered = 0;
  int64_t working = 0;
};

// The most bytes of unit weights a chunk's forward or backward holds at once above the weights
// at rest, in the order a stage acquires them: the forward holds the embedding unit throughout
// (when it runs the embedding or the head), gathers the next unit ahead of the running one, and
// the backward takes the head's units, then the blocks last to first, the next one gathered
// ahead; the embedding's own backward reads no weights. Under mixed precision a unit's gathered
// bf16 copy and the fp32 working copy made from it are held together until the conversion ends
// (gathered + working bytes per parameter; with pp 2 and one block per stage that moment, the
// block converted while the embeddings are held, is the peak). One rank's figure is the largest
// over its chunks.
int64_t unit_weights_peak_bytes(const ChunkUnitCounts& chunk, UnitWeightBytes bytes);

}  // namespace dtrain::plan
