// The MoE formulas of cost/moe.h against hand-worked values: the presets' parameter counts
// against the published totals, the routed-layer pattern, EP's per-rank expert state, the
// all-to-all bytes of a dispatch and combine (uniform and with a measured routing), and the TP
// collectives full recompute repeats in a routed block.
#include "dtrain/cost/moe.h"

#include <gtest/gtest.h>

#include "dtrain/core/check.h"
#include "dtrain/cost/model_presets.h"
#include "dtrain/plan/planner.h"

namespace dtrain::plan {
namespace {

// Mixtral 8x7B, by hand: attention 4096 (4096 + 2 x 1024) + 4096^2 = 41,943,040; an expert
// 3 x 4096 x 14336 = 176,160,768; router 8 x 4096; two RMSNorms 2 x 4096. A layer
// 41,943,040 + 8 x 176,160,768 + 32,768 + 8,192 = 1,451,270,144; 32 of them, embeddings and
// the untied head 2 x 32000 x 4096, final norm 4096: 46,702,792,704. Active: 6 experts fewer
// per layer, 46,702,792,704 - 32 x 6 x 176,160,768 = 12,879,925,248. Everything is counted (the
// embedding table too); the published "46.7B" and "12.9B" (Jiang et al. 2024 §2.1: "47B" total,
// "13B active") are rounded to 0.1B, so the tolerance is 0.05B.
TEST(MoeParams, MixtralMatchesPublishedCounts) {
  const ModelShape& m = model_preset("mixtral-8x7b");
  EXPECT_EQ(expert_param_count(m), 176160768);
  EXPECT_EQ(moe_layer_param_count(m), 1451270144);
  EXPECT_EQ(shape_param_count(m), 46702792704);
  EXPECT_EQ(active_param_count(m), 12879925248);
  EXPECT_NEAR(static_cast<double>(shape_param_count(m)), 46.7e9, 0.05e9);
  EXPECT_NEAR(static_cast<double>(active_param_count(m)), 12.9e9, 0.05e9);
}

// DeepSeek-V3, by hand: MLA 7168 x 1536 + 1536 x 128 x 192 (queries) + 7168 x 576 + 512 x 128 x
// 256 (keys, values, the RoPE key) + 128 x 128 x 7168 (output) = 187,105,280, norms 2 x 7168 +
// 1536 + 512. Dense layers (the first 3): + 3 x 7168 x 18432 = 583,483,392 each. Routed layers
// (58): + router 256 x 7168 + 257 experts x 3 x 7168 x 2048 = 11,507,286,016 each. Embeddings and
// untied head 2 x 129280 x 7168, final norm 7168: 671,026,404,352 in all (the report's 671B
// main model; its 14B multi-token-prediction module and the router's 256-entry bias per layer
// are not counted). Active: 248 routed experts skipped in each of 58 layers: 37,552,282,624.
// The report says "37B activated": two significant figures, and it does not say whether the
// 0.93B embedding table (of which a token reads one row) counts; counting it we are 1.5% above,
// so the tolerance is 2%.
TEST(MoeParams, DeepSeekV3MatchesPublishedCounts) {
  const ModelShape& m = model_preset("deepseek-v3");
  EXPECT_EQ(mla_matmul_param_count(m), 187105280);
  EXPECT_EQ(layer_param_count(m), 583483392);
  EXPECT_EQ(moe_layer_param_count(m), 11507286016);
  EXPECT_EQ(moe_layer_count(m), 58);
  EXPECT_EQ(shape_param_count(m), 671026404352);
  EXPECT_EQ(active_param_count(m), 37552282624);
  EXPECT_NEAR(static_cast<double>(shape_param_count(m)), 671e9, 0.5e9);
  EXPECT_NEAR(static_cast<double>(active_param_count(m)), 37e9, 0.02 * 37e9);
}

TEST(MoeLayers, DenseFirstAndEveryNth) {
  ModelShape m = model_preset("mixtral-8x7b");
  m.layers = 10;
  m.moe.first_dense = 2;
  m.moe.every = 3;  // layers 2, 5, 8 route
  EXPECT_FALSE(is_moe_layer(m, 1));
  EXPECT_TRUE(is_moe_layer(m, 2));
  EXPECT_FALSE(is_moe_layer(m, 3));
  EXPECT_TRUE(is_moe_layer(m, 8));
  EXPECT_EQ(moe_layer_count(m), 3);
  EXPECT_EQ(moe_layers_in(m, 0, 5), 1);  // layer 2
  EXPECT_EQ(moe_layers_in(m, 5, 5), 2);  // layers 5, 8
}

// EP memory, by hand: Mixtral with ep 8, tp 2: one expert per rank and routed layer, half of it,
// 32 x 176,160,768 / 2 = 2,818,572,288 expert parameters; ZeRO-1 over the expert-data-parallel
// group of dp 32 / ep 8 = 4 ranks holds 12 B x 2,818,572,288 / 4 of optimizer state for them.
TEST(MoeMemory, ExpertStateOverTheExpertDataParallelGroup) {
  const ModelShape& m = model_preset("mixtral-8x7b");
  EXPECT_EQ(rank_routed_expert_params(m, 32, 8, 2), 2818572288);
  PlanInput in;
  in.model = m;
  in.model.seq = 4096;
  in.training.global_batch = 512;
  in.cluster = parse_cluster("8x8xH100");
  Layout l;
  l.dp = 32;
  l.tp = 2;
  l.ep = 8;
  l.zero_stage = 1;
  l.recompute = Recompute::full;
  const MemoryBreakdown mem = stage_memory(in, l, 0);
  EXPECT_EQ(mem.expert_params, 2818572288);
  const int64_t dense = mem.stage_params - mem.expert_params;
  EXPECT_DOUBLE_EQ(mem.optimizer,
                   12.0 * static_cast<double>(shard_count(dense, 32) + shard_count(2818572288, 4)));
  EXPECT_DOUBLE_EQ(mem.params, 2.0 * static_cast<double>(mem.stage_params));
  // Without EP every rank holds all 8 experts (half of each), the optimizer sharded over 32.
  l.ep = 1;
  const MemoryBreakdown replicated = stage_memory(in, l, 0);
  EXPECT_EQ(replicated.stage_params - dense, 8 * 2818572288);
  EXPECT_DOUBLE_EQ(replicated.optimizer,
                   12.0 * static_cast<double>(shard_count(replicated.stage_params, 32)));
}

// The engine's per-rank state under EP and ZeRO, by hand (fp32 AdamW: 4 + 4 + 8 bytes): 1001
// dense elements over 4 ranks (shard 251), 333 expert elements over 2 (shard 167).
TEST(MoeMemory, EpModelStateBytesByHand) {
  const ModelStateBytes z3 = ep_model_state_bytes(1001, 333, 4, 2, 3, kFp32Adam);
  EXPECT_EQ(z3.params, 4 * (251 + 167));
  EXPECT_EQ(z3.grads, 4 * (251 + 167));
  EXPECT_EQ(z3.optimizer, 8 * (251 + 167));
  const ModelStateBytes z1 = ep_model_state_bytes(1001, 333, 4, 2, 1, kFp32Adam);
  EXPECT_EQ(z1.params, 4 * 1334);
  EXPECT_EQ(z1.grads, 4 * 1334);
  EXPECT_EQ(z1.optimizer, 8 * (251 + 167));
  // ep 1: one group, ceil(1334 / 4) = 334.
  EXPECT_EQ(ep_model_state_bytes(1001, 333, 4, 1, 3, kFp32Adam).optimizer, 8 * 334);
  EXPECT_THROW((void)ep_model_state_bytes(1001, 333, 4, 3, 1, kFp32Adam), Error);
  // Full recompute reruns the forward's exchanges; selective does not.
  EXPECT_EQ(ep_forward_exchanges(Recompute::none), 1);
  EXPECT_EQ(ep_forward_exchanges(Recompute::selective), 1);
  EXPECT_EQ(ep_forward_exchanges(Recompute::full), 2);
}

// Full recompute's rerun of a routed block under TP, by hand: b 2, s 4, h 8, 4-byte elements:
// 256 bytes of activations; 12 expert rows: 384 bytes. On tp 2 a ring all-reduce sends its
// buffer's bytes, a reduce-scatter or all-gather half. Without SP the rerun repeats attention's g
// and the experts' g: 256 + 384 = 640 bytes; with SP attention's reduce-scatter (128), the two
// LN outputs' all-gathers (2 x 128) and the experts' g (384): 768. Each is the forward half of
// the block's collectives (whose backward mirrors its forward): half moe_tp_collectives_per_layer.
TEST(MoeTensorParallel, RerunRepeatsTheForwardCollectives) {
  auto sent = [](const std::vector<CollectiveCall>& calls) {
    return traffic_of(calls, 2).bytes_sent;
  };
  EXPECT_DOUBLE_EQ(sent(moe_tp_rerun_collectives_per_layer(2, 4, 8, 4, false, 12)), 640);
  EXPECT_DOUBLE_EQ(sent(moe_tp_rerun_collectives_per_layer(2, 4, 8, 4, true, 12)), 768);
  for (const bool sp : {false, true}) {
    EXPECT_DOUBLE_EQ(2 * sent(moe_tp_rerun_collectives_per_layer(2, 4, 8, 4, sp, 12)),
                     sent(moe_tp_collectives_per_layer(2, 4, 8, 4, sp, 12)));
  }
  // No rows routed to this rank's experts: attention's collectives only.
  EXPECT_DOUBLE_EQ(sent(moe_tp_rerun_collectives_per_layer(2, 4, 8, 4, false, 0)), 256);
}

// All-to-all bytes, by hand: 4096 tokens, k 2, h 4096, bf16: 67,108,864 bytes of routed copies
// per rank; uniform over ep 8 each rank sends 1/8 of them to each of the 7 others (8,388,608
// each, 58,720,256 in all) and receives as much.
TEST(MoeAllToAll, UniformDispatchAndCombine) {
  MoeDispatch d{4096, 4096, 2, 8, 8, 2, {}};
  const MoeA2aRank r = dispatch_bytes(d, 3);
  EXPECT_DOUBLE_EQ(r.sent[3], 0);
  EXPECT_DOUBLE_EQ(r.sent[0], 8388608);
  EXPECT_DOUBLE_EQ(r.sent_total(), 58720256);
  EXPECT_DOUBLE_EQ(r.received_total(), 58720256);
  const MoeA2aRank c = combine_bytes(d, 3);
  EXPECT_DOUBLE_EQ(c.sent_total(), r.received_total());
  EXPECT_DOUBLE_EQ(expert_load_factor(d), 1.0);
}

// A measured routing, by hand: 4 experts on ep 2 (experts 0-1 on rank 0, 2-3 on rank 1), counts
// 30, 30, 20, 20: rank 0's share 0.6. 100 tokens, k 1, h 10, 1 byte: 1000 bytes of copies. Rank
// 0 sends 0.4 x 1000 = 400 to rank 1 and receives 0.6 x 1000 = 600 from it; rank 1 sends 600 and
// receives 400. The busiest is rank 0 (it moves 600 in, rank 1 600 out: a tie, the first wins),
// and its experts compute 2 x 0.6 = 1.2 x the mean.
TEST(MoeAllToAll, MeasuredRouting) {
  MoeDispatch d{100, 10, 1, 4, 2, 1, {30, 30, 20, 20}};
  const MoeA2aRank r0 = dispatch_bytes(d, 0);
  EXPECT_DOUBLE_EQ(r0.sent[1], 400);
  EXPECT_DOUBLE_EQ(r0.received[1], 600);
  const MoeA2aRank r1 = dispatch_bytes(d, 1);
  EXPECT_DOUBLE_EQ(r1.sent[0], 600);
  EXPECT_DOUBLE_EQ(r1.received[0], 400);
  EXPECT_EQ(busiest_ep_rank(d), 0);
  EXPECT_DOUBLE_EQ(expert_load_factor(d), 1.2);
  // An expert and a whole rank that receive nothing.
  d.tokens_per_expert = {50, 50, 0, 0};
  EXPECT_DOUBLE_EQ(dispatch_bytes(d, 1).sent[0], 1000);
  EXPECT_DOUBLE_EQ(dispatch_bytes(d, 0).sent[1], 0);
  d.tokens_per_expert = {1, 2, 3};
  EXPECT_THROW(dispatch_bytes(d, 0), Error);
}

// The planner's EP rows equal the formula: per routed layer and micro-batch the busiest rank
// sends the dispatch and the combine forward and both again backward.
TEST(MoePlan, AllToAllRowsEqualTheFormula) {
  PlanInput in;
  in.model = model_preset("mixtral-8x7b");
  in.model.seq = 4096;
  in.training.global_batch = 512;
  in.cluster = parse_cluster("8x8xH100");
  Layout l;
  l.dp = 32;
  l.tp = 2;
  l.ep = 8;
  l.zero_stage = 1;
  const Plan p = evaluate(in, l);
  // 16 micro-batches, 32 routed layers, 4 all-to-alls of 58,720,256 bytes each.
  EXPECT_DOUBLE_EQ(p.moe.bytes_per_layer, 4 * 58720256.0);
  EXPECT_DOUBLE_EQ(p.moe.bytes_per_step, 4 * 58720256.0 * 32 * 16);
  EXPECT_EQ(p.moe.expert_dp, 4);
  EXPECT_EQ(p.moe.experts_per_rank, 1);
  double ep_bytes = 0;
  for (const GroupTraffic& g : p.traffic)
    if (g.group == "EP") ep_bytes += g.bytes_per_rank;
  EXPECT_DOUBLE_EQ(ep_bytes, p.moe.bytes_per_step);
  // MFU on active parameters: model FLOPs 3 x (32 routed layers + logits).
  const double tokens = 512.0 * 4096;
  const double layer =
      2 * tokens * static_cast<double>(moe_layer_active_matmul_param_count(in.model)) +
      4 * tokens * 4096 * 4096;
  EXPECT_DOUBLE_EQ(p.time.model_flops, 3 * (32 * layer + 2 * tokens * 4096 * 32000));
}

TEST(MoePlan, EpErrorsNameTheFlags) {
  PlanInput in;
  in.model = model_preset("mixtral-8x7b");
  in.training.global_batch = 64;
  in.cluster = parse_cluster("1x8xH100");
  Layout l;
  l.dp = 8;
  l.ep = 3;
  EXPECT_NE(layout_error(in, l).find("--ep 3 does not divide --dp 8"), std::string::npos);
  l.dp = 4;
  l.tp = 2;
  l.ep = 4;
  EXPECT_EQ(layout_error(in, l), "");
  in.model.moe.experts = 6;
  l.ep = 4;
  EXPECT_NE(layout_error(in, l).find("--ep 4 does not divide --experts 6"), std::string::npos);
}

}  // namespace
}  // namespace dtrain::plan
