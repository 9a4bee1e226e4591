// The clock of dtrain's own engine on CPU ranks: seconds of one training step, phase by phase,
// from the rates `dtrain calibrate --compute` measured on the ranks' machine (measured_rates.h).
// It mirrors the kernels the engine runs (model/gpt.cc, model/ops, parallel/, optim/adamw.cc)
// call by call; the collectives' bytes come from comm_model.h and the pipeline's step from the
// schedule simulated on each virtual stage's times (pipeline_simulation.h), as the GPU clock's
// do (time_model.h, planner.cc). Context parallelism (blockwise attention and its exchanges) and
// the MoE layer (router, experts, EP's all-to-alls) are priced as the engine runs them.
// docs/clock.md, "The engine's clock", lists the operations, what is assumed and where it misses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/clock/time_model.h"
#include "dtrain/comm/collective_kind.h"
#include "dtrain/core/recompute.h"
#include "dtrain/cost/context_parallel.h"
#include "dtrain/cost/model_presets.h"
#include "dtrain/cost/pipeline_model.h"
#include "dtrain/machine/hardware.h"
#include "dtrain/machine/measured_rates.h"

namespace dtrain::plan {

// One layout of the engine, as far as its time goes.
struct EngineClockInput {
  ModelShape model;  // hidden C, heads NH, layers L, vocab V, seq T (GPT, no dropout)
  int dp = 1, tp = 1, pp = 1;
  int chunks = 1;  // model chunks per pipeline rank (interleaved)
  int zero_stage = 0;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int64_t micro_batch = 1;  // B rows per micro-batch
  int microbatches = 1;     // M per DP rank
  Precision precision = Precision::fp32;
  int threads = 1;  // compute threads per rank (--threads)
  // The parameters of the busiest stage on one TP rank (before ZeRO sharding), and the DP
  // collectives' pieces (gradient buckets; ZeRO-3's units) of that stage.
  int64_t stage_params = 0;
  int64_t dp_pieces = 1;
  bool inter_node_dp = false;  // the DP group spans nodes (its collectives on inter_node)
  bool inter_node_tp = false;  // the TP group spans nodes
  bool inter_node_pp = false;  // neighbouring stages sit on different nodes (sends on inter_node)
  // The DP all-reduce's algorithm (ZeRO 0; the engine picks direct where the group shares
  // memory); reduce-scatters and gathers run the ring.
  comm::Algorithm dp_algorithm = comm::Algorithm::ring;
  // --dp-all-reduce hierarchical (ZeRO 0 across nodes): a reduce-scatter inside each node, an
  // all-reduce of the shard across the nodes, an all-gather inside each node.
  bool dp_hierarchical = false;
  // The DP group's ranks on each node (0: unknown, taken as the whole group on one node). A flat
  // ring over a group spread over nodes crosses each node's link once each way (the group's ranks
  // on a node are neighbours in its ring), so one flow per DP group crosses a node link.
  int dp_ranks_per_node = 0;
  // Ranks on one node (their last-level caches shared among them); 0: every rank on one node.
  // engine_clock fills it from the cluster's gpus_per_node when 0.
  int ranks_per_node = 0;
  // Two effects calibrate measures and the clock can price, both off by default: on the
  // development set (scripts/clock-dev-set, a quiet machine) each made the step predictions
  // worse, so neither is applied until it is modelled better (docs/clock.md, "Off by default").
  // price_cache_residency: products between their warm and cold samples by where their operands
  // live (cache_model.h); off, every product is priced on operands from memory.
  bool price_cache_residency = false;
  // price_partner_waits: oversubscribed_wait_s added to each collective whose threads outnumber
  // the cores; off, collectives cost their idle-machine rates.
  bool price_partner_waits = false;
  // Context parallelism (parallel/context_parallel.h): each of the cp ranks holds seq / cp tokens
  // of every sequence through the whole model, attention runs across them by cp_algorithm
  // (ring and all-gather on the cp_split token split; ulysses always contiguous). The parameters
  // are replicated over CP, so the gradient syncs and ZeRO run over dp x cp ranks.
  int cp = 1;
  bool inter_node_cp = false;  // the CP group spans nodes
  CpAlgorithm cp_algorithm = CpAlgorithm::ring;
  CpSplit cp_split = CpSplit::balanced;
  // Mixture of experts (model.moe; the engine's routed MLP: E experts of the dense MLP's shape,
  // no TP): ep ranks of the DP group hold E / ep experts each. tokens_per_expert: the routing's
  // share per expert (E entries, cost/moe.h's MoeDispatch); empty is uniform top-k routing.
  int ep = 1;
  std::vector<double> tokens_per_expert;
  // A run's own routing, to price after it ran (train's "given the routing" column): one entry
  // per routed block, micro-batch and EP group, the rows each of the E experts computed. The
  // MoE MLP is then priced as the mean over the entries, each on its own rows (every block
  // waits at its exchanges for its busiest rank); empty: tokens_per_expert, or uniform.
  std::vector<std::vector<double>> block_routings;
  // The routed experts' parameters within stage_params (E / ep per routed layer): at ep > 1
  // their gradients are reduced over the expert-data-parallel group (dp / ep ranks), the rest
  // over DP.
  int64_t stage_expert_params = 0;
  int data_ranks() const { return dp * cp; }       // the group the gradients are reduced over
  int ranks() const { return dp * cp * tp * pp; }  // every rank of the layout
};

// Seconds of one step on the critical rank, by phase. forward and backward are compute only
// (the DP communication thread's slowdown of backward included), tp_comm the TP collectives on
// the critical path, pipeline_wait the schedule's bubble and the sends waited for, exposed_dp
// what of the DP/ZeRO syncs does not fit behind compute, optimizer the gradient norm and AdamW.
// step is their sum.
struct EnginePhases {
  double forward_s = 0, backward_s = 0, tp_comm_s = 0, pipeline_wait_s = 0, exposed_dp_s = 0;
  double optimizer_s = 0, step_s = 0;
};

struct EngineClock {
  EnginePhases phases;
  PassTimes stage;  // per micro-batch on the busiest stage, compute only (stretched)
  double tp_forward_s = 0, tp_backward_s = 0;  // TP collectives per micro-batch
  double send_s = 0;                           // one pipeline send of one micro-batch
  double dp_comm_s = 0;                        // every DP/ZeRO collective of the step
  double stretch = 1;  // oversubscription: compute seconds multiplied by this
  // The simulated schedule on the critical (busiest) rank: ideal its compute, TP collectives
  // and sends, bubble the rest of its wait; and the time its own sends hold it.
  BubbleEstimate bubble;
  double pipeline_sends_s = 0;
  // CP's and EP's exchanges of the step on the critical rank, inside forward and backward (the
  // engine runs them inside its attention and MoE layers), stretched as the compute around them:
  // cp_s what the ring's overlap leaves exposed (all of all-gather's and ulysses'), cp_total_s
  // every exchange; ep_s the counts, dispatch and combine all-to-alls.
  double cp_s = 0, cp_total_s = 0, ep_s = 0;
};

// Bytes one rank touches between two uses of a weight: one pass over its stage, i.e. the
// stage's weights and weight gradients (fp32) and one micro-batch's kept activations through
// its blocks (cache_model.h's pass_bytes).
double engine_pass_bytes(const EngineClockInput& in);
// The rank's cache bytes (cache_model.h's rank_cache_bytes) for this layout on `r`'s machine.
double engine_cache_bytes(const EngineClockInput& in, const MeasuredRates& r);

// Compute of one transformer block (forward, B with any recompute, W) for one micro-batch on
// one TP rank, collectives excluded (with CP: the blockwise attention's compute, its exchanges
// excluded; a routed MLP is not in it: engine_block_seconds).
PassTimes engine_layer_seconds(const EngineClockInput& in, const MeasuredRates& r);
// The mean block of the busiest stage for one micro-batch with what runs inside the engine's
// block besides compute: CP's attention exchanges (engine_cp_attention_seconds) and, for a
// routed MLP (engine_moe_mlp_seconds, EP's exchanges in), the stage's dense and routed blocks
// averaged (the stage holding the most routed layers). Without CP or MoE: engine_layer_seconds.
PassTimes engine_block_seconds(const EngineClockInput& in, const Cluster& c);

// Context parallelism's attention on the critical CP rank for one micro-batch, as
// parallel/context_parallel.cc runs it. Blockwise attention (model/ops/blockwise_attention.cc)
// computes every (query block, key block) pair that has any visible key in full, one (row, head)
// pair after another on one thread: ring and all-gather compute cp blocks of (T/cp)^2 scores
// over NH_local heads on every rank (balanced: every block pair has visible keys; contiguous:
// the last rank's cp blocks are the busiest), ulysses cp (cp + 1) / 2 visible blocks over
// NH_local / cp heads. Exchanges: the ring's forward hops each overlapped with one block's
// compute (isend/irecv, waited after the block), its backward hops blocking; all-gather's gather
// and reduce-scatter, ulysses' all-to-alls, on the critical path. Forward and backward seconds,
// and the exchanges' share of them (comm_*_s).
struct CpAttention {
  double forward_s = 0, backward_s = 0;
  double comm_forward_s = 0, comm_backward_s = 0;  // the exchanges' exposed seconds in them
  double comm_total_s = 0;                         // every exchange, hidden or not
  int visible_blocks = 0;                          // block pairs computed by the critical rank
};
CpAttention engine_cp_attention_seconds(const EngineClockInput& in, const Cluster& c);

// A routed MLP on the critical rank for one micro-batch of B x T / cp tokens (model/ops/moe.cc,
// model/moe_dispatch.cc): the router's product and softmax/top-k, the rows gathered, each
// expert's two products on its rows (rows_e = ep x tokens x k x share_e for the busiest EP
// rank's experts; uniform routing: tokens x k / (E / ep)), GELU, the gated combine; backward the
// same in reverse with the weight gradients; under EP the counts exchange and the dispatch and
// combine all-to-all-v forward and backward (cost/moe.h's dispatch_bytes of the busiest rank).
struct MoeMlp {
  PassTimes pass;                                  // the MLP's part of a block, exchanges in
  double comm_forward_s = 0, comm_backward_s = 0;  // EP's exchanges within pass
  double busiest_rows = 0;                         // expert rows the critical rank computes
  void add_scaled(const MoeMlp& o, double w);
};
MoeMlp engine_moe_mlp_seconds(const EngineClockInput& in, const Cluster& c);
// An all-to-all (pairwise) in which this rank sends and receives at most `bytes` in all, on
// `ranks` ranks: the measured all_to_all rate when calibrate measured one, else ranks - 1
// exchanges of bytes / (ranks - 1) at the measured send_recv rate, else the link formula.
double engine_all_to_all_seconds(const Cluster& c, double bytes, int ranks, bool inter_node);
// The head (final LayerNorm, logits, cross-entropy, vocabulary-parallel with TP) and the
// embedding (token + position rows; vocabulary-parallel with TP), one micro-batch.
PassTimes engine_head_seconds(const EngineClockInput& in, const MeasuredRates& r);
PassTimes engine_embedding_seconds(const EngineClockInput& in, const MeasuredRates& r);
// The step's optimizer on this rank: the global norm's sum of squares over `grad_elements`
// owned gradients, AdamW over `params` owned parameters (plus, under bf16, the new weights
// rounded to bf16).
double engine_optimizer_seconds(double params, double grad_elements, Precision precision,
                                const MeasuredRates& r);

// One collective of `bytes` (S as collective_cost.h defines it) on `ranks` ranks with `algo`:
// the measured rate of that collective, algorithm and link when calibrate measured one
// (latency + bytes sent per rank / bandwidth), else the link formula (comm_model.h).
// `precision` is the elements' type (bf16 reduces at its own measured rate).
double engine_collective_seconds(const Cluster& c, comm::CollectiveOp op, comm::Algorithm algo,
                                 double bytes, int ranks, bool inter_node,
                                 Precision precision = Precision::fp32);
double engine_send_seconds(const Cluster& c, double bytes, bool inter_node);

// TP collectives of one micro-batch through the stage's blocks (f and g, SP's gathers and
// scatters and re-gathers, full recompute's reruns), the vocabulary's reductions on the end
// stages: {forward seconds, backward seconds}.
struct TpSeconds {
  double forward_s = 0, backward_s = 0;
};
TpSeconds engine_tp_seconds(const EngineClockInput& in, const Cluster& c, bool embedding,
                            bool head);

// One DP/ZeRO collective of the layout (ring or in.dp_algorithm; `bytes` as collective_cost.h
// defines S) on the DP group. Inside a node: engine_collective_seconds. Across nodes, a flat
// ring is priced on the inter-node link with the bandwidth of one flow: the file's inter-node
// bandwidth is per rank with every rank of a node sending across at once (calibrate's pairs all
// at once), so one flow gets that times the ranks of a node sharing the link; the node's DP
// groups each put one flow on it, so one flow gets the per-rank figure times dp_ranks_per_node
// (no more than the intra-node link, which the ring's other hops take). Hierarchical: the
// intra-node reduce-scatter and all-gather on dp_ranks_per_node ranks inside the node, the
// shard's ring all-reduce across the nodes at the per-rank figure (every rank of the node sends
// its shard across at once).
double engine_dp_collective_seconds(const EngineClockInput& in, const Cluster& c,
                                    comm::CollectiveOp op, comm::Algorithm algo, double bytes);

// A collective's wait for its partner beyond its idle-machine time: the measured
// oversubscribed_wait_s when `busy_threads` threads need the machine's cores at once (more than
// it has), else 0. DP/ZeRO collectives count the ranks' compute threads only while compute runs
// beside them (a compute thread waiting for one gives its core up), their communication threads
// always. The engine's waits spin a little, then yield: a partner that is off its core
// is waited for until the scheduler runs it.
double partner_wait_seconds(const MeasuredRates& r, int busy_threads);

// ZeRO-3 on the DP communication thread, as parallel/pipeline_executor.cc and
// data_parallel_hooks.cc drive it: one FIFO queue of gathers and reduce-scatters beside the
// compute thread, each unit gathered one unit ahead (its gather queued when the unit before it
// starts computing), the compute thread waiting for a unit's gather before it runs it, and each
// unit's gradient reduce-scattered when its backward ends. Units: the embeddings (wte, wpe; the
// LM head's tied wte too), each block, the final LayerNorm (with the head's compute).
struct Zero3Unit {
  double gather_s = 0, reduce_scatter_s = 0;  // its collectives on an idle machine
  double forward_s = 0, backward_s = 0;       // compute (and TP collectives) of one micro-batch
};
struct Zero3Stage {
  bool embedding = false, head = false;  // the stage runs the embedding / the head
  // A pipeline's end stages hold the tied wte as a bucket of its own, reduced once after the
  // step (finalize_grads), not after each backward.
  bool embeddings_deferred = false;
  int blocks = 0;
  Zero3Unit embeddings, block, final_norm;
};
enum class CommStepKind { gather, reduce_scatter, wait, compute };
struct CommStep {
  CommStepKind kind = CommStepKind::compute;
  int unit = 0;  // kZero3Embeddings, kZero3FinalNorm or kZero3FirstBlock + l
  double seconds = 0;
};
inline constexpr int kZero3Embeddings = 0, kZero3FinalNorm = 1, kZero3FirstBlock = 2;
// The compute thread's and the communication thread's steps of a step's `microbatches` forward
// and backward passes, one after the other, in the executor's order.
std::vector<CommStep> zero3_steps(const Zero3Stage& s, int microbatches);
// Runs the steps: a collective starts when it is queued and the communication thread is free;
// compute waits for the gather it needs; the step ends when both are done. span = the step's
// length, compute = its compute, comm = the communication thread's busy time; span - compute is
// what the syncs leave exposed.
struct CommTimeline {
  double span_s = 0, compute_s = 0, comm_s = 0;
};
// `waits`: what each collective adds for its partner (partner_wait_seconds) when compute runs
// beside it, and when the compute thread is waiting (for a gather, or done).
struct PartnerWaits {
  double beside_compute_s = 0, alone_s = 0;
};
CommTimeline run_comm_timeline(const std::vector<CommStep>& steps, PartnerWaits waits = {});

// The engine's parameters of one transformer block on one TP rank, as Megatron cuts it: the
// column- and row-parallel weights and the column-parallel biases split, the LayerNorms and the
// two biases added after g whole (Llama: q, o, gate, up and down split, K and V over the K/V
// heads or, with more TP ranks than them, a copy of one head; the two RMSNorms whole, no biases).
int64_t engine_layer_param_count(const ModelShape& m, int tp);
// A routed block on one rank: the dense block less its MLP (GPT's 8C^2 + 5C, Llama's 3 C F), the
// router (E C, whole) and the E / ep experts it holds, each an MLP of the dense shape cut over tp
// as the dense MLP is; and the experts' part alone.
int64_t engine_moe_layer_param_count(const ModelShape& m, int ep, int tp = 1);
int64_t engine_moe_expert_param_count(const ModelShape& m, int ep, int tp = 1);

// Oversubscription: `ranks` x `threads` compute threads on `cores` cores. The rates were measured
// on an otherwise idle machine; when the threads exceed the cores every rank's compute runs at
// cores / (ranks x threads) of that speed (the step cannot be shorter than all ranks' core-time
// over the cores). 1 when they fit, or when cores is unknown (0).
double oversubscription(int ranks, int threads, int cores);

// What the DP communication thread leaves on the critical path: `comm_s` of collectives whose
// last piece takes `last_piece_s`, overlapped with `window_s` of compute that runs
// `interference` times slower while the thread communicates. exposed: what does not fit
// (exposed_time); slowdown: the overlapped compute's extra seconds.
struct DpOverlap {
  double exposed_s = 0, slowdown_s = 0;
};
DpOverlap dp_overlap(double comm_s, double last_piece_s, double window_s, double interference);

// The whole step. Needs c.gpu.measured (throws Error naming the cluster file's field when absent).
EngineClock engine_clock(const EngineClockInput& in, const Cluster& c);

// "gpu.measured" of a cluster: whether it is there, and the clock's name for reports.
bool has_measured_rates(const Cluster& c);

// What the engine clock does not price yet of dtrain's MoE layer, which the engine itself runs
// under TP (expert tensor parallelism) and EP with ZeRO 1-3, full recompute and bf16: the clock
// has no price for the experts' TP all-reduces or EP's two sharding groups yet. Empty when it
// prices the layout; else the reason, starting with the flag that is not priced ("--tp 2 with
// --experts: ..."). `plan` refuses such a layout on a cluster file with measured rates; `train`
// prints its clock table without the predicted column, with this reason.
std::string engine_clock_moe_gap(bool moe, int tp, int ep, int zero_stage, Recompute recompute,
                                 Precision precision);

}  // namespace dtrain::plan
