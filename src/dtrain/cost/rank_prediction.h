// What one rank of dtrain's engine holds and moves per step, by the closed forms of this room:
// predict_rank is the one prediction the layout report prints beside the engine's counters, the
// memory check before a run compares with the machine, and the planner's engine profile sizes a
// stage with (planner_vs_engine tests it against the planner's own memory breakdown).
// The description (EngineRank) is model- and engine-free, so the formulas stay in this room; the
// engine side fills it from its config (report/rank_description.h).
#pragma once

#include <cstdint>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrain/comm/collective_kind.h"
#include "dtrain/core/recompute.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/cost/context_parallel.h"
#include "dtrain/cost/memory_model.h"
#include "dtrain/cost/pipeline_stages.h"

namespace dtrain::plan {

// A stage's parameters on one TP rank as the planned peak reads them: all of them, the
// embeddings unit's (0 when the stage holds no wte) and every other unit's (the final
// LayerNorm, the blocks) in the order backward runs them.
struct StageParamCounts {
  int64_t params = 0;
  int64_t embeddings = 0;
  std::vector<int64_t> units;
  int64_t block = 0;       // the largest block's parameters (0 when the stage holds none)
  int64_t final_norm = 0;  // the final LayerNorm's, on the head's stage
  // Under EP (ep > 1): the routed experts' parameters among `params` (E / ep of each routed
  // block), sharded over the expert-DP group instead of DP; 0 without EP.
  int64_t experts = 0;
  bool operator==(const StageParamCounts&) const = default;
};

// One rank of the engine as the formulas read it: the model's shape, the layout, where the rank
// sits, its stage's parameters, and the schedule's in-flight count (the schedule room, above
// this one, simulates it).
struct EngineRank {
  int64_t hidden = 0, heads = 0;
  // The Llama family: RMSNorm, grouped-query attention (kv_heads of heads), SwiGLU of width ffn;
  // GPT: LayerNorm, kv_heads = heads, GELU of 4 hidden (ffn).
  bool llama = false;
  int64_t kv_heads = 0, ffn = 0;
  int64_t vocab_local = 0;  // the vocabulary rows on this TP rank
  int64_t seq = 0;          // the whole sequence T (a CP rank holds seq / cp tokens)
  int dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
  int zero_stage = 0;
  bool sequence_parallel = false;  // in effect (tp > 1)
  Recompute recompute = Recompute::none;
  bool mixed_precision = false;   // --precision bf16
  bool bf16_grad_reduce = false;  // --grad-reduce bf16
  CpAlgorithm cp_algorithm = CpAlgorithm::ring;
  int threads = 1;
  int64_t micro_batch = 1;
  int microbatches = 1;
  int64_t bucket_bytes = int64_t{1} << 20;
  StagePartition partition;
  int stage = 0;              // the rank's pipeline stage
  int64_t routed_blocks = 0;  // the stage's routed (MoE) blocks, of partition's on the stage
  StageParamCounts params;
  // The schedule: whether W runs apart from B, and the most micro-batches held at once on this
  // stage (the weight-gradient stash's under a split backward).
  bool split_backward = false;
  double inflight = 0;
};

// What the rank's run measured that its traffic formulas take as given, as the clock's
// block_routings: none of it is a layout choice.
struct EngineRankPieces {
  double steps = 1;  // the counters' steps; the histograms below are over all of them
  int tp_rank = 0;
  // Routed blocks' forwards by the rows this rank's experts computed: rows -> calls.
  std::map<int64_t, int64_t> expert_rows;
  // SP: the LayerNorm gradient pieces this rank holds (elements), each summed over TP.
  std::vector<int64_t> layernorm_pieces;
  // More TP ranks than K/V heads: the copied K/V rows' gradient pieces this rank holds
  // (elements), each summed over the head's `kv_copies` ranks, this rank `kv_copy_rank` of them.
  std::vector<int64_t> kv_copy_pieces;
  int kv_copies = 1, kv_copy_rank = 0;
  // DP: the rank's buckets and ZeRO gathers as the engine cut them (dense and, under EP, the
  // experts' over the expert-DP group), and the flat syncs' algorithm.
  StageDataParallelRank dp_dense, dp_experts;
  bool has_expert_dp = false;
  comm::Algorithm dp_algorithm = comm::Algorithm::ring;
  int64_t direct_slot_bytes = 0;
  // The tied wte's all-reduce between the end stages (elements; 0: no such group).
  int64_t tied_embedding = 0;
  comm::Algorithm tied_embedding_algorithm = comm::Algorithm::ring;
  // EP: the all-to-alls' bytes by the ep_* formulas fed the measured routing, over the steps.
  double ep_counts = 0, ep_dispatch_forward = 0, ep_combine = 0, ep_dispatch = 0;
};

// Bytes moved per step at each site of the rank's traffic.
struct RankTraffic {
  double tp_block = 0, tp_vocab = 0, tp_regather = 0, tp_recompute = 0, tp_norms = 0;
  double tp_kv_copies = 0;
  double pp = 0, dp = 0, embedding = 0, ep = 0;
  double tp() const {
    return tp_block + tp_vocab + tp_regather + tp_recompute + tp_norms + tp_kv_copies;
  }
};
// The sites in report order, with the name the layout report's JSON gives each.
inline constexpr std::pair<std::string_view, double RankTraffic::*> kRankTrafficSites[] = {
    {"tp_block", &RankTraffic::tp_block},
    {"tp_vocab", &RankTraffic::tp_vocab},
    {"tp_regather", &RankTraffic::tp_regather},
    {"tp_recompute", &RankTraffic::tp_recompute},
    {"tp_layernorm_grads", &RankTraffic::tp_norms},
    {"tp_kv_copy_grads", &RankTraffic::tp_kv_copies},
    {"pp", &RankTraffic::pp},
    {"dp", &RankTraffic::dp},
    {"embedding", &RankTraffic::embedding},
    {"ep", &RankTraffic::ep}};

struct RankPrediction {
  ModelStateBytes states;  // params, grads, optimizer (ZeRO over DP x CP, experts over expert-DP)
  // One micro-batch of every chunk of the stage, and the peak: in flight x that + the workspace
  // the backward shares + recompute's one-block scratch.
  double microbatch_activation_bytes = 0;
  double activations_peak_bytes = 0;
  // Above the shards: ZeRO-3's gathered unit weights and gradients, ZeRO-2's whole buckets,
  // mixed precision's fp32 working copies.
  int64_t working_set_bytes = 0;
  double peak_bytes = 0;  // states + activations peak + working set
  RankTraffic traffic;    // zero without `pieces`
};

// The engine's bytes per parameter: mixed precision's 2 + 2 + 12, fp32 Adam's 4 + 4 + 8.
StateBytes engine_state_bytes(bool mixed_precision);
// The element size on the TP block collectives and the pipeline's sends.
int64_t engine_activation_wire_bytes(bool mixed_precision);

RankPrediction predict_rank(const EngineRank& rank);
RankPrediction predict_rank(const EngineRank& rank, const EngineRankPieces& pieces);

}  // namespace dtrain::plan
