// Communication per step and its time: which collectives data, tensor and pipeline parallelism
// run (bytes per call, calls per step), the traffic that gives per rank (collective_cost.h), and
// an alpha-beta time: latency x steps + bytes sent / bandwidth, per link class (hardware.h).
// The engine's DP, ZeRO, TP and PP tests compare measured bytes and steps with these functions.
//
// Per step, on one rank, with Psi parameters in the group's model shard and N ranks (ring):
//   DP (ZeRO 0)     all-reduce of the gradients                     2 Psi (N-1)/N elements sent
//   ZeRO 1 and 2    reduce-scatter of gradients + all-gather of the updated weights: the same
//   ZeRO 3          all-gather (forward) + all-gather (backward) + reduce-scatter: 3 Psi (N-1)/N
// (Rajbhandari et al. 2020 §7: ZeRO-3 moves 1.5x the baseline). With gradient accumulation over
// M micro-batches, ZeRO 2 reduce-scatters after each micro-batch (it keeps only a gradient shard)
// and ZeRO 3 also gathers the weights again for each one.
//   TP, per layer and micro-batch: 2 all-reduces of b*s*h elements forward and 2 backward
//     (Narayanan et al. 2021 §3.2), 8 b s h (t-1)/t elements sent; sequence parallelism turns each
//     into a reduce-scatter + all-gather of the same volume; full recompute re-runs the
//     forward's 2.
//   PP, per micro-batch and stage boundary: b*s*h elements forward and as many backward (b*s*h/t
//     per rank under sequence parallelism, where each TP rank holds s/t of the sequence).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "dtrain/comm/chunks.h"
#include "dtrain/comm/collective_kind.h"
#include "dtrain/cost/activation_memory.h"
#include "dtrain/cost/collective_cost.h"
#include "dtrain/cost/memory_model.h"
#include "dtrain/machine/hardware.h"

