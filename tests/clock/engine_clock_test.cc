// The engine's clock (engine_clock.h) against hand-worked values on a tiny GPT with hand-made
// rates: a product of W FLOPs takes W / 1e9 s, a kernel over n elements n / 1e9 s plus 1 us
// per call, a 2-rank collective 10 us plus bytes sent / 1e9 s. Each component: one layer's
// forward, backward and weight gradients, recompute, the head, the optimizer, TP collectives,
// the pipeline's bubble, the DP overlap and oversubscription.
#include <gtest/gtest.h>

#include "dtrain/clock/engine_clock.h"
#include "dtrain/core/check.h"
#include "dtrain/cost/comm_model.h"

namespace dtrain::plan {
namespace {

constexpr double kCallS = 1e-6;

MeasuredRates unit_rates() {
  MeasuredRates r;
  r.present = true;
  r.cpu = "unit";
  r.cores = 64;
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    for (int threads : {1, 2}) r.gemm.push_back({p, threads, 64, 64, 64, 2.0 * 64 * 64 * 64 / 1e9});
  }
  for (int i = 0; i < kKernelOpCount; ++i) {
    const auto op = static_cast<KernelOp>(i);
    // bytes/s chosen so that one element costs 1 ns whatever the op's bytes per element
    r.kernels.push_back({op, Precision::fp32, kernel_bytes_per_element(op) * 1e9, kCallS});
  }
  for (const char* c : {"all_reduce", "reduce_scatter", "all_gather"}) {
    r.collectives.push_back({c, "ring", "intra_node", 2, 1e-5, 1e9});
  }
  r.collectives.push_back({"send_recv", "direct", "intra_node", 2, 1e-5, 1e9});
  r.comm_interference = 1.5;
  return r;
}

Cluster unit_cluster() {
  Cluster c;
  c.name = "unit";
  c.nodes = 1;
  c.gpus_per_node = 64;
  c.gpu.name = "cpu";
  c.gpu.memory_bytes = 1e9;
  c.gpu.peak_flops = 1e12;
  c.gpu.measured = unit_rates();
  c.intra_node = {"shared memory", 1e9, 10};
  c.inter_node = {"network", 1e8, 100};
  return c;
}

// C 8, 2 heads of 4, FFN 32, T 4, B 1 (4 tokens), V 16, 2 layers, one thread.
EngineClockInput tiny() {
  EngineClockInput in;
  in.model.name = "tiny";
  in.model.layers = 2;
  in.model.hidden = 8;
  in.model.heads = 2;
  in.model.vocab = 16;
  in.model.seq = 4;
  in.micro_batch = 1;
  in.stage_params = 1000;
  return in;
}

TEST(EngineClock, LayerForwardBackwardAndWeightGradients) {
  const PassTimes p = engine_layer_seconds(tiny(), unit_rates());
  // Forward products: QKV 2*4*24*8 = 1536, two heads of Q K^T and att V 2 x 2 x 128 = 512,
  // projection 2*4*8*8 = 512, fc and fc_proj 2*4*32*8 = 2048 each: 6656 FLOPs.
  // Kernels: 2 LayerNorms and 2 residuals of 32 elements, GELU 128, the causal softmax 2 x 10:
  // 276 elements in 7 calls.
  EXPECT_NEAR(p.forward_s, 6656e-9 + 276e-9 + 7 * kCallS, 1e-15);
  // B: fc_proj's and fc's input gradients 2048 each, projection 512, attention's four products
  // per head 2 x 4 x 128 = 1024, QKV 1536: 7168 FLOPs; GELU 128, 2 LayerNorms 32, softmax 20:
  // 212 elements in 5 calls.
  EXPECT_NEAR(p.backward_input_s, 7168e-9 + 212e-9 + 5 * kCallS, 1e-15);
  // W: fc_proj 2*8*32*4, fc 2*32*8*4, projection 2*8*8*4, QKV 2*24*8*4: 6144 FLOPs.
  EXPECT_NEAR(p.backward_weight_s, 6144e-9, 1e-15);
  EXPECT_EQ(p.recompute_s, 0);
}

// unit_rates with warm samples at half the cold time (every shape: one grid point) and caches of
// `l3_bytes` on one core (no L2): operands in cache make the products up to 2x faster.
MeasuredRates warm_rates(double l3_bytes) {
  MeasuredRates r = unit_rates();
  for (int threads : {1, 2}) {
    r.gemm_warm.push_back({Precision::fp32, threads, 64, 64, 64, 64.0 * 64 * 64 / 1e9});
  }
  r.cache = {0, 0, l3_bytes, 64};
  return r;
}

TEST(EngineClock, ProductsPricedByWhereTheirOperandsLive) {
  const double kernels = 276e-9 + 7 * kCallS;  // the forward's, as above
  // No caches known: every product cold, as above.
  EXPECT_NEAR(engine_layer_seconds(tiny(), warm_rates(0)).forward_s, 6656e-9 + kernels, 1e-15);
  // The pass between two uses of a weight: 2 x 1000 parameters (weights, gradients) and per
  // layer the kept tensors, 4 x (8 + 8 + 24 + 8 + 8 + 8 + 32 + 32 + 8 + 8) + 2 x 2 x 16 = 640
  // elements, 2 layers: 3280 fp32, 13120 bytes.
  EXPECT_EQ(engine_pass_bytes(tiny()), 13120);
  // A cache far above it: every operand warm, every product at its warm sample (half).
  const PassTimes warm = engine_layer_seconds(tiny(), warm_rates(1e9));
  EXPECT_NEAR(warm.forward_s, 6656e-9 / 2 + kernels, 1e-15);
  EXPECT_NEAR(warm.backward_weight_s, 6144e-9 / 2, 1e-15);
  // Half the pass (6560 bytes): every product's operands fit, the weights (stale) are in cache
  // at 1/2. QKV (4 x 24 x 8): fresh A 32 + C 96 elements, stale B 192: share (128 + 96) / 320
  // = 0.7, 1536 FLOPs x (1 - 0.7 / 2). The attention (all fresh): 512 / 2. Projection (4 x 8 x
  // 8): (64 + 32) / 128 = 0.75, 512 x (1 - 0.375). fc and fc_proj: fresh 160, stale 256:
  // (160 + 128) / 416, 2048 x (1 - 144 / 416) each.
  const double half = 1536 * (1 - 0.35) + 256 + 512 * (1 - 0.375) + 2 * 2048 * (1 - 144.0 / 416);
  EXPECT_NEAR(engine_layer_seconds(tiny(), warm_rates(6560)).forward_s, half * 1e-9 + kernels,
              1e-15);
  // W products read only the gradient fresh: fc_proj's (8 x 32 x 4): fresh A 32, stale B 128 and
  // C 256: (32 + 192) / 416; fc's (32 x 8 x 4): fresh A 128, stale B 32 and C 256: (128 + 144)
  // / 416; projection (8 x 8 x 4): fresh 32, stale 32 + 64: (32 + 48) / 128; QKV (24 x 8 x 4):
  // fresh 96, stale 32 + 192: (96 + 112) / 320.
  const double w = 2048 * (1 - 112.0 / 416) + 2048 * (1 - 136.0 / 416) + 512 * (1 - 40.0 / 128) +
                   1536 * (1 - 104.0 / 320);
  EXPECT_NEAR(engine_layer_seconds(tiny(), warm_rates(6560)).backward_weight_s, w * 1e-9, 1e-15);
  // Four ranks share the 6560-byte L3 (1640 each): the products of 416 elements (1664 bytes)
  // no longer fit whole; the engine_clock fills ranks from the layout.
  EngineClockInput four = tiny();
  four.dp = 4;
  EXPECT_EQ(engine_cache_bytes(four, warm_rates(6560)), 1640);
  EXPECT_GT(engine_layer_seconds(four, warm_rates(6560)).forward_s,
            engine_layer_seconds(tiny(), warm_rates(6560)).forward_s);
}

TEST(EngineClock, Recompute) {
  EngineClockInput in = tiny();
  in.recompute = Recompute::selective;
  const PassTimes selective = engine_layer_seconds(in, unit_rates());
  // The attention core again: 512 FLOPs, the softmax's 20 elements in 2 calls.
  EXPECT_NEAR(selective.recompute_s, 512e-9 + 20e-9 + 2 * kCallS, 1e-15);
  EXPECT_NEAR(selective.backward_input_s, 7168e-9 + 212e-9 + 5 * kCallS + selective.recompute_s,
              1e-15);
  in.recompute = Recompute::full;
  const PassTimes full = engine_layer_seconds(in, unit_rates());
  EXPECT_NEAR(full.recompute_s, 6656e-9 + 276e-9 + 7 * kCallS, 1e-15);
  EXPECT_NEAR(full.backward_weight_s, 6144e-9, 1e-15);
}

TEST(EngineClock, Bf16ConvertsTheKeptTensors) {
  EngineClockInput in = tiny();
  in.precision = Precision::bf16;
  const PassTimes p = engine_layer_seconds(in, unit_rates());
  // Packed: 2 LN outputs 32 each, QKV 96, attention output 32, GELU output 128 = 320 elements in
  // 5 calls, once after the forward and once before the backward.
  const double convert = 320e-9 + 5 * kCallS;
  EXPECT_NEAR(p.forward_s, 6656e-9 + 276e-9 + 7 * kCallS + convert, 1e-15);
  EXPECT_NEAR(p.backward_input_s, 7168e-9 + 212e-9 + 5 * kCallS + convert, 1e-15);
}

TEST(EngineClock, HeadAndVocabularyParallelHead) {
  const PassTimes p = engine_head_seconds(tiny(), unit_rates());
  // LayerNorm 32, logits 2*4*16*8 = 1024 FLOPs, cross-entropy 64 elements; backward the same
  // kernels and the input gradient 1024; W the embedding's gradient 1024.
  EXPECT_NEAR(p.forward_s, 1024e-9 + 96e-9 + 2 * kCallS, 1e-15);
  EXPECT_NEAR(p.backward_input_s, 1024e-9 + 96e-9 + 2 * kCallS, 1e-15);
  EXPECT_NEAR(p.backward_weight_s, 1024e-9, 1e-15);
  EngineClockInput in = tiny();
  in.tp = 2;  // 8 vocabulary rows per rank
  const PassTimes half = engine_head_seconds(in, unit_rates());
  EXPECT_NEAR(half.forward_s, 512e-9 + 64e-9 + 2 * kCallS, 1e-15);
  const PassTimes embedding = engine_embedding_seconds(tiny(), unit_rates());
  EXPECT_NEAR(embedding.forward_s, 32e-9 + kCallS, 1e-15);
  EXPECT_NEAR(embedding.backward_input_s, 32e-9 + kCallS, 1e-15);
}

TEST(EngineClock, Optimizer) {
  // The norm's sum of squares and AdamW over 1000 elements each; bf16 also rounds the weights.
  EXPECT_NEAR(engine_optimizer_seconds(1000, 1000, Precision::fp32, unit_rates()),
              2 * (1000e-9 + kCallS), 1e-15);
  EXPECT_NEAR(engine_optimizer_seconds(1000, 1000, Precision::bf16, unit_rates()),
              3 * (1000e-9 + kCallS), 1e-15);
}

TEST(EngineClock, TensorParallelCollectives) {
  EngineClockInput in = tiny();
  in.tp = 2;
  // A block's f and g: all-reduces of 4 x 8 fp32 = 128 bytes; a ring on 2 ranks sends 128:
  // 10 us + 128 ns each, 2 forward and 2 backward per layer, 2 layers. The vocabulary: the
  // embedding's sum (128 bytes) and the cross-entropy's max (16) and sum-exp pair (32) forward,
  // the LM head's input gradient (128) backward.
  const double block = 1e-5 + 128e-9;
  const TpSeconds t = engine_tp_seconds(in, unit_cluster(), true, true);
  EXPECT_NEAR(t.forward_s, 4 * block + block + (1e-5 + 16e-9) + (1e-5 + 32e-9), 1e-15);
  EXPECT_NEAR(t.backward_s, 4 * block + block, 1e-15);
  // Without a measured rate the link formula prices them (1 GB/s, 10 us per step: the same).
  Cluster links = unit_cluster();
  links.gpu.measured.collectives.clear();
  const TpSeconds formula = engine_tp_seconds(in, links, false, false);
  EXPECT_NEAR(formula.forward_s, 4 * (2 * 1e-5 + 128e-9), 1e-15);  // a 2-rank ring: 2 steps
}

TEST(EngineClock, Bf16CollectivesTakeTheBf16Rate) {
  EngineClockInput in = tiny();
  in.tp = 2;
  in.precision = Precision::bf16;
  Cluster c = unit_cluster();
  // bf16 all-reduces measured slower per byte (each hop adds in fp32 and rounds back): 20 us +
  // bytes / 5e8 B/s.
  CollectiveRate bf16_all_reduce{"all_reduce", "ring", "intra_node", 2, 2e-5, 5e8};
  bf16_all_reduce.precision = Precision::bf16;
  c.gpu.measured.collectives.push_back(bf16_all_reduce);
  // f and g travel in bf16: 4 x 8 x 2 = 64 bytes, 20 us + 128 ns each, 4 per layer each way over
  // 2 layers; the vocabulary's reductions stay fp32 at fp32's rate (as TensorParallelCollectives).
  const double block = 2e-5 + 64 / 5e8;
  const TpSeconds t = engine_tp_seconds(in, c, true, true);
  EXPECT_NEAR(t.forward_s, 4 * block + (1e-5 + 128e-9) + (1e-5 + 16e-9) + (1e-5 + 32e-9), 1e-15);
  EXPECT_NEAR(t.backward_s, 4 * block + (1e-5 + 128e-9), 1e-15);
}

TEST(EngineClock, PipelineBubbleAndSends) {
  EngineClockInput in = tiny();
  in.pp = 2;
  in.microbatches = 4;
  const EngineClock c = engine_clock(in, unit_cluster());
  // One send of 4 x 8 fp32 = 128 bytes: 10 us + 128 ns.
  const double send = 1e-5 + 128e-9;
  EXPECT_NEAR(c.send_s, send, 1e-15);
  // The last stage (one layer and the head) is the busiest and never waits for stage 0 (one
  // layer and the embedding) in the steady state: 1F1B's simulated schedule has it wait for
  // stage 0's first forward and its send, hold each of its M gradient sends, and then the step
  // ends with stage 0's last backward (fused B + W).
  const PassTimes layer = engine_layer_seconds(in, unit_rates());
  const PassTimes head = engine_head_seconds(in, unit_rates());
  PassTimes first = layer;
  first += engine_embedding_seconds(in, unit_rates());
  EXPECT_NEAR(c.phases.pipeline_wait_s,
              first.forward_s + send + 4 * send + first.backward_input_s + first.backward_weight_s,
              1e-12);
  EXPECT_NEAR(c.pipeline_sends_s, 4 * send, 1e-15);
  EXPECT_NEAR(c.bubble.bubble_time, c.phases.pipeline_wait_s - 4 * send, 1e-15);
  EXPECT_NEAR(c.stage.forward_s, layer.forward_s + head.forward_s, 1e-15);
  EXPECT_NEAR(c.phases.forward_s, 4 * c.stage.forward_s, 1e-15);
  EXPECT_NEAR(
      c.phases.step_s,
      c.phases.forward_s + c.phases.backward_s + c.phases.pipeline_wait_s + c.phases.optimizer_s,
      1e-15);
}

TEST(EngineClock, DataParallelOverlap) {
  // 10 s of syncs, the last piece 2 s, behind 5 s of backward: 5 s exposed; the 5 s hidden
  // slow compute by 1.5x: 2.5 s more.
  const DpOverlap a = dp_overlap(10, 2, 5, 1.5);
  EXPECT_DOUBLE_EQ(a.exposed_s, 5);
  EXPECT_DOUBLE_EQ(a.slowdown_s, 2.5);
  // All but the last piece hidden: it shows (1 s), the other 2 s slow compute by 1 s.
  const DpOverlap b = dp_overlap(3, 1, 10, 1.5);
  EXPECT_DOUBLE_EQ(b.exposed_s, 1);
  EXPECT_DOUBLE_EQ(b.slowdown_s, 1);

  // In the step: ZeRO 0, 1000 parameters in 4 buckets: all-reduces of 1000 bytes (a ring on 2
  // sends 1000): 11 us each, 44 us in all, behind one micro-batch's backward.
  EngineClockInput in = tiny();
  in.dp = 2;
  in.dp_pieces = 4;
  const EngineClock c = engine_clock(in, unit_cluster());
  const double piece = 1e-5 + 1000e-9;
  EXPECT_NEAR(c.dp_comm_s, 4 * piece, 1e-15);
  const double window = c.stage.backward_input_s + c.stage.backward_weight_s;
  const DpOverlap expect = dp_overlap(4 * piece, piece, window, 1.5);
  EXPECT_NEAR(c.phases.exposed_dp_s, expect.exposed_s, 1e-15);
  EXPECT_NEAR(c.phases.backward_s, window + expect.slowdown_s, 1e-15);
  // ZeRO 1-2's gather of the updated weights waits whole after the optimizer.
  in.zero_stage = 1;
  in.dp_pieces = 1;
  const EngineClock z1 = engine_clock(in, unit_cluster());
  // reduce-scatter of 4000 bytes sends 2000; the weights' all-gather the same.
  EXPECT_NEAR(z1.phases.exposed_dp_s, (1e-5 + 2000e-9) + (1e-5 + 2000e-9), 1e-15);
  EXPECT_NEAR(z1.phases.optimizer_s, 2 * (500e-9 + kCallS), 1e-15);  // the shard: 500
}

TEST(EngineClock, Oversubscription) {
  EXPECT_DOUBLE_EQ(oversubscription(4, 2, 4), 2);
  EXPECT_DOUBLE_EQ(oversubscription(2, 1, 4), 1);
  EXPECT_DOUBLE_EQ(oversubscription(8, 1, 0), 1);  // cores unknown
  EngineClockInput in = tiny();
  in.dp = 4;
  Cluster c = unit_cluster();
  const EngineClock roomy = engine_clock(in, c);
  c.gpu.measured.cores = 2;  // 4 ranks of 1 thread on 2 cores: compute twice as long
  const EngineClock crowded = engine_clock(in, c);
  EXPECT_DOUBLE_EQ(crowded.stretch, 2);
  EXPECT_NEAR(crowded.stage.forward_s, 2 * roomy.stage.forward_s, 1e-15);
  EXPECT_NEAR(crowded.phases.optimizer_s, 2 * roomy.phases.optimizer_s, 1e-15);
}

// Ranks that each own a core still share its cache and memory bus: 2 ranks on 2 cores with every
// core busy 1.2x slower stretch compute by 1.2; 4 ranks on 2 cores by 2 (oversubscription) x 1.2.
TEST(EngineClock, CoresBusyTogetherRunSlower) {
  EngineClockInput in = tiny();
  in.dp = 2;
  Cluster c = unit_cluster();
  c.gpu.measured.cores = 2;
  const EngineClock alone = engine_clock(in, c);
  EXPECT_DOUBLE_EQ(alone.stretch, 1);
  c.gpu.measured.corun_slowdown = 1.2;
  const EngineClock together = engine_clock(in, c);
  EXPECT_DOUBLE_EQ(together.stretch, 1.2);
  EXPECT_NEAR(together.stage.forward_s, 1.2 * alone.stage.forward_s, 1e-15);
  in.dp = 4;
  EXPECT_DOUBLE_EQ(engine_clock(in, c).stretch, 2 * 1.2);
}

// Pipeline ranks waiting in the bubble give their core back: 2 stages x 2 DP ranks on 2 cores
// take the longer of every rank's compute stretched 2x and the schedule's critical path at
// full speed (what the same layout takes on 64 cores, its DP syncs aside).
TEST(EngineClock, BubbleWaitsGiveTheirCoresBack) {
  EngineClockInput in = tiny();
  in.pp = 2;
  in.microbatches = 2;
  in.dp = 2;
  Cluster c = unit_cluster();
  const EngineClock roomy = engine_clock(in, c);
  c.gpu.measured.cores = 2;
  const EngineClock crowded = engine_clock(in, c);
  ASSERT_DOUBLE_EQ(crowded.stretch, 2);
  const EnginePhases& f = roomy.phases;
  const EnginePhases& g = crowded.phases;
  EXPECT_NEAR(g.forward_s, 2 * f.forward_s, 1e-15);
  EXPECT_NEAR(g.backward_s, 2 * f.backward_s, 1e-15);
  const double sends = roomy.pipeline_sends_s;  // the last stage's M gradient sends
  EXPECT_NEAR(sends, 2 * roomy.send_s, 1e-15);
  const double critical = f.forward_s + f.backward_s + f.tp_comm_s + f.pipeline_wait_s;
  const double busy = g.forward_s + g.backward_s + g.tp_comm_s + sends;
  EXPECT_NEAR(g.pipeline_wait_s, std::max(busy, critical) - busy + sends, 1e-15);
  // Here the stretched work is the longer: no bubble is left to wait out but the sends.
  EXPECT_GT(busy, critical);
  EXPECT_NEAR(g.pipeline_wait_s, sends, 1e-15);
}

// Stages on different nodes send over the inter-node link: the unit cluster's 100 us + bytes / 1e8
// B/s against 10 us + bytes / 1e9 inside a node, for the tiny model's 4 x 8 fp32 activations.
TEST(EngineClock, PipelineSendsAcrossNodesTakeTheInterNodeLink) {
  EngineClockInput in = tiny();
  in.pp = 2;
  Cluster c = unit_cluster();
  c.gpu.measured.collectives.clear();  // the link formulas, not a measured send_recv
  const double bytes = 1 * 4 * 8 * 4;
  EXPECT_NEAR(engine_clock(in, c).send_s, 10e-6 + bytes / 1e9, 1e-15);
  in.inter_node_pp = true;
  EXPECT_NEAR(engine_clock(in, c).send_s, 100e-6 + bytes / 1e8, 1e-15);
}

// ZeRO-3's units through the communication thread's queue, by hand (seconds): the embeddings
// gather 1, reduce-scatter 1, compute 1 each way; each of 2 blocks gather 2, reduce-scatter 2,
// forward 3, backward 5; the final LayerNorm gather 1, reduce-scatter 1, head forward 4,
// backward 6. One micro-batch, one stage (embedding and head).
//   forward:  comm E 0-1, B0 1-3; compute E 1-2, B0 3-6 (B1 queued at 3: 3-5), B1 6-9 (F queued
//             at 6: 6-7), head 9-13.
//   backward: comm F 13-14, E 14-15, B1 15-17; head 15-21, then RS F 21-22; B1 21-26 (B0 queued
//             at 21: 22-24), RS B1 26-28; B0 26-31, RS B0 31-33; embedding 31-32, RS E 33-34.
// Span 34, compute 28, exposed 6; the thread busy 6 (forward gathers) + 6 + 6 = 18.
TEST(EngineClock, ZeroThreeUnitsThroughTheCommunicationThread) {
  Zero3Stage z;
  z.embedding = z.head = true;
  z.blocks = 2;
  z.embeddings = {1, 1, 1, 1};
  z.block = {2, 2, 3, 5};
  z.final_norm = {1, 1, 4, 6};
  const CommTimeline t = run_comm_timeline(zero3_steps(z, 1));
  EXPECT_DOUBLE_EQ(t.span_s, 34);
  EXPECT_DOUBLE_EQ(t.compute_s, 28);
  EXPECT_DOUBLE_EQ(t.comm_s, 18);
  // A middle stage of a pipeline (no embeddings, no head), 2 micro-batches: gather B0 0-2, then
  // compute B0 2-5 (B1 gathered 2-4), B1 5-8; backward: gather B1 8-10, compute B1 10-15 (B0
  // gathered 10-12), RS B1 15-17, B0 15-20, RS B0 20-22. The second micro-batch's first gather
  // queues behind that reduce-scatter (22-24): the same pattern shifted by 22, its compute ending
  // at 42 and its last reduce-scatter at 44. Span 44, compute 32.
  Zero3Stage mid;
  mid.blocks = 2;
  mid.block = {2, 2, 3, 5};
  const CommTimeline m = run_comm_timeline(zero3_steps(mid, 2));
  EXPECT_DOUBLE_EQ(m.compute_s, 32);
  EXPECT_DOUBLE_EQ(m.span_s, 44);
}

// Partner waits in the timeline: 0.5 s beside compute, 0.25 s while the compute thread waits.
// Gather u0 (1 s) waited for at once: 0-1.25 (alone); gather u1 queued at 1.25 starts while
// 3 s of compute run (1.25-4.25): 1.25-2.75 (beside); a reduce-scatter (1 s) queued when the
// compute ends: 4.25-5.5 (alone). Span 5.5, compute 3, the thread busy 4.
TEST(EngineClock, PartnerWaitsInTheTimelineDependOnComputeBeside) {
  const std::vector<CommStep> steps = {
      {CommStepKind::gather, 0, 1}, {CommStepKind::wait, 0, 0},
      {CommStepKind::gather, 1, 1}, {CommStepKind::compute, 0, 3},
      {CommStepKind::wait, 1, 0},   {CommStepKind::reduce_scatter, 0, 1}};
  const CommTimeline t = run_comm_timeline(steps, {0.5, 0.25});
  EXPECT_DOUBLE_EQ(t.span_s, 5.5);
  EXPECT_DOUBLE_EQ(t.compute_s, 3);
  EXPECT_DOUBLE_EQ(t.comm_s, 4);
}

// The clock's ZeRO-3: the tiny model's units (blocks of 872 parameters, the final LayerNorm 16,
// the embeddings 160 = 1920 - 2 x 872 - 16) on 2 DP ranks, ring gathers and reduce-scatters at
// 10 us + S/2 / 1e9 B/s (S = 3488, 64 and 640 bytes): the exposed DP is the timeline's.
TEST(EngineClock, ZeroThreePricesTheGathersOnTheCriticalPath) {
  EngineClockInput in = tiny();
  in.dp = 2;
  in.zero_stage = 3;
  in.stage_params = 1920;
  ASSERT_EQ(engine_layer_param_count(in.model, 1), 872);
  const Cluster c = unit_cluster();
  const EngineClock clock = engine_clock(in, c);
  const PassTimes layer = engine_layer_seconds(in, c.gpu.measured);
  const PassTimes head = engine_head_seconds(in, c.gpu.measured);
  const PassTimes emb = engine_embedding_seconds(in, c.gpu.measured);
  Zero3Stage z;
  z.embedding = z.head = true;
  z.blocks = 2;
  z.block = {10e-6 + 1744e-9, 10e-6 + 1744e-9, layer.forward_s,
             layer.backward_input_s + layer.backward_weight_s};
  z.final_norm = {10e-6 + 32e-9, 10e-6 + 32e-9, head.forward_s,
                  head.backward_input_s + head.backward_weight_s};
  z.embeddings = {10e-6 + 320e-9, 10e-6 + 320e-9, emb.forward_s, emb.backward_input_s};
  const CommTimeline t = run_comm_timeline(zero3_steps(z, 1));
  EXPECT_NEAR(clock.dp_comm_s, t.comm_s, 1e-15);
  EXPECT_NEAR(clock.phases.exposed_dp_s, t.span_s - t.compute_s, 1e-15);
  // At least the first gathers (the embeddings, then the first block) wait whole.
  EXPECT_GE(clock.phases.exposed_dp_s, (10e-6 + 320e-9) + (10e-6 + 1744e-9) - 1e-15);
  // The hidden rest slows compute by 1.5x - 1 of its length, the forward's gathers in forward.
  const double slowdown = 0.5 * (t.comm_s - (t.span_s - t.compute_s));
  const EngineClock plain = engine_clock(in, [&] {
    Cluster quiet = c;
    quiet.gpu.measured.comm_interference = 1;
    return quiet;
  }());
  EXPECT_NEAR(clock.phases.forward_s + clock.phases.backward_s,
              plain.phases.forward_s + plain.phases.backward_s + slowdown, 1e-15);
}

// More threads than cores: each collective waits oversubscribed_wait_s for its partner. TP 2 x DP
// 2 on 2 cores (4 compute threads) adds it to each of the tiny model's TP collectives: per layer
// 2 forward, 2 backward all-reduces, and the vocabulary's 4 (3 in the forward: the partial
// embeddings, the logits' row max, the sums of exps); DP's buckets also wait
// (4 compute + 4 communication threads).
TEST(EngineClock, OversubscribedCollectivesWaitForTheirPartner) {
  EngineClockInput in = tiny();
  in.price_partner_waits = true;
  in.tp = 2;
  in.dp = 2;
  in.dp_pieces = 3;
  Cluster c = unit_cluster();
  c.gpu.measured.cores = 2;
  const EngineClock before = engine_clock(in, c);
  c.gpu.measured.oversubscribed_wait_s = 2e-3;
  const EngineClock after = engine_clock(in, c);
  const double vocab = static_cast<double>(tp_vocab_collectives(1, 4, 8, 4, true, true).size());
  EXPECT_NEAR(after.tp_forward_s + after.tp_backward_s,
              before.tp_forward_s + before.tp_backward_s + 2e-3 * (2 * 4 + vocab), 1e-12);
  EXPECT_NEAR(after.tp_forward_s, before.tp_forward_s + 2e-3 * (2 * 2 + 3), 1e-12);
  EXPECT_NEAR(after.dp_comm_s, before.dp_comm_s + 3 * 2e-3, 1e-12);
  // DP 2 alone on 2 cores: its buckets wait beside backward (2 compute + 2 communication
  // threads), the last one, with compute done, does not (2 communication threads).
  EngineClockInput dp = tiny();
  dp.price_partner_waits = true;
  dp.dp = 2;
  dp.dp_pieces = 3;
  c.gpu.measured.oversubscribed_wait_s = 0;
  const EngineClock dp_before = engine_clock(dp, c);
  c.gpu.measured.oversubscribed_wait_s = 2e-3;
  EXPECT_NEAR(engine_clock(dp, c).dp_comm_s, dp_before.dp_comm_s + 2 * 2e-3, 1e-12);
  EXPECT_NEAR(engine_clock(dp, c).tp_forward_s, 0, 1e-15);
  // TP 2 alone on 2 cores: every thread has a core, nothing waits.
  in.dp = 1;
  c.gpu.measured.oversubscribed_wait_s = 0;
  const EngineClock roomy_before = engine_clock(in, c);
  c.gpu.measured.oversubscribed_wait_s = 2e-3;
  EXPECT_NEAR(engine_clock(in, c).tp_forward_s, roomy_before.tp_forward_s, 1e-15);
  EXPECT_DOUBLE_EQ(partner_wait_seconds(c.gpu.measured, 3), 2e-3);
  EXPECT_DOUBLE_EQ(partner_wait_seconds(c.gpu.measured, 2), 0);
  // Off (the default): the measured wait is not priced.
  EngineClockInput off = dp;
  off.price_partner_waits = false;
  EXPECT_NEAR(engine_clock(off, c).dp_comm_s, dp_before.dp_comm_s, 1e-15);
}

// DP 4 over 2 nodes of 2 (the unit cluster's links: inside 10 us + B / 1e9 B/s measured, across
// 100 us per step + B / 1e8 B/s per rank), 4000 bytes all-reduced:
//   flat ring: 6 steps, each 1000 bytes over the node link's one flow, 2 x 1e8 B/s:
//              6 x (100 us + 5 us) = 630 us (the per-rank figure would say 660 us);
//   hierarchical: reduce-scatter on the node (2 ranks, sends 2000: 12 us), the 2000-byte shard
//              all-reduced across 2 nodes (2 steps of 100 us + 1000 / 1e8 = 220 us), all-gather
//              on the node (12 us): 244 us.
TEST(EngineClock, DataParallelAcrossNodesFlatAndHierarchical) {
  EngineClockInput in = tiny();
  in.dp = 4;
  in.inter_node_dp = true;
  in.dp_ranks_per_node = 2;
  const Cluster c = unit_cluster();
  using comm::Algorithm;
  using comm::CollectiveOp;
  EXPECT_NEAR(engine_dp_collective_seconds(in, c, CollectiveOp::all_reduce, Algorithm::ring, 4000),
              630e-6, 1e-12);
  in.dp_hierarchical = true;
  EXPECT_NEAR(engine_dp_collective_seconds(in, c, CollectiveOp::all_reduce, Algorithm::ring, 4000),
              244e-6, 1e-12);
  // The ZeRO-1 reduce-scatter is a flat ring whatever --dp-all-reduce says: 3 steps x (100 us +
  // 1000 / 2e8).
  EXPECT_NEAR(
      engine_dp_collective_seconds(in, c, CollectiveOp::reduce_scatter, Algorithm::ring, 4000),
      315e-6, 1e-12);
  // One node: the measured intra-node rate.
  in.inter_node_dp = false;
  EXPECT_NEAR(
      engine_dp_collective_seconds(in, c, CollectiveOp::all_reduce, Algorithm::ring, 4000),
      engine_collective_seconds(c, CollectiveOp::all_reduce, Algorithm::ring, 4000, 4, false),
      1e-15);
  // In the step: ZeRO 0, one bucket of 1000 parameters (4000 bytes): hierarchical leaves 244 us
  // exposed (the last piece), flat 630.
  in.inter_node_dp = true;
  in.dp_pieces = 1;
  EXPECT_NEAR(engine_clock(in, c).phases.exposed_dp_s, 244e-6, 1e-12);
  in.dp_hierarchical = false;
  EXPECT_NEAR(engine_clock(in, c).phases.exposed_dp_s, 630e-6, 1e-12);
}

TEST(EngineClock, RefusesAClusterWithoutMeasuredRates) {
  Cluster c = unit_cluster();
  c.gpu.measured = {};
  try {
    (void)engine_clock(tiny(), c);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpu.measured"), std::string::npos) << e.what();
  }
}

// Cache residency is priced only when asked (price_cache_residency): by default every product is
// cold, whatever caches the file knows, and asking for it makes the step faster on a file whose
// warm samples are twice as fast and whose cache holds everything.
TEST(EngineClock, CacheResidencyIsPricedOnlyWhenAsked) {
  EngineClockInput in = tiny();
  Cluster cold = unit_cluster();
  cold.gpu.measured = warm_rates(0);
  Cluster cached = cold;
  cached.gpu.measured.cache.l3_bytes = 1e12;
  EXPECT_DOUBLE_EQ(engine_clock(in, cached).phases.step_s, engine_clock(in, cold).phases.step_s);
  in.price_cache_residency = true;
  EXPECT_LT(engine_clock(in, cached).phases.step_s, engine_clock(in, cold).phases.step_s);
}

// --- context parallelism: tiny() at T 8 over cp 2, so each rank holds 4 tokens (B T = 4, as
// tiny() at T 4 without CP).
EngineClockInput tiny_cp(CpAlgorithm algo) {
  EngineClockInput in = tiny();
  in.model.seq = 8;
  in.cp = 2;
  in.cp_algorithm = algo;
  return in;
}

TEST(EngineClock, ContextParallelRingPricesBlocksAndHops) {
  const Cluster c = unit_cluster();
  const CpAttention a = engine_cp_attention_seconds(tiny_cp(CpAlgorithm::ring), c);
  // Balanced: rank r's chunks r and 3 - r reach a key of both ranks' blocks: 2 blocks of 4 x 4
  // scores, each for 2 heads: 4 (block, head) calls. Forward per call Q K^T (4 x 4 x 4) and P V
  // (4 x 4 x 4): 256 FLOPs; the online softmax over 16 scores; the K/V pack and the output's
  // merge init and finish: 3 x 32 elements in one call.
  EXPECT_EQ(a.visible_blocks, 2);
  const double forward_compute = 4 * 256e-9 + 4 * 16e-9 + 4 * kCallS + 96e-9 + kCallS;
  // One hop's [K|V]: 2 x 4 tokens x 8 channels x 4 bytes = 256 bytes, 10 us + 256 ns; it hides
  // behind one block's compute (half the forward's) only in part.
  const double hop = 1e-5 + 256e-9;
  EXPECT_NEAR(a.comm_forward_s, hop - forward_compute / 2, 1e-15);
  EXPECT_NEAR(a.forward_s, forward_compute + hop - forward_compute / 2, 1e-15);
  // Backward: per call P again, dP (4 x 4 x 4 each) and dV, dQ, dK (4 x 4 x 4 each): 640 FLOPs,
  // the exp and dS over 16 scores, the row dot and dK, dV added back (96 elements, one call);
  // one blocking hop of [K|V|dK|dV] (512 bytes) and the last of [dK|dV] (256).
  const double backward_compute = 4 * 640e-9 + 4 * 16e-9 + 4 * kCallS + 96e-9 + kCallS;
  EXPECT_NEAR(a.comm_backward_s, (1e-5 + 512e-9) + hop, 1e-15);
  EXPECT_NEAR(a.backward_s, backward_compute + a.comm_backward_s, 1e-15);

  // The block: tiny()'s (4 tokens) with its attention core (512 FLOPs, the softmax's 20
  // elements in 2 calls) replaced by the blockwise one; the exchanges inside it.
  const PassTimes dense = engine_layer_seconds(tiny(), unit_rates());
  const PassTimes block = engine_block_seconds(tiny_cp(CpAlgorithm::ring), c);
  EXPECT_NEAR(block.forward_s,
              dense.forward_s - (512e-9 + 20e-9 + 2 * kCallS) + forward_compute + a.comm_forward_s,
              1e-15);
  // The contiguous split's last rank also computes both blocks (blockwise attention computes a
  // partly masked block whole): the same seconds.
  EngineClockInput contiguous = tiny_cp(CpAlgorithm::ring);
  contiguous.cp_split = CpSplit::contiguous;
  EXPECT_NEAR(engine_cp_attention_seconds(contiguous, c).forward_s, a.forward_s, 1e-15);
}

TEST(EngineClock, ContextParallelAllGatherAndUlysses) {
  const Cluster c = unit_cluster();
  // all-gather: one all-gather of the whole [K|V] (S = 512 bytes, 256 sent on 2 ranks) forward,
  // one reduce-scatter of [dK|dV] backward, neither overlapped; the blocks as the ring's.
  const CpAttention ag = engine_cp_attention_seconds(tiny_cp(CpAlgorithm::all_gather), c);
  EXPECT_NEAR(ag.comm_forward_s, 1e-5 + 256e-9, 1e-15);
  EXPECT_NEAR(ag.comm_backward_s, 1e-5 + 256e-9, 1e-15);
  EXPECT_EQ(ag.visible_blocks, 2);
  // ulysses: the head split leaves 1 head per rank over the whole sequence, in 2 contiguous
  // blocks: (0, 0), (1, 0), (1, 1) visible, 3 calls of 256 FLOPs; 16 scores each; the pack and
  // merge copies plus the head-split packing, 7 x 32 elements.
  const CpAttention u = engine_cp_attention_seconds(tiny_cp(CpAlgorithm::ulysses), c);
  EXPECT_EQ(u.visible_blocks, 3);
  EXPECT_NEAR(u.forward_s - u.comm_forward_s, 3 * 256e-9 + 3 * 16e-9 + 3 * kCallS + 224e-9 + kCallS,
              1e-15);
  // Each all-to-all moves half of a (4 tokens x 8 channels) fp32 tensor, 64 bytes, as one
  // exchange at the send_recv rate (no all_to_all rate measured): Q, K, V, O forward; dO, dQ,
  // dK, dV backward.
  EXPECT_NEAR(u.comm_forward_s, 4 * (1e-5 + 64e-9), 1e-15);
  EXPECT_NEAR(u.comm_backward_s, 4 * (1e-5 + 64e-9), 1e-15);
  // Full recompute reruns the forward's exchanges too.
  EngineClockInput full = tiny_cp(CpAlgorithm::ulysses);
  full.recompute = Recompute::full;
  const PassTimes none = engine_block_seconds(tiny_cp(CpAlgorithm::ulysses), c);
  const PassTimes rerun = engine_block_seconds(full, c);
  EXPECT_NEAR(rerun.recompute_s, none.forward_s, 1e-15);
}

TEST(EngineClock, ContextParallelRanksReduceGradientsWithDataParallel) {
  // CP ranks hold replicas: cp 2 reduces the same gradients over 2 ranks as dp 2 does.
  EngineClockInput cp = tiny_cp(CpAlgorithm::ring);
  EngineClockInput dp = tiny();
  dp.dp = 2;
  const EngineClock with_cp = engine_clock(cp, unit_cluster());
  const EngineClock with_dp = engine_clock(dp, unit_cluster());
  EXPECT_GT(with_cp.dp_comm_s, 0);
  EXPECT_NEAR(with_cp.dp_comm_s, with_dp.dp_comm_s, 1e-15);
  // ZeRO-1 shards the optimizer over dp x cp.
  cp.zero_stage = 1;
  dp.zero_stage = 1;
  EXPECT_NEAR(engine_clock(cp, unit_cluster()).phases.optimizer_s,
              engine_clock(dp, unit_cluster()).phases.optimizer_s, 1e-15);
}

// --- mixture of experts: tiny() with 4 experts, top 2, every block routed (4 tokens, C 8, F 32).
EngineClockInput tiny_moe(int dp, int ep) {
  EngineClockInput in = tiny();
  in.model.moe.experts = 4;
  in.model.moe.top_k = 2;
  in.dp = dp;
  in.ep = ep;
  return in;
}

TEST(EngineClock, MixtureOfExpertsLayer) {
  const Cluster c = unit_cluster();
  // Uniform routing, no EP: 4 tokens x 2 copies over 4 experts, 2 rows each. Per expert fc
  // (2 x 32 x 8) and proj (2 x 8 x 32): 1024 FLOPs each, GELU over 64 elements. The router's
  // logits (4 x 4 x 8): 256 FLOPs, its softmax over 16 probabilities; the rows gathered and
  // combined: 2 x 4 x 2 x 8 = 128 elements in one call.
  const MoeMlp moe = engine_moe_mlp_seconds(tiny_moe(1, 1), c);
  EXPECT_EQ(moe.busiest_rows, 8);
  EXPECT_NEAR(moe.pass.forward_s, (4 * 2048 + 256) * 1e-9 + (256 + 16 + 128) * 1e-9 + 6 * kCallS,
              1e-15);
  // Backward: each expert's two input gradients (1024 FLOPs each) and GELU's; the router's
  // softmax (16) and input gradient (4 x 8 x 4: 256 FLOPs); the combine's and the gather's
  // gradients, 3 x 64 elements in one call. W: each expert's 2 x 1024, the router's 256.
  EXPECT_NEAR(moe.pass.backward_input_s,
              (4 * 2048 + 256) * 1e-9 + (256 + 16 + 192) * 1e-9 + 6 * kCallS, 1e-15);
  EXPECT_NEAR(moe.pass.backward_weight_s, (4 * 2048 + 256) * 1e-9, 1e-15);
  EXPECT_EQ(moe.comm_forward_s, 0);
  // The routed block: tiny()'s with its MLP (fc and fc_proj 2048 FLOPs each, GELU 128 elements
  // in one call) replaced.
  const PassTimes dense = engine_layer_seconds(tiny(), unit_rates());
  const PassTimes block = engine_block_seconds(tiny_moe(1, 1), c);
  EXPECT_NEAR(block.forward_s, dense.forward_s - (4096e-9 + 128e-9 + kCallS) + moe.pass.forward_s,
              1e-15);

  // EP 2 of DP 2: rank 0 holds experts 0 and 1 and computes both ranks' rows for them, 4 rows
  // each: the same FLOPs in 2 GELU calls. Exchanges: the row counts (2 int64 to the peer, 16
  // bytes), the dispatch and the combine (4 tokens x 2 x 8 x 4 bytes, half to the peer: 128),
  // each one exchange at the send_recv rate; backward the dispatch and combine again.
  const MoeMlp ep = engine_moe_mlp_seconds(tiny_moe(2, 2), c);
  EXPECT_EQ(ep.busiest_rows, 8);
  EXPECT_NEAR(ep.comm_forward_s, (1e-5 + 16e-9) + 2 * (1e-5 + 128e-9), 1e-15);
  EXPECT_NEAR(ep.comm_backward_s, 2 * (1e-5 + 128e-9), 1e-15);
  EXPECT_NEAR(ep.pass.forward_s - ep.comm_forward_s,
              (4 * 2048 + 256) * 1e-9 + (256 + 16 + 128) * 1e-9 + 4 * kCallS, 1e-15);
  // A measured routing: experts 0..3 took 3:1:1:1 of the tokens. Rank 0's experts get
  // 2 x 4 x 2 x 3/6 = 8 and 8/3 rows, rank 1's 8/3 each: rank 0 computes the most.
  EngineClockInput skewed = tiny_moe(2, 2);
  skewed.tokens_per_expert = {3, 1, 1, 1};
  EXPECT_NEAR(engine_moe_mlp_seconds(skewed, c).busiest_rows, 8 + 8.0 / 3, 1e-12);
  EXPECT_GT(engine_moe_mlp_seconds(skewed, c).pass.forward_s, ep.pass.forward_s);
}

TEST(EngineClock, MixtureOfExpertsPricedOnARunsRouting) {
  Cluster c = unit_cluster();
  // EP 2 of DP 2, one block where both ranks sent all 16 of their rows to expert 0 (rank 0's):
  // rank 0 computes fc and proj on 16 rows (2 x 16 x 32 x 8 = 8192 FLOPs each) and GELU on
  // 16 x 32 = 512 elements in one call; expert 1 takes none. Around it the router as before.
  EngineClockInput one = tiny_moe(2, 2);
  one.block_routings = {{16, 0, 0, 0}};
  const MoeMlp hot = engine_moe_mlp_seconds(one, c);
  EXPECT_EQ(hot.busiest_rows, 16);
  EXPECT_NEAR(hot.pass.forward_s - hot.comm_forward_s,
              (2 * 8192 + 256) * 1e-9 + (512 + 16 + 128) * 1e-9 + 3 * kCallS, 1e-15);
  // Several blocks: the mean of each priced on its own rows (not the rows' mean, which would be
  // nearer uniform).
  EngineClockInput two = tiny_moe(2, 2);
  two.block_routings = {{16, 0, 0, 0}, {4, 4, 4, 4}};
  EngineClockInput even = tiny_moe(2, 2);
  even.tokens_per_expert = {4, 4, 4, 4};
  const MoeMlp mean = engine_moe_mlp_seconds(two, c);
  const MoeMlp uniform = engine_moe_mlp_seconds(even, c);
  EXPECT_NEAR(mean.pass.forward_s, (hot.pass.forward_s + uniform.pass.forward_s) / 2, 1e-15);
  EXPECT_NEAR(mean.pass.backward_weight_s,
              (hot.pass.backward_weight_s + uniform.pass.backward_weight_s) / 2, 1e-15);
  EXPECT_NEAR(mean.busiest_rows, (16 + 8) / 2.0, 1e-12);
  // The uniform entry prices as the a-priori clock does.
  EXPECT_NEAR(uniform.pass.forward_s, engine_moe_mlp_seconds(tiny_moe(2, 2), c).pass.forward_s,
              1e-15);
  two.model.moe.experts = 8;
  EXPECT_THROW(engine_moe_mlp_seconds(two, c), std::exception);

  // EP 4 of DP 4 on 2 cores (twice oversubscribed): rank 0's one expert takes all 32 rows, the
  // other ranks wait and give their cores back, so rank 0 runs alone: its experts' time is the
  // busiest's unshared, which the clock's x2 stretch will double, so half of it here; with even
  // routing the four ranks share the cores and each expert costs its own (a quarter).
  c.gpu.measured.cores = 2;
  EngineClockInput ep4 = tiny_moe(4, 4);
  ep4.block_routings = {{32, 0, 0, 0}};
  const MoeMlp alone = engine_moe_mlp_seconds(ep4, c);
  const double hot_experts = (2 * 16384) * 1e-9 + 1024e-9 + kCallS;
  const double router = 256e-9 + (16 + 128) * 1e-9 + 2 * kCallS;
  EXPECT_NEAR(alone.pass.forward_s - alone.comm_forward_s, hot_experts / 2 + router, 1e-15);
  // On 64 cores nobody shares: the busiest's whole time.
  c.gpu.measured.cores = 64;
  const MoeMlp wide = engine_moe_mlp_seconds(ep4, c);
  EXPECT_NEAR(wide.pass.forward_s - wide.comm_forward_s, hot_experts + router, 1e-15);
}

TEST(EngineClock, AllToAllAtItsMeasuredRateWhenCalibrated) {
  Cluster c = unit_cluster();
  // Without an all_to_all rate: 3 exchanges of a third of 300 bytes at the send_recv rate.
  EXPECT_NEAR(engine_all_to_all_seconds(c, 300, 4, false), 3 * (1e-5 + 100e-9), 1e-15);
  // With one (pairwise, 4 ranks): its own latency and bandwidth, the nearest group size for 8.
  c.gpu.measured.collectives.push_back({"all_to_all", "pairwise", "intra_node", 4, 3e-5, 1e8});
  EXPECT_NEAR(engine_all_to_all_seconds(c, 300, 4, false), 3e-5 + 3e-6, 1e-15);
  EXPECT_NEAR(engine_all_to_all_seconds(c, 300, 8, false), 3e-5 + 3e-6, 1e-15);
  EXPECT_EQ(engine_all_to_all_seconds(c, 300, 1, false), 0);
}

TEST(EngineClock, MixtureOfExpertsParametersAndGradientGroups) {
  // A routed block: tiny()'s 872 parameters less the MLP's 2 x 8 x 32 + 32 + 8 = 552, the
  // router's 4 x 8 = 32, and E / ep experts of 552.
  const ModelShape m = tiny_moe(1, 1).model;
  EXPECT_EQ(engine_layer_param_count(m, 1), 872);
  EXPECT_EQ(engine_moe_layer_param_count(m, 1), 872 - 552 + 32 + 4 * 552);
  EXPECT_EQ(engine_moe_layer_param_count(m, 2), 872 - 552 + 32 + 2 * 552);
  EXPECT_EQ(engine_moe_expert_param_count(m, 2), 2 * 552);
  // DP 2, EP 2: the experts' gradients have no replica to reduce with (expert-DP 1), so the
  // DP all-reduce carries only the dense part: less than without EP's split.
  const Cluster c = unit_cluster();
  EngineClockInput ep = tiny_moe(2, 2);
  ep.stage_params = 2000;
  ep.stage_expert_params = 1000;
  EngineClockInput replicated = ep;
  replicated.stage_expert_params = 0;
  // One bucket, a ring all-reduce on 2 ranks sending its S: 1000 dense parameters (4000 bytes)
  // against 2000 (8000).
  EXPECT_NEAR(engine_clock(ep, c).dp_comm_s, 1e-5 + 4000e-9, 1e-15);
  EXPECT_NEAR(engine_clock(replicated, c).dp_comm_s, 1e-5 + 8000e-9, 1e-15);
  // DP 4, EP 2: the experts' part reduced over their 2 replicas as well (a second collective).
  EngineClockInput four = ep;
  four.dp = 4;
  four.model.moe.experts = 4;
  EXPECT_GT(engine_clock(four, c).dp_comm_s, engine_clock(ep, c).dp_comm_s);
  // The step's EP exchanges: 2 layers x (forward + backward).
  const MoeMlp moe = engine_moe_mlp_seconds(ep, c);
  EXPECT_NEAR(engine_clock(ep, c).ep_s, 2 * (moe.comm_forward_s + moe.comm_backward_s), 1e-15);
}

}  // namespace
}  // namespace dtrain::plan
