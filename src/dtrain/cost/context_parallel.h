// Context parallelism (CP): a sequence of T tokens split over the N ranks of a CP group, each
// holding T/N tokens through the whole model, attention computed across the group by one of
// three algorithms. These are the formulas the engine's CP counters are tested against (bytes
// each rank sends per layer, forward and backward; activation bytes per rank) and that the
// planner prices. docs/planner.md "Context parallelism" works them on an example.
//
// Symbols: N = cp, T = sequence, b = micro-batch, h = hidden, a = heads, g = key/value heads,
// d = h/a (head size), t = TP size, e = bytes per element. A TP rank holds a/t query heads and
// g_t = g/t key/value heads (1 when t > g: each TP rank keeps a copy of one K/V head, as
// planner.cc's per-rank shape does). One rank's K and V for its T/N tokens, its "K/V block":
//   kv_block_bytes = 2 x b x (T/N) x g_t x d x e        (= 2 b (T/N) h/t e without GQA)
//
// ring (Liu et al. 2023 ring attention; Megatron-core's p2p CP), load-balanced: the sequence is
//   cut into 2N chunks of T/(2N) and rank r holds chunks r and 2N-1-r, so every rank does the
//   same causal work. Each hop is ONE message to rank r+1 (received from r-1):
//   forward   N-1 hops, each carrying a K/V block [K|V]: the block received at hop i-1 is sent
//             on at hop i; rank r computes its queries against its own block first, then
//             against the block of rank r-i, merging with the running max and log-sum-exp.
//             (N-1) x kv_block_bytes sent, N-1 steps.
//   backward  the K/V blocks go round again together with their gradient accumulators: hop i
//             (1..N-1) sends [K|V|dK|dV] of the block rank r has just worked on (its dK, dV
//             holding the contributions of every rank it visited, this one's added); after the
//             last block's contribution one more hop sends [dK|dV] alone, which lands at the
//             block's owner: (N-1) hops of K/V and N hops of dK/dV,
//             (N-1) x kv_block_bytes + N x kv_block_bytes at e_g, N steps ((2N-1) blocks when
//             e_g = e). e_g: the gradients' bytes per element (below).
//   Full recompute reruns the layer's forward (its N-1 hops) before the backward; selective
//   recompute adds nothing (blockwise attention never keeps the scores: the backward recomputes
//   each block's probabilities from Q, K and the saved log-sum-exp).
// all-gather (Llama 3, Dubey et al. 2024 §3.3.2): forward one all-gather of [K|V] over the CP
//   group, S = 2 b T g_t d e (the gathered output), (N-1)/N x S sent; the gathered K and V are
//   kept for the backward, whose dK and dV of the whole sequence are reduce-scattered back to
//   their owners: one reduce-scatter of S at e_g. Full recompute gathers once more (its forward
//   rerun).
//   The causal split is the balanced one too (rank r computes its chunks r and 2N-1-r).
// ulysses (Jacobs et al. 2023, DeepSpeed-Ulysses): all-to-alls turn the sequence split into a
//   head split and back: forward 4 all-to-alls (Q, K, V: sequence -> heads; the attention
//   output: heads -> sequence), backward 4 (dO: sequence -> heads; dQ, dK, dV: heads ->
//   sequence). Each all-to-all sends (N-1)/N of the rank's local tensor: Q, O, dQ, dO are
//   b (T/N) (a/t) d elements, K, V, dK, dV b (T/N) g_t d; Q, K, V, O at e, dO, dQ, dK, dV at
//   e_g. Needs a and g divisible by N x t (every
//   rank gets whole heads). Full recompute adds the forward's 4.
//
// Bytes per element on the wire, e and e_g (cp_wire_bytes, the engine's choice): K and V (and
// Ulysses's Q and O) at the precision's element size, 2 under bf16: every product that reads
// them rounds them to bf16 anyway, so the bf16 wire changes no bit of the result. The gradients
// dK, dV (and Ulysses's dO, dQ) at 4 bytes: the ring's dK, dV are partial sums that each hop adds
// to and the all-gather's are summed by a reduce-scatter, which the serial run accumulates in
// fp32; dO feeds the backward's fp32 row sum (dO . O) and dQ, dK, dV the qkv bias gradient, an
// fp32 column sum. Rounding them would make the CP run differ from the serial one. The planner,
// pricing GPU runs that send gradients at the activations' precision, leaves e_g = e.
//
// Activations per rank (per layer, one micro-batch): all three algorithms compute attention
// blockwise (a block pair's scores live only while that pair is computed, the backward recomputes
// them from Q, K and the log-sum-exp), so no s x s term is kept in any recompute mode: every
// per-token tensor of activation_memory.h at T/N tokens as selective recompute keeps them, plus
// the state the algorithm keeps for the backward (cp_attention_state_bytes_per_layer):
//   every algorithm  the log-sum-exp, 4 bytes x b x (a/t) x (T/N)
//   ring             nothing more: the K/V blocks come round again in the backward
//   all-gather       the gathered [K|V] of the whole sequence, N x 2 b (T/N) g_t d elements (the
//                    rank's own block included: the gather's output is one buffer)
//   ulysses          Q, K, V and O split by heads, b (T/N) (2 h/t + 2 g_t d) elements (the same
//                    counts as the sequence split's, over T tokens and a/(tN) heads)
// at the element size elementwise ops read (ew; the engine's mixed precision keeps them fp32).
// One block pair's scores, b (a/t) (T/N)^2 elements (cp_ring_block_bytes), are temporary (the
// planner's temporary memory counts two for the ring, P and dP). Full recompute keeps only the
// layer input; the rerun holds the state above for one layer at a time (the recompute scratch).
// docs/planner.md "Context parallelism" works an example; the engine's measured bytes per rank
// equal these (tests/e2e/context_parallel_memory_test.cc).
//
// Gradients are reduced over DP x CP and ZeRO shards over DP x CP (the parameters are
// replicated over CP): dp_collectives and model_state_bytes with dp x cp ranks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/cost/activation_memory.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/machine/rates.h"

