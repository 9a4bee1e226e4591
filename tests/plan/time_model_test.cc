// The clock (time_model.h, rates.h) against hand-worked values on a small layer: each product
// and memory-bound kernel, the recompute variants, the optimizer, the link share; the rates'
// cluster-file form round-trips and is refused, naming the field, when missing or implausible.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dtrain/clock/time_model.h"
#include "dtrain/core/check.h"
#include "dtrain/plan/planner.h"

namespace dtrain::plan {
namespace {

// 1 TFLOP/s, 1 TB/s, every efficiency 1, no kernel cost: seconds are FLOPs / 1e12 and bytes /
// 1e12, so the hand counts below read directly.
GpuSpec unit_gpu() {
  GpuSpec g;
  g.name = "unit";
  g.memory_bytes = 1e9;
  g.peak_flops = 1e12;
  g.rates.present = true;
  g.rates.memory_bytes_per_s = 1e12;
  g.rates.fp32_peak_flops = 0.5e12;
  return g;
}

// GPT, h 64, 4 heads (head size 16), f 256, s 16, micro-batch 2 (32 tokens), tp 1, 2-byte
// activations, no dropout.
ClockShape small_shape() {
  ClockShape s;
  s.model.family = ModelFamily::gpt;
  s.model.hidden = 64;
  s.model.heads = 4;
  s.model.layers = 2;
  s.model.seq = 16;
  s.model.vocab = 100;
  s.micro_batch = 2;
  s.dropout = false;
  return s;
}

// 1 TB/s of memory, half of it and half of any peak reached, 10 us a kernel call.
Rates half_rates() {
  Rates r;
  r.present = true;
  r.memory_bytes_per_s = 1e12;
  r.gemm_efficiency = 0.5;
  r.kernel_overhead_us = 10;
  r.memory_efficiency = 0.5;
  return r;
}

TEST(Rates, MatmulAndMemoryBoundLaws) {
  const Rates r = half_rates();
  // 2 x 1000^3 FLOPs at 0.5 x 1 TFLOP/s = 4 ms, plus 10 us.
  EXPECT_DOUBLE_EQ(matmul_seconds(r, 1e12, 1000, 1000, 1000), 4e-3 + 10e-6);
  // A batch of 8 (10, 10, 10) products: 16000 FLOPs = 32 ns, and one call's 10 us: the small
  // shape runs at 32e-9 / 10.032e-6 of the large one's rate.
  EXPECT_DOUBLE_EQ(matmul_seconds(r, 1e12, 10, 10, 10, 8), 32e-9 + 10e-6);
  // 1 GB at 0.5 x 1 TB/s = 2 ms, plus 3 calls.
  EXPECT_DOUBLE_EQ(memory_bound_seconds(r, 1e9, 3), 2e-3 + 30e-6);
  const Rates d = datasheet_only(r);
  EXPECT_DOUBLE_EQ(matmul_seconds(d, 1e12, 1000, 1000, 1000), 2e-3);
}

TEST(Rates, AThinProductIsHeldToItsBytes) {
  const Rates r = half_rates();
  // The attention's scores at s = 2048, head width 64, 16 heads, 2-byte elements: 2 x 2048^2 x
  // 64 x 16 = 8.59e9 FLOPs take 17.2 ms at 0.5 x 1 TFLOP/s; its bytes, (2048 x 64 x 2 +
  // 2048^2) x 16 x 2 = 142.6 MB, take 0.285 ms at 0.5 x 1 TB/s: FLOPs bind.
  const double flops_s = 2.0 * 2048 * 2048 * 64 * 16 / 0.5e12;
  EXPECT_DOUBLE_EQ(matmul_seconds(r, 1e12, 2048, 2048, 64, 16, 2), flops_s + 10e-6);
  // At 100 TFLOP/s the FLOPs take 0.172 ms and the bytes bind: 0.285 ms.
  const double bytes_s = (2048.0 * 64 * 2 + 2048.0 * 2048) * 16 * 2 / 0.5e12;
  EXPECT_GT(bytes_s, 2.0 * 2048 * 2048 * 64 * 16 / (0.5 * 100e12));
  EXPECT_DOUBLE_EQ(matmul_seconds(r, 100e12, 2048, 2048, 64, 16, 2), bytes_s + 10e-6);
  // The same bytes in every orientation: the backward's products (M, N, K permuted) cost the same.
  EXPECT_DOUBLE_EQ(matmul_seconds(r, 100e12, 2048, 64, 2048, 16, 2), bytes_s + 10e-6);
  // No element size, or a cluster without rates (no bandwidth): FLOPs alone.
  EXPECT_DOUBLE_EQ(matmul_seconds(r, 100e12, 2048, 2048, 64, 16),
                   2.0 * 2048 * 2048 * 64 * 16 / (0.5 * 100e12) + 10e-6);
  Rates legacy;
  legacy.gemm_efficiency = 0.5;
  EXPECT_DOUBLE_EQ(matmul_seconds(legacy, 100e12, 2048, 2048, 64, 16, 2),
                   2.0 * 2048 * 2048 * 64 * 16 / (0.5 * 100e12));
}

TEST(TimeModel, LayerForwardIsItsProductsAndBytes) {
  const std::vector<OpTime> ops = layer_ops(small_shape(), unit_gpu());
  // Products, forward: QKV 2*32*192*64 = 786432; scores 2*16*16*16 x 8 (b x heads) = 65536;
  // scores x V 65536; projection 2*32*64*64 = 262144; MLP up and down 2*32*256*64 = 1048576
  // each: 3276800 FLOPs, Narayanan's 24Bsh^2 + 4Bs^2h.
  // Memory-bound, forward (bytes read + written, 2 per element): LayerNorm 2*32*64*2 = 8192
  // twice; softmax 2 x 2048 scores x 2 = 8192; bias-GELU 2*32*256*2 = 32768; residual (read 2,
  // write 1) 32*64*6 = 12288 twice: 81920 bytes.
  const PassTimes t = total(ops);
  EXPECT_NEAR(t.forward_s, 3276800e-12 + 81920e-12, 1e-20);
  // W: the four weight products once more, 3145728 FLOPs. B: the weight products' input
  // gradients (3145728) and both attention products twice (262144); backward bytes: LayerNorm
  // 3*2048*2 = 12288 twice, softmax 12288, GELU 49152, residual 32*64*4 = 8192 twice.
  EXPECT_NEAR(t.backward_weight_s, 3145728e-12, 1e-20);
  EXPECT_NEAR(t.backward_input_s, 3407872e-12 + 102400e-12, 1e-20);
  EXPECT_EQ(t.recompute_s, 0);
  EXPECT_EQ(ops.size(), 12u);  // 6 products, 6 memory-bound kernels (no dropout)
}

TEST(TimeModel, RecomputeRerunsWhatItDiscards) {
  ClockShape s = small_shape();
  const PassTimes none = total(layer_ops(s, unit_gpu()));
  s.recompute = Recompute::full;
  const PassTimes full = total(layer_ops(s, unit_gpu()));
  EXPECT_NEAR(full.recompute_s, none.forward_s, 1e-20);
  EXPECT_NEAR(full.backward_input_s, none.backward_input_s + none.forward_s, 1e-20);
  s.recompute = Recompute::selective;
  const PassTimes selective = total(layer_ops(s, unit_gpu()));
  // Scores, softmax and scores x V: 65536 * 2 FLOPs and 8192 bytes.
  EXPECT_NEAR(selective.recompute_s, 131072e-12 + 8192e-12, 1e-20);
}

TEST(TimeModel, TensorAndSequenceParallelShardTheWork) {
  ClockShape s = small_shape();
  s.tp = 2;
  s.sequence_parallel = true;
  const PassTimes t = total(layer_ops(s, unit_gpu()));
  // Every product and the softmax and GELU halve; with SP the LayerNorms and residuals too.
  EXPECT_NEAR(t.forward_s, (3276800e-12 + 81920e-12) / 2, 1e-20);
}

TEST(TimeModel, DropoutAndFp32) {
  ClockShape s = small_shape();
  s.dropout = true;
  const PassTimes with = total(layer_ops(s, unit_gpu()));
  const PassTimes without = total(layer_ops(small_shape(), unit_gpu()));
  // Attention dropout: 2048 x (2*2 + 1) bytes; each residual adds a 1-byte mask: 2048 x 2.
  EXPECT_NEAR(with.forward_s - without.forward_s, (2048 * 5 + 2048 * 2) * 1e-12, 1e-20);
  s.dropout = false;
  s.activation_bytes = 4;
  const GpuSpec g = unit_gpu();
  EXPECT_EQ(matmul_peak_flops(g, 4), 0.5e12);  // fp32 runs at the fp32 peak
  const PassTimes fp32 = total(layer_ops(s, g));
  EXPECT_NEAR(fp32.forward_s, 2 * 3276800e-12 + 2 * 81920e-12, 1e-20);
}

TEST(TimeModel, HeadEmbeddingAndOptimizer) {
  const ClockShape s = small_shape();
  // Final LayerNorm 8192 bytes; logits 2*32*100*64 = 409600 FLOPs; cross-entropy
  // 32*100*(2 + 4) = 19200 bytes.
  EXPECT_NEAR(total(head_ops(s, unit_gpu())).forward_s, 409600e-12 + 8192e-12 + 19200e-12, 1e-20);
  EXPECT_NEAR(total(embedding_ops(s, unit_gpu())).forward_s, 3 * 32 * 64 * 2e-12, 1e-20);
  // Mixed-precision Adam: 2 + 12 + 2 bytes; moved per parameter 2*2 + 2*12 + 2 = 30.
  GpuSpec g = unit_gpu();
  g.rates.kernel_overhead_us = 5;
  EXPECT_NEAR(optimizer_seconds(1e6, kMixedPrecisionAdam, g, 4), 30e6 / 1e12 + 20e-6, 1e-15);
}

TEST(TimeModel, WithoutRatesItIsTheOneEfficiencyClock) {
  GpuSpec g;
  g.peak_flops = 1e12;
  g.compute_efficiency = 0.5;  // no rates: products at half peak, nothing else costs
  const PassTimes t = total(layer_ops(small_shape(), g));
  EXPECT_NEAR(t.forward_s, 3276800e-12 / 0.5, 1e-20);
  EXPECT_EQ(optimizer_seconds(1e6, kMixedPrecisionAdam, g, 4), 0);
}

TEST(TimeModel, LinksAtTheirShare) {
  Cluster c = parse_cluster("2x8xA100");
  c.gpu.rates.link_efficiency = 0.5;
  const Cluster e = effective_links(c);
  EXPECT_DOUBLE_EQ(e.intra_node.bandwidth_bytes_per_s, 150e9);
  EXPECT_DOUBLE_EQ(e.inter_node.bandwidth_bytes_per_s, 12.5e9);
  EXPECT_DOUBLE_EQ(e.intra_node.latency_us, c.intra_node.latency_us);
}

TEST(TimeModel, SingleGpuStepIsItsOperations) {
  // One GPU: the step is M x (F + B + W) of the stage (layers, head, embedding) plus the
  // optimizer over every parameter, nothing else.
  PlanInput in;
  in.model = model_preset("megatron-1.7b");
  in.cluster = parse_cluster("1x1xA100");
  in.training.global_batch = 4;
  Layout l;
  l.micro_batch = 2;
  const Plan p = evaluate(in, l);
  ClockShape s;
  s.model = in.model;
  s.micro_batch = 2;
  const GpuSpec& g = in.cluster.gpu;
  PassTimes stage = total(layer_ops(s, g)).scaled(static_cast<double>(in.model.layers));
  stage += total(head_ops(s, g));
  stage += total(embedding_ops(s, g));
  const double per_mb = stage.forward_s + stage.backward_input_s + stage.backward_weight_s;
  const double optimizer =
      optimizer_seconds(static_cast<double>(p.memory.stage_params), in.training.state_bytes, g,
                        static_cast<double>(in.model.layers));
  EXPECT_NEAR(p.time.optimizer_s, optimizer, 1e-15);
  EXPECT_NEAR(p.time.step_s, 2 * per_mb + optimizer, 1e-12 * p.time.step_s);
}

TEST(RatesFile, RoundTripsAndRefusesNamingTheField) {
  const Cluster c = parse_cluster("2x8xA100");
  ASSERT_TRUE(c.gpu.rates.present);
  const nlohmann::json j = to_json(c);
  const Cluster back = cluster_from_json(j, "c.json");
  EXPECT_TRUE(back.gpu.rates.present);
  EXPECT_EQ(back.gpu.rates.gemm_efficiency, c.gpu.rates.gemm_efficiency);
  EXPECT_EQ(back.gpu.rates.kernel_overhead_us, c.gpu.rates.kernel_overhead_us);
  EXPECT_EQ(back.gpu.rates.memory_efficiency, c.gpu.rates.memory_efficiency);
  EXPECT_EQ(back.gpu.rates.link_efficiency, c.gpu.rates.link_efficiency);
  EXPECT_EQ(back.gpu.rates.memory_bytes_per_s, c.gpu.rates.memory_bytes_per_s);
  EXPECT_EQ(back.gpu.rates.fp32_peak_flops, c.gpu.rates.fp32_peak_flops);
  auto refused = [&](const nlohmann::json& bad, const std::string& field) {
    try {
      cluster_from_json(bad, "c.json");
      ADD_FAILURE() << "accepted without " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  nlohmann::json missing = j;
  missing["gpu"]["rates"].erase("memory_efficiency");
  refused(missing, "gpu.rates.memory_efficiency");
  nlohmann::json implausible = j;
  implausible["gpu"]["rates"]["gemm_efficiency"] = 1.5;
  refused(implausible, "gpu.rates.gemm_efficiency");
  nlohmann::json units = j;
  units["gpu"]["rates"]["memory_bytes_per_s"] = 2039;  // GB/s where bytes/s belong
  refused(units, "gpu.rates.memory_bytes_per_s");
  nlohmann::json version = j;
  version["gpu"]["rates"]["version"] = 2;
  refused(version, "gpu.rates.version");
  nlohmann::json negative = j;
  negative["gpu"]["rates"]["kernel_overhead_us"] = -1;
  refused(negative, "gpu.rates.kernel_overhead_us");
  // Without rates the file still reads: the one-efficiency clock.
  nlohmann::json none = j;
  none["gpu"].erase("rates");
  EXPECT_FALSE(cluster_from_json(none, "c.json").gpu.rates.present);
}

}  // namespace
}  // namespace dtrain::plan