namespace dtrain::plan {

// `count` calls of one collective, each on `bytes` (S as collective_cost.h defines it).
struct CollectiveCall {
  comm::CollectiveOp op = comm::CollectiveOp::all_reduce;
  double bytes = 0;
  int64_t count = 1;
  std::string_view what;  // "gradients", "weights for the forward", ...
  // Weight gathers can run behind forward compute; everything else behind backward compute.
  bool overlaps_forward = false;
};

struct CommCost {
  int64_t steps = 0;
  double bytes_sent = 0;  // moved (collective_cost.h): sent, or read in place by direct
  double time_s = 0;
};

// One call on `world` ranks over `link`: latency_us * steps + bytes moved / bandwidth, the bytes
// moved being those sent (direct: the larger of sent and received, as it mostly reads).
CommCost collective_cost(comm::CollectiveOp op, comm::Algorithm algo, double bytes, int world,
                         const Link& link);
// All `count` calls of `call`.
CommCost collective_cost(const CollectiveCall& call, comm::Algorithm algo, int world,
                         const Link& link);
// One all_to_all_v on this `rank` (sizes per peer as all_to_all_v_traffic takes them), by the same
// law with the larger of the bytes sent and received (uneven parts: the rank waits for the larger
// side); an all_to_all of equal blocks is collective_cost(CollectiveOp::all_to_all, ...).
CommCost all_to_all_v_cost(comm::Algorithm algo, std::span<const double> sent_bytes,
                           std::span<const double> received_bytes, int rank, const Link& link);

// A two-level collective over `nodes` x `ranks_per_node` ranks (ring at each level):
//   all_reduce      reduce-scatter inside each node, all-reduce of the S/k shard across nodes
//                   (k = ranks_per_node, one ring per local rank, each on its own NIC), then
//                   all-gather inside the node;
//   reduce_scatter  reduce-scatter inside, then reduce-scatter of the S/k shard across nodes;
//   all_gather      all-gather of S/k across nodes, then all-gather inside.
// A flat ring over all N ranks sends 2(N-1)/N S per rank through the slowest link on each of its
// 2(N-1) steps; the hierarchical all-reduce sends only 2(n-1)/n S/k across nodes, in 2(n-1) steps.
struct HierarchicalCost {
  CommCost intra_first;  // reduce-scatter inside the node (none for all_gather)
  CommCost inter;        // across nodes, on the S/k shard
  CommCost intra_last;   // all-gather inside the node (none for reduce_scatter)
  double time_s = 0;
};
HierarchicalCost hierarchical_cost(comm::CollectiveOp op, double bytes, int ranks_per_node,
                                   int nodes, const Link& intra, const Link& inter);
// The all-reduce case, named for the engine's hierarchical all-reduce tests.
HierarchicalCost hierarchical_all_reduce_cost(double bytes, int ranks_per_node, int nodes,
                                              const Link& intra, const Link& inter);

// The collectives data parallelism runs per step for `params` parameters at `zero_stage`, with
// `microbatches` micro-batches of gradient accumulation, each collective split into `pieces`
// equal calls (gradient buckets, or ZeRO-3's per-layer gathers). Gradients travel in
// bytes.grad-byte elements, weights in bytes.param-byte elements. `gather_pieces` (0: pieces)
// splits ZeRO 1-2's all-gather of the updated weights (the engine gathers the whole buffer in
// one call: 1).
std::vector<CollectiveCall> dp_collectives(int64_t params, int zero_stage, StateBytes bytes,
                                           int microbatches = 1, int64_t pieces = 1,
                                           int64_t gather_pieces = 0);
// Their traffic on one of `dp` ranks, summed: with pieces = 1 and one micro-batch, bytes sent are
// 2 Psi (N-1)/N elements for ZeRO 0-2 and 3 Psi (N-1)/N for ZeRO 3.
CollectiveTraffic dp_traffic_per_step(int64_t params, int dp, int zero_stage, StateBytes bytes,
                                      int microbatches = 1, int64_t pieces = 1,
                                      comm::Algorithm algo = comm::Algorithm::ring);

// The same for one pipeline stage as the engine runs it (engine/engine.h), where a few units
// differ from the whole model's rule:
//   - `deferred`: elements synced once per step whatever the stage (the tied wte of a
//     pipeline's end stages, averaged after its sum with the other end stage);
//   - ZeRO-3 gathers every unit before each micro-batch's forward, before its backward only
//     the `backward_gathered` elements (the units whose backward reads weights: not a first
//     stage's embeddings), and again before each W the `rerun_gathered` elements (blocks whose
//     forward a split backward reruns under full recompute).
struct StageDataParallel {
  int64_t params = 0;              // Psi of the stage on this TP rank
  int zero_stage = 0;              // 0..3
  int microbatches = 1;            // M
  int64_t deferred = 0;            // of params: synced once per step
  int64_t backward_gathered = -1;  // ZeRO-3; -1: params
  int64_t rerun_gathered = 0;      // ZeRO-3
};
std::vector<CollectiveCall> stage_dp_collectives(const StageDataParallel& stage, StateBytes bytes);

// Exactly the bytes one rank of a stage's DP group moves in one training step (collective_cost.h's
// convention: sent, or read in place), collective by collective, over ZeRO's shard pieces (rank
// r owns [r * ceil(Psi/N), ...), the last range short). On the ring algorithms a reduce-scatter
// sends every piece but the rank's own, an all-gather every piece but the next rank's, an
// all-reduce (ZeRO 0) both over comm::chunk_of's balanced chunks. Each bucket syncs once per
// step at ZeRO 0-1 and after every micro-batch at 2-3 (the deferred one once); ZeRO 1-2 then
// all-gather the whole buffer, and ZeRO-3 gathers each listed unit before each micro-batch's
// forward, backward and rerun. What the engine's DP counter (comm::Traffic::bytes_moved) equals
// rank by rank; stage_dp_collectives is the group's mean of it.
// The engine's gradient buckets (parallel::make_buckets builds its buckets with this, and the
// plan sizes them before a run): walking the units' element counts in backward order, a bucket
// closes as soon as it holds at least `bucket_bytes` at `bytes_per_element` (every bucket but
// the last reaches the size; a unit larger than it is a bucket of its own).
struct UnitRun {
  int first = 0, last = 0;  // indices into the units, inclusive
  int64_t count = 0;        // elements
};
std::vector<UnitRun> gradient_buckets(std::span<const int64_t> unit_counts, int64_t bucket_bytes,
                                      int64_t bytes_per_element = 4);

struct StageDataParallelRank {
  int64_t params = 0;  // Psi of the stage on this TP rank
  int ranks = 1;       // N
  int rank = 0;        // the DP rank
  int zero_stage = 0;
  int microbatches = 1;
  std::vector<comm::Chunk> buckets;  // flat ranges, in sync order
  int deferred_bucket = -1;          // synced once per step whatever the stage; -1: none
  // ZeRO-3's gathers per micro-batch: before the forward, the backward, and W's rerun.
  std::vector<comm::Chunk> forward_gathers, backward_gathers, rerun_gathers;
  // ZeRO-1/2's parameter gathers after the update, one all-gather each; empty: one of {0,
  // params} (EP gathers each dense or expert run of the flat buffer on its own).
  std::vector<comm::Chunk> update_gathers;
};
// grad_bytes: the element size of the gradient syncs (all-reduce, reduce-scatters: 2 when they
// run in bf16); param_bytes: of the parameter gathers (ZeRO-1/2's after the update, ZeRO-3's).
// With the direct algorithm (plan::direct_traffic) a reduce-scatter reads the rank's own piece
// from each of the N-1 peers, an all-gather every piece but its own, and ZeRO-0's all-reduce
// reads the rank's chunk of each bucket from the peers and writes the result back into them,
// 2 (N-1) x the chunk, segment by segment through a shared window's slots of `slot_bytes` (0: a
// shared address space, one segment); a bucket on the latency path (up to
// comm::kDirectExchangeMaxBytes) is read whole from each peer, (N-1) x the bucket.
int64_t stage_dp_bytes_moved(const StageDataParallelRank& stage, int64_t grad_bytes,
                             int64_t param_bytes, comm::Algorithm algo = comm::Algorithm::ring,
                             int64_t slot_bytes = 0);

// Sequence parallelism's re-gathers in one layer's backward for one micro-batch: the LN1 and LN2
// outputs are kept as the rank's b*s/t rows, and the column-parallel weight gradients need all
// of them (Korthikanti et al. 2022, 4.2.2): 2 all-gathers of b*s*h elements.
std::vector<CollectiveCall> sp_regather_collectives(int64_t micro_batch, int64_t seq,
                                                    int64_t hidden, int64_t bytes_per_element);

// Tensor parallelism's collectives for one layer and one micro-batch of b sequences of s tokens:
// 4 all-reduces of b*s*h elements (6 with full recompute), or with sequence parallelism as many
// reduce-scatters and all-gathers.
std::vector<CollectiveCall> tp_collectives_per_layer(int64_t micro_batch, int64_t seq,
                                                     int64_t hidden, int64_t bytes_per_element,
                                                     bool sequence_parallel, Recompute recompute);
CollectiveTraffic tp_traffic_per_layer(int64_t micro_batch, int64_t seq, int64_t hidden,
                                       int64_t bytes_per_element, int tp, bool sequence_parallel,
                                       Recompute recompute);

// The vocabulary-parallel embedding's and cross-entropy's all-reduces for one micro-batch of b
// sequences of s tokens on a TP rank: the embedding stage sums the partial embeddings (b*s*h);
// the head stage reduces each row's max logit (b*s) and its (sum of exps, target logit) pair
// (2*b*s) forward, and sums the LM head's input gradient (b*s*h) backward.
std::vector<CollectiveCall> tp_vocab_collectives(int64_t micro_batch, int64_t seq, int64_t hidden,
                                                 int64_t bytes_per_element, bool embedding,
                                                 bool head);

// Bytes one rank sends across one pipeline-stage boundary for one micro-batch, in one direction
// (activations forward; the gradient backward is the same size).
double pp_bytes_per_microbatch(int64_t micro_batch, int64_t seq, int64_t hidden,
                               int64_t bytes_per_element, int tp, bool sequence_parallel);

// Sends pipeline stage `stage` (0..pp-1) makes per micro-batch with `vp` model chunks per rank:
// each of its chunks sends its activations forward unless it holds the model's last layers, and
// its input gradient backward unless it holds the first. Interior stages send 2v; the first and
// the last 2v - 1 (pp = 1: none). Every schedule sends the same (GPipe, 1F1B, ZB-H1, interleaved).
int64_t pp_sends_per_microbatch(int pp, int vp, int stage);

// What overlap leaves on the critical path: communication of `total_s`, sent in pieces (buckets,
// layers) of which the last takes `last_piece_s`, running behind `window_s` of compute that does
// not wait for it. The last piece always shows: max(last_piece_s, total_s - window_s).
double exposed_time(double total_s, double last_piece_s, double window_s);

// Sums the traffic of `calls` on one of `world` ranks.
CollectiveTraffic traffic_of(const std::vector<CollectiveCall>& calls, int world,
                             comm::Algorithm algo = comm::Algorithm::ring);

}  // namespace dtrain::plan
