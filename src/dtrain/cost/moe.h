// Mixture-of-experts shapes and their formulas: which layers route, parameters total and active
// per token, the parameters one rank holds under expert parallelism (EP), the all-to-all bytes
// of a routed layer's dispatch and combine, and the activation bytes of a routed layer.
//
// An MoE layer replaces the dense MLP with a router (an h x E linear) and E expert MLPs of
// intermediate size f_e (SwiGLU for the llama family: 3 h f_e weights; GPT: 2 h f_e + f_e + h),
// plus S shared experts every token goes through. Each token goes to its top-k experts.
// Layer i (0-based) routes when i >= first_dense and (i - first_dense) % every == 0.
//
// Expert parallelism is carved from data parallelism (Megatron-core, DeepSpeed-MoE): the dp
// ranks of a stage form dp / ep groups of ep ranks; an EP group holds every expert once, E / ep
// per rank (experts e in [r E/ep, (r+1) E/ep) on EP rank r). Expert gradients are reduced (and
// ZeRO shards expert state) over the expert-data-parallel group, the dp / ep ranks that hold the
// same experts; dense parameters over the whole DP group. Under TP every TP rank holds a 1/tp
// slice of each of its experts (expert TP = TP) and dispatches the same whole rows: the expert
// MLP is a TP-split MLP whose all-reduces run on the experts' rows (moe_tp_collectives_per_layer;
// full recompute's rerun: moe_tp_rerun_collectives_per_layer; the planner's step time still
// prices a routed layer's TP traffic as a dense layer's).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dtrain/core/recompute.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/cost/memory_model.h"

