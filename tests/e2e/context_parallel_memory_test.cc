// Activation memory under context parallelism (issue 33): what the engine holds per CP rank equals
// plan::cp_activation_bytes_per_layer, over cp {2, 4} x each algorithm x recompute none /
// selective / full, with and without tp 2 + SP. One block's bytes are measured as the tracker's
// activation peak of a 2-block model less that of a 1-block model (everything else on a rank is
// the same in both); the whole peak equals the layout report's plan (blocks, head, workspace,
// recompute scratch), and an evaluation leaves nothing behind. The 1/cp scaling is measured too:
// a CP block's per-token tensors are the serial (selective) block's over cp.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/cost/context_parallel.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "dtrain/report/layout_report.h"
#include "e2e/equality_support.h"

namespace dtrain::train {
namespace {

constexpr float kLr = 1e-3f;
constexpr int64_t kBatch = 2, kSeq = 16, kChannels = 32, kHeads = 8;

// NH 8: Ulysses splits heads over cp x tp = 8; T 16: the balanced split at cp 4 cuts 8 chunks.
StepConfig config(int layers, Recompute recompute,
                  model::Precision precision = model::Precision::fp32) {
  StepConfig c;
  c.precision = precision;
  c.model = {
      .vocab = 64, .context = kSeq, .layers = layers, .heads = kHeads, .channels = kChannels};
  c.batch = kBatch;
  c.seq = kSeq;
  c.init_seed = 5;
  c.recompute = recompute;
  return c;
}

struct Case {
  int cp = 1;
  plan::CpAlgorithm algo = plan::CpAlgorithm::ring;
  int tp = 1;  // with SP when 2
  Recompute recompute = Recompute::none;
  model::Precision precision = model::Precision::fp32;
  std::string name() const {
    return str("cp", cp, " ", cp > 1 ? plan::name(algo) : "-", tp > 1 ? " tp2+sp" : "",
               " recompute ", name_of(recompute),
               precision == model::Precision::bf16 ? " bf16" : "");
  }
  static std::string name_of(Recompute r) { return std::string(dtrain::name(r)); }
};

struct Measured {
  int64_t peak = 0;         // activations tag, after one training step
  double planned_peak = 0;  // the layout report's plan beside it
  int64_t microbatch = 0;   // the executor's one micro-batch
  double planned_microbatch = 0;
  int64_t after_step = 0, after_eval = 0;  // current bytes
};

// Rank 0's figures; every rank of the grid holds the same (balanced split, equal shards).
Measured run(const Case& k, int layers) {
  const StepConfig c = config(layers, k.recompute, k.precision);
  LayoutOptions o;
  o.cp = k.cp;
  o.cp_algorithm = k.algo;
  o.tp = k.tp;
  o.sequence_parallel = k.tp > 1;
  const EngineConfig ec = make_engine_config(c, o);
  const std::vector<data::Batch> data = e2e::random_batches(c, 1);
  std::vector<Measured> per_rank(static_cast<size_t>(ec.world()));
  comm::threads::run_ranks(ec.world(), [&](comm::Communicator& comm) {
    Engine engine(ec, comm);
    engine.train_step(data[0], kLr);
    Measured& m = per_rank[static_cast<size_t>(comm.rank())];
    const RankRow row = measure_rank(engine);
    m.peak = engine.memory().peak_bytes(MemoryTag::activations);
    m.planned_peak = row.planned_activations_peak_bytes;
    m.microbatch = row.microbatch_activation_bytes;
    m.planned_microbatch = row.planned_microbatch_activation_bytes;
    m.after_step = engine.memory().current_bytes(MemoryTag::activations);
    engine.eval_loss(data[0]);
    m.after_eval = engine.memory().current_bytes(MemoryTag::activations);
  });
  for (size_t r = 1; r < per_rank.size(); ++r) {
    EXPECT_EQ(per_rank[r].peak, per_rank[0].peak) << k.name() << ": rank " << r;
  }
  return per_rank[0];
}

// The engine's activation shape (fp32, no dropout, LayerNorm statistics) at the whole sequence.
plan::ActivationShape whole_shape(const Case& k) {
  plan::ActivationShape s;
  s.seq = kSeq;
  s.micro_batch = kBatch;
  s.hidden = kChannels;
  s.heads = kHeads;
  s.tp = k.tp;
  s.sequence_parallel = k.tp > 1;
  s.recompute = k.recompute;
  s.bytes_per_element = 4;
  s.dropout = false;
  s.count_layernorm_stats = true;
  if (k.precision == model::Precision::bf16) {  // matmul inputs bf16, the rest fp32
    s.bytes_per_element = 2;
    s.elementwise_bytes_per_element = 4;
  }
  return s;
}

// One block's bytes, measured: a 2-block model's peak less a 1-block model's.
struct Block {
  int64_t measured = 0;
  Measured two;
};
Block measure_block(const Case& k) {
  const Measured one = run(k, 1);
  Block b{.measured = 0, .two = run(k, 2)};
  b.measured = b.two.peak - one.peak;
  return b;
}

TEST(ContextParallelMemory, EngineBlockBytesEqualTheFormula) {
  constexpr plan::CpAlgorithm kAlgorithms[] = {
      plan::CpAlgorithm::ring, plan::CpAlgorithm::all_gather, plan::CpAlgorithm::ulysses};
  int cases = 0;
  for (const int tp : {1, 2}) {
    for (const Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
      // The serial block (cp 1) and its selective twin: the per-token tensors CP divides.
      const Block serial = measure_block({1, plan::CpAlgorithm::ring, tp, recompute});
      const Block serial_tokens =
          measure_block({1, plan::CpAlgorithm::ring, tp,
                         recompute == Recompute::full ? Recompute::full : Recompute::selective});
      for (const int cp : {2, 4}) {
        for (const plan::CpAlgorithm algo : kAlgorithms) {
          const Case k{cp, algo, tp, recompute};
          SCOPED_TRACE(k.name());
          const Block b = measure_block(k);
          const plan::ActivationShape whole = whole_shape(k);
          const double formula = plan::cp_activation_bytes_per_layer(whole, cp, algo);
          EXPECT_EQ(static_cast<double>(b.measured), formula);
          // The whole rank: blocks, head, workspace and scratch as the layout report plans them.
          EXPECT_EQ(static_cast<double>(b.two.peak), b.two.planned_peak);
          EXPECT_EQ(static_cast<double>(b.two.microbatch), b.two.planned_microbatch);
          EXPECT_EQ(b.two.after_eval, b.two.after_step) << "an evaluation left state behind";
          // 1/cp: without the algorithm's own state, a CP block is the serial block's per-token
          // tensors over cp (no score term in any mode).
          const double state = recompute == Recompute::full
                                   ? 0.0
                                   : plan::cp_attention_state_bytes_per_layer(whole, cp, algo);
          EXPECT_EQ((static_cast<double>(b.measured) - state) * cp,
                    static_cast<double>(serial_tokens.measured));
          std::printf(
              "  %-34s block %7lld bytes (formula %7.0f; serial %7lld, x%.3f)  rank peak %7lld "
              "(plan %7.0f)\n",
              k.name().c_str(), static_cast<long long>(b.measured), formula,
              static_cast<long long>(serial.measured),
              static_cast<double>(b.measured) / static_cast<double>(serial.measured),
              static_cast<long long>(b.two.peak), b.two.planned_peak);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 36);
}

// Mixed precision: a block's matrix-product inputs bf16, the rest fp32, and the CP group's state
// (log-sum-exp, gathered K/V, head-split tensors) fp32: the formula's elementwise element size.
TEST(ContextParallelMemory, MixedPrecisionBlockBytesEqualTheFormula) {
  for (const plan::CpAlgorithm algo :
       {plan::CpAlgorithm::ring, plan::CpAlgorithm::all_gather, plan::CpAlgorithm::ulysses}) {
    for (const Recompute recompute : {Recompute::none, Recompute::full}) {
      const Case k{2, algo, 2, recompute, model::Precision::bf16};
      SCOPED_TRACE(k.name());
      const Block b = measure_block(k);
      EXPECT_EQ(static_cast<double>(b.measured),
                plan::cp_activation_bytes_per_layer(whole_shape(k), 2, algo));
      EXPECT_EQ(static_cast<double>(b.two.peak), b.two.planned_peak);
      std::printf("  %-40s block %7lld bytes, rank peak %7lld (plan %7.0f)\n", k.name().c_str(),
                  static_cast<long long>(b.measured), static_cast<long long>(b.two.peak),
                  b.two.planned_peak);
    }
  }
}

}  // namespace
}  // namespace dtrain::train
