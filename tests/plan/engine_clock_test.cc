// The engine's clock (engine_clock.h) against hand-worked values on a tiny GPT with hand-made
// rates: a product of W FLOPs takes W / 1e9 s, a kernel over n elements n / 1e9 s plus 1 us
// per call, a 2-rank collective 10 us plus bytes sent / 1e9 s. Each component: one layer's
// forward, backward and weight gradients, recompute, the head, the optimizer, TP collectives,
// the pipeline's bubble, the DP overlap and oversubscription.
#include <gtest/gtest.h>

#include "dtrain/core/check.h"
#include "dtrain/plan/engine_clock.h"

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

}  // namespace
}  // namespace dtrain::plan