namespace dtrain::plan {

struct ModelShape;

struct MoeShape {
  int64_t experts = 0;         // E routed experts; 0 = a dense model
  int64_t top_k = 0;           // k experts per token
  int64_t every = 1;           // route every n-th layer (after the dense ones)
  int64_t first_dense = 0;     // the first layers keep a dense MLP (DeepSeek's first_k_dense)
  int64_t shared_experts = 0;  // S experts every token goes through
  int64_t expert_ffn = 0;      // f_e, each expert's intermediate size; 0 = the dense f
  bool enabled() const { return experts > 0; }
};

// Multi-head latent attention (DeepSeek-V2/V3): queries through a rank-q_lora bottleneck (h x
// q_lora, RMSNorm, q_lora x a (d_nope + d_rope)), keys and values through a rank-kv_lora one
// with one decoupled RoPE key shared by all heads (h x (kv_lora + d_rope), RMSNorm, kv_lora x
// a (d_nope + d_v)), the output projection a d_v x h. No biases.
struct MlaShape {
  int64_t q_lora_rank = 0;  // 0 = queries projected directly (h x a (d_nope + d_rope))
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool enabled() const { return kv_lora_rank > 0; }
};

// Attention weights of one layer (matrix multiplies) and its norms' weights (MLA's two latent
// RMSNorms; the layer's own two norms are counted with the layer).
int64_t mla_matmul_param_count(const ModelShape& m);
int64_t mla_norm_param_count(const ModelShape& m);
// Widths of the attention products per token: Q K^T runs over a x d_qk, scores x V over a x d_v
// (both h for standard attention; MLA's 128 x 192 and 128 x 128 for DeepSeek-V3).
int64_t attention_qk_width(const ModelShape& m);
int64_t attention_v_width(const ModelShape& m);

// Whether layer i routes, and how many of layers [first, first + count) do.
bool is_moe_layer(const ModelShape& m, int64_t layer);
int64_t moe_layers_in(const ModelShape& m, int64_t first, int64_t count);
int64_t moe_layer_count(const ModelShape& m);

// One expert MLP's parameters (weights and, for GPT, biases), and its matrix-multiply weights.
int64_t expert_param_count(const ModelShape& m);
int64_t expert_matmul_param_count(const ModelShape& m);
// The router: h x E weights.
int64_t router_param_count(const ModelShape& m);
// A routed layer: attention, norms, router, E routed and S shared experts.
int64_t moe_layer_param_count(const ModelShape& m);
// A routed layer's matrix-multiply weights one token passes through: attention, router, k routed
// and S shared experts (what costs 2 FLOPs per token each).
int64_t moe_layer_active_matmul_param_count(const ModelShape& m);
// Parameters one token's forward touches: everything but the E - k routed experts it skips in
// each routed layer (embeddings and head counted).
int64_t active_param_count(const ModelShape& m);

// Routed-expert parameters in `moe_layers` routed layers on one rank: E / ep experts each, split
// over tp (ceil per expert, as the shard of any TP-split tensor).
int64_t rank_routed_expert_params(const ModelShape& m, int64_t moe_layers, int ep, int tp);
// The same for all E experts (what the stage holds without EP, per TP rank).
inline int64_t stage_routed_expert_params(const ModelShape& m, int64_t moe_layers, int tp) {
  return rank_routed_expert_params(m, moe_layers, 1, tp);
}

// One rank's model state under EP (and ZeRO `zero_stage`): its `dense_params` (everything but
// the routed experts) sharded over the `data_ranks` of its data-parallel group (dp x cp), its
// `expert_params` (its E / ep experts of each routed layer) over the data_ranks / ep ranks of
// its expert-data-parallel group, each part by model_state_bytes (ceil per group). ep = 1:
// model_state_bytes of the sum.
ModelStateBytes ep_model_state_bytes(int64_t dense_params, int64_t expert_params, int data_ranks,
                                     int ep, int zero_stage, StateBytes bytes);

// What one rank sends and receives in one dispatch all-to-all of one routed layer, one
// micro-batch. `tokens` is the rank's tokens entering the layer (b s), each sent to k experts,
// `hidden` wide at `bytes_per_element`. `tokens_per_expert` is the routing: how many of all
// tokens the EP group routed to each expert (E entries; empty = uniform, every expert the same);
// each rank's tokens are assumed to follow the group's shares. Experts live on EP rank e / (E /
// ep). Rank r sends to q: tokens k h e share_q (share_q: rank q's experts' fraction of the
// routed tokens), nothing to itself; it receives (ep - 1) tokens k h e share_r.
// Uniform: share = 1/ep, so each rank sends and receives tokens k h e (ep - 1) / ep.
// The combine sends the same bytes back (sent and received swapped); the backward runs a
// combine-shaped all-to-all for the dispatch's gradient and a dispatch-shaped one for the
// combine's.
struct MoeA2aRank {
  std::vector<double> sent;      // bytes to each EP rank (0 to itself)
  std::vector<double> received;  // bytes from each EP rank
  double sent_total() const;
  double received_total() const;
};
struct MoeDispatch {
  double tokens = 0;  // per rank, per micro-batch
  int64_t hidden = 0;
  int64_t top_k = 0;
  int64_t experts = 0;
  int ep = 1;
  int64_t bytes_per_element = 2;
  std::vector<double> tokens_per_expert;  // empty = uniform
};
// Throws Error when the routing has the wrong length or a negative or non-finite entry, or
// sums to zero.
MoeA2aRank dispatch_bytes(const MoeDispatch& d, int rank);
// The combine of the same routing: dispatch_bytes with sent and received swapped.
MoeA2aRank combine_bytes(const MoeDispatch& d, int rank);
// The exact bytes of one EP rank's exchanges in one routed layer, one micro-batch, from the
// routing every rank of the EP group measured (what the engine's counters are set beside):
// kept[r][e] = the rows EP rank r's tokens sent expert e (after capacity: a dropped copy moves
// nowhere), E = kept[r].size() experts, expert e on EP rank e / (E / ep). In the dispatch rank
// r sends kept[r][e] rows of `hidden` elements to each other rank's experts e and receives
// kept[q][e] rows from each other rank q for its own experts e; rows for its own experts stay.
// The combine moves the same rows back (sent and received swapped). The backward moves the
// outputs' gradients as the dispatch (the combine's gradient) and the inputs' gradients as the
// combine (the dispatch's gradient). Throws Error unless kept has ep rows of E entries, ep
// dividing E.
MoeA2aRank ep_dispatch_bytes(std::span<const std::vector<int64_t>> kept, int64_t hidden,
                             int64_t bytes_per_element, int rank);
MoeA2aRank ep_combine_bytes(std::span<const std::vector<int64_t>> kept, int64_t hidden,
                            int64_t bytes_per_element, int rank);
// The forward exchanges (the row counts, the dispatch, the combine) a routed layer runs per
// micro-batch: 1, or 2 under full recompute, whose rerun of the block's forward redoes them (as
// Megatron's recomputed forward re-runs its token dispatcher) instead of keeping the received
// rows past the forward; the backward's two (the combine's and the dispatch's gradients) run
// once either way. Selective recompute reruns attention only.
int ep_forward_exchanges(Recompute recompute);
// The exchanges of a routed layer under EP, and the bytes per element of their rows on the wire:
// 4 (fp32), except the dispatch forward's under bf16, 2: the experts' first linear rounds those
// rows to bf16 as its operand in the run without EP too, so sending them rounded changes nothing;
// the expert outputs, the gradients and the combine's gradient dy (whose sum is proj's bias
// gradient, fp32 in the serial bf16 run) stay fp32.
enum class EpExchange { dispatch_forward, combine_forward, combine_backward, dispatch_backward };
int64_t ep_row_wire_bytes(EpExchange exchange, bool bf16);

// Before each dispatch the ranks exchange their row counts: E / ep int64 to (and from) every
// other rank, so (ep - 1) E / ep * 8 bytes each way per exchange.
double ep_counts_bytes(int64_t experts, int ep);

// Under context parallelism the CP ranks of a micro-batch route its tokens together
// (model/cp_route_group.h): per routed block and forward pass (ep_forward_exchanges of them per
// micro-batch) each rank contributes its router choices per (run, expert) and its E probability
// sums, 8-byte words, to one all-gather over the CP group. A run is a stretch of consecutive
// positions of one sequence: `runs_per_sequence` 2 under the balanced split (chunks r and
// 2cp-1-r), 1 contiguous. Returns that all-gather's S (nccl-tests' output size: cp parts of
// (micro_batch x runs_per_sequence + 1) x E words), for collective_traffic.
double cp_moe_routing_gather_bytes(int64_t micro_batch, int64_t runs_per_sequence, int64_t experts,
                                   int cp);

// Tensor parallelism's collectives in one routed block for one micro-batch of b sequences of s
// tokens (expert TP: each expert's fc column-parallel and proj row-parallel across the TP group,
// the router replicated), when this rank's experts computed `expert_rows` rows (the routed
// copies kept; under EP the rows received). The attention half's f and g as a dense block's; the
// experts' g all-reduces their outputs (expert_rows x h) forward and their f' their inputs'
// gradients backward. Sequence parallel: the LN output is all-gathered before the router (and
// the output gradient in backward, g's conjugate) as a dense block's, and no reduce-scatter
// follows: the combined output is whole on every rank, which keeps its own rows. Full
// recompute's rerun is counted apart (moe_tp_rerun_collectives_per_layer).
std::vector<CollectiveCall> moe_tp_collectives_per_layer(int64_t micro_batch, int64_t seq,
                                                         int64_t hidden, int64_t bytes_per_element,
                                                         bool sequence_parallel,
                                                         int64_t expert_rows);
// What full recompute's rerun of a routed block's forward repeats (one micro-batch): the forward
// half of moe_tp_collectives_per_layer, attention's g (under SP its all-gather and
// reduce-scatter, and the LN output's all-gather before the router) and the experts' g on
// `expert_rows` rows. The rerun routes the same rows as the first forward (the same inputs and
// weights, the same tie-breaking), so expert_rows is the forward's count.
std::vector<CollectiveCall> moe_tp_rerun_collectives_per_layer(int64_t micro_batch, int64_t seq,
                                                               int64_t hidden,
                                                               int64_t bytes_per_element,
                                                               bool sequence_parallel,
                                                               int64_t expert_rows);

// The EP rank whose dispatch moves the most bytes (sent or received): whose all-to-all the
// others wait for.
int busiest_ep_rank(const MoeDispatch& d);
// Routed tokens the busiest EP rank's experts compute per micro-batch over tokens x k (1 when
// uniform; ep x the largest rank share otherwise).
double expert_load_factor(const MoeDispatch& d);

// Activation bytes a routed layer keeps beyond a dense layer's attention part: for one micro-
// batch of `tokens` tokens on one TP rank (elements of `e` bytes): the router's probabilities
// (fp32, tokens x E), the experts' inputs and outputs (k tokens x h each; the outputs for the
// gates' gradient), each routed copy's intermediate tensors (SwiGLU 3 f_e / tp, GELU 2 f_e / tp),
// and the shared experts' (S times the same per token). Full recompute keeps none of them.
double moe_mlp_activation_bytes(const ModelShape& m, double tokens, int64_t e, int tp,
                                double load_factor = 1);
// The dense MLP's part of activation_bytes_per_layer, which a routed layer replaces:
// ((gated ? 2 : 1) ew + e) f tokens / tp.
double dense_mlp_activation_bytes(const ModelShape& m, double tokens, int64_t e, int64_t ew,
                                  int tp);

// Throws Error naming the flag (--experts, --top-k, --moe-every, --first-dense,
// --shared-experts, --expert-ffn, --tokens-per-expert) when an MoE shape is inconsistent.
void validate_moe(const ModelShape& m);

}  // namespace dtrain::plan