namespace dtrain::plan {

// automatic: choose_cp_algorithm's rule. Names: "auto", "ring", "all-gather", "ulysses".
enum class CpAlgorithm { automatic, ring, all_gather, ulysses };
std::string_view name(CpAlgorithm algo);
std::optional<CpAlgorithm> parse_cp_algorithm(std::string_view text);
inline constexpr std::string_view kCpAlgorithmNames = "ring, all-gather, ulysses, auto";

// One layer's attention as one CP rank (on one TP rank) sees it.
struct CpShape {
  int64_t seq = 0;                     // T: the whole sequence
  int64_t micro_batch = 1;             // b
  int64_t hidden = 0;                  // h
  int64_t heads = 0;                   // a
  int64_t kv_heads = 0;                // g; 0 = heads
  int tp = 1;                          // t
  int cp = 1;                          // N
  int64_t bytes_per_element = 2;       // e: K, V (and Ulysses's Q, O)
  int64_t grad_bytes_per_element = 0;  // e_g: dK, dV (and Ulysses's dO, dQ); 0 = e
  int64_t kv_heads_or_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t grad_bytes() const {
    return grad_bytes_per_element > 0 ? grad_bytes_per_element : bytes_per_element;
  }
};

// The engine's CP wire for a run's precision: {e, e_g} = {2, 4} under bf16, {4, 4} under fp32
// (the header comment says why the gradients stay fp32).
struct CpWireBytes {
  int64_t activations = 4;  // e
  int64_t gradients = 4;    // e_g
};
CpWireBytes cp_wire_bytes(Precision precision);
// `s` with the engine's wire for `precision`.
CpShape with_engine_wire(CpShape s, Precision precision);

// g_t: key/value heads per TP rank (1 when tp exceeds them: a copy of one head).
int64_t cp_kv_heads_per_tp_rank(const CpShape& s);
// b x T/N: the tokens of one micro-batch a CP rank holds.
int64_t cp_local_tokens(const CpShape& s);
// 2 b (T/N) g_t d e: one rank's K and V.
double cp_kv_block_bytes(const CpShape& s);
// 2 b (T/N) g_t d e_g: one rank's dK and dV.
double cp_dkv_block_bytes(const CpShape& s);

// Empty when `algo` can run `s`; else why not, naming the flags. Every algorithm needs T
// divisible by N; ring (and all-gather, which computes the same balanced causal split) T
// divisible by 2N; ulysses --heads and --kv-heads divisible by N x t.
std::string cp_layout_error(const CpShape& s, CpAlgorithm algo);
bool cp_layout_ok(const CpShape& s, CpAlgorithm algo);  // cp_layout_error's verdict, no words

// What one rank sends in one pass of one layer for one micro-batch.
struct CpPassTraffic {
  int64_t messages = 0;  // ring hops, or collective calls
  int64_t steps = 0;     // communication rounds (a ring hop is one; a collective its own)
  double bytes_sent = 0;
  double bytes_received = 0;
};
struct CpLayerTraffic {
  CpPassTraffic forward;
  CpPassTraffic backward;  // recompute's rerun of the forward included
  double bytes_sent() const { return forward.bytes_sent + backward.bytes_sent; }
};

// Per rank, per layer, per micro-batch, as the header comment defines each algorithm (the
// collectives on their ring / pairwise algorithms). cp = 1: nothing.
CpLayerTraffic cp_ring_traffic_per_layer(const CpShape& s, Recompute recompute);
CpLayerTraffic cp_all_gather_traffic_per_layer(const CpShape& s, Recompute recompute);
CpLayerTraffic cp_ulysses_traffic_per_layer(const CpShape& s, Recompute recompute);
CpLayerTraffic cp_traffic_per_layer(const CpShape& s, CpAlgorithm algo, Recompute recompute);

// The collectives of all-gather and ulysses for one layer and one micro-batch (empty for ring,
// whose hops are sends): what the planner prices on the CP group's link, `overlaps_forward`
// marking the forward's calls.
std::vector<CollectiveCall> cp_collectives_per_layer(const CpShape& s, CpAlgorithm algo,
                                                     Recompute recompute);

// Activation bytes one layer keeps per CP rank for one micro-batch; `whole` is the layer at the
// whole sequence (its seq is T) and cp = 1 is activation_bytes_per_layer(whole).
double cp_activation_bytes_per_layer(const ActivationShape& whole, int cp, CpAlgorithm algo);
// The algorithm's own kept state of one layer (log-sum-exp, gathered K/V or head-split tensors),
// whatever the recompute mode (full recompute holds it during a layer's rerun only); 0 at cp = 1.
double cp_attention_state_bytes_per_layer(const ActivationShape& whole, int cp, CpAlgorithm algo);
// One block pair's scores in the ring: b (a/t) (T/N)^2 elements of the scores' element size.
double cp_ring_block_bytes(const ActivationShape& whole, int cp);

// Causal attention work: the (query, key) pairs with key <= query that `rank`'s queries
// attend to, T tokens over N ranks. contiguous: rank r holds tokens [rT/N, (r+1)T/N);
// balanced: chunks r and 2N-1-r of 2N (T divisible by 2N). Balanced gives every rank
// 2N C^2 + C pairs (C = T/(2N)); contiguous's busiest rank (N-1) has (N-1) L^2 + L(L+1)/2
// (L = T/N), over the mean T(T+1)/(2N) tending to 2 - 1/N as T grows.
enum class CpSplit { contiguous, balanced };
std::string_view name(CpSplit split);  // "contiguous", "balanced"
int64_t causal_attention_pairs(int64_t seq, int cp, int rank, CpSplit split);
// Busiest rank's pairs over the mean rank's, exactly.
double causal_work_imbalance(int64_t seq, int cp, CpSplit split);
// In blocks of (T/N)^2, a diagonal block counted half: rank r does r + 1/2, the mean N/2, the
// busiest N - 1/2: (N - 1/2) / (N/2) = 2 - 1/N.
double cp_contiguous_imbalance_limit(int cp);

// The automatic choice, in this order:
//   1. ulysses, when its constraint holds and its bytes per layer (forward + backward) are the
//      fewest of the algorithms that can run;
//   2. else ring, when it can run and each of its hops hides behind one block's attention
//      compute (`ring_hidden`, from the clock: hop seconds <= block seconds, both passes);
//   3. else all-gather (one gather of K/V per layer: fewer bytes than the ring's, which sends
//      its K/V blocks again in the backward), when it can run (it needs what the ring needs);
//   4. else ulysses.
// Throws Error (cp_layout_error's) when none can run.
struct CpChoice {
  CpAlgorithm algorithm = CpAlgorithm::ring;
  std::string why;
};
// `explain`: fill in `why` (a search that decides thousands of layouts leaves it out).
CpChoice choose_cp_algorithm(const CpShape& s, Recompute recompute, bool ring_hidden,
                             bool explain = true);

}  // namespace dtrain::plan
