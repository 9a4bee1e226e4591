// The MoE objective is the serial model's in every layout that splits a micro-batch's work: with
// the load-balancing loss on and a capacity that drops assignments, each pipeline schedule (and
// gradient accumulation without one) and each context-parallel algorithm and split trains the
// same model as tests/reference/serial_engine.h run over the same micro-batches (a pipeline's
// M micro-batches, or a DP rank's rows cut into its M: the serial run accumulates over dp x M
// runs of consecutive rows, in rank order). Compared as layout_equality_test.cc does: the loss
// of every step and the evaluation loss after, every parameter and both AdamW moments. The aux
// loss is a statistic of each micro-batch (of each DP rank's micro-batch, as in Megatron): the
// serial run's micro-batches are the same rows, so the objective is the same.
// Before the fixes these compared: a pipeline scaled the aux gradient of blocks outside the
// head's chunk by 1 instead of 1/M, and each CP rank took the aux loss and the capacity over its
// own T/cp tokens.
//
// Tolerances are context_parallel_equality_test.cc's (other orders of the same float sums).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/check.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "e2e/equality_support.h"
#include "reference/serial_engine.h"

namespace dtrain::train {
namespace {

constexpr int kSteps = 3;
constexpr float kLr = 1e-3f;
constexpr double kParamTol = 1e-5;
constexpr double kLossTol = 4e-6;
constexpr double kMomentTol = 1e-4;

// L4 C32 NH4 T16 B8, 4 experts top-2 in every block, capacity factor 1 (ceil(N k / E) per
// expert: some assignments drop) and a large aux coefficient, so both matter to every step.
StepConfig moe_config(Recompute recompute = Recompute::none) {
  StepConfig c;
  c.model = {.vocab = 64, .context = 16, .layers = 4, .heads = 4, .channels = 32};
  c.model.moe = {
      .experts = 4, .top_k = 2, .every = 1, .capacity_factor = 1.0, .aux_loss_coef = 0.1};
  c.batch = 8;
  c.seq = 16;
  c.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
  c.grad_clip = 1.0f;
  c.init_seed = 11;
  c.recompute = recompute;
  return c;
}

struct Case {
  std::string name;
  LayoutOptions o;
  int64_t serial_microbatches;  // dp x M: the serial run's runs of rows per step
};

e2e::Outcome run_case(const StepConfig& c, const Case& k, const std::vector<data::Batch>& data,
                      int64_t* dropped) {
  const EngineConfig config = make_engine_config(c, k.o);
  const int world = config.world();
  std::vector<checkpoint::RankState> states(static_cast<size_t>(world));
  std::vector<std::vector<float>> losses(static_cast<size_t>(world));
  std::vector<int64_t> drops(static_cast<size_t>(world), 0);
  comm::threads::run_ranks(world, [&](comm::Communicator& comm) {
    Engine engine(config, comm);
    std::vector<float>& mine = losses[static_cast<size_t>(comm.rank())];
    for (const data::Batch& b : data) {
      const StepStats s = engine.train_step(b, kLr);
      mine.push_back(s.loss);
      drops[static_cast<size_t>(comm.rank())] += s.moe_dropped;
    }
    mine.push_back(engine.eval_loss(data[0]));
    states[static_cast<size_t>(comm.rank())] = engine.export_state();
  });
  e2e::Outcome out = e2e::empty_outcome(c.model);
  out.losses = losses[0];
  *dropped = drops[0];
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(losses[static_cast<size_t>(r)], out.losses) << k.name << ": rank " << r;
  }
  for (const checkpoint::RankState& s : states) {
    e2e::add_pieces(model::gpt_param_table(c.model), s, out);
  }
  return out;
}

void expect_equal_to_serial(const std::vector<Case>& cases, Recompute recompute = Recompute::none) {
  const StepConfig c = moe_config(recompute);
  const std::vector<data::Batch> data = e2e::random_batches(c, kSteps);
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const e2e::Outcome serial = e2e::run_serial(c, data, kLr, k.serial_microbatches);
    int64_t dropped = 0;
    const e2e::Outcome got = run_case(c, k, data, &dropped);
    const e2e::Worst w = e2e::compare(c, serial, got);
    std::printf("  %-34s %lld dropped  loss %.1e  param %.1e  m %.1e  v %.1e\n", k.name.c_str(),
                static_cast<long long>(dropped), w.loss, w.state[0], w.state[1], w.state[2]);
    EXPECT_GT(dropped, 0) << "the capacity must drop assignments for the test to cover it";
    EXPECT_LE(w.loss, kLossTol);
    EXPECT_LE(w.state[0], kParamTol);
    EXPECT_LE(w.state[1], kMomentTol);
    EXPECT_LE(w.state[2], kMomentTol);
  }
}

Case pipeline(plan::ScheduleKind schedule, int dp = 1) {
  Case k;
  k.o.pp = 2;
  k.o.dp = dp;
  k.o.microbatches = 2;
  k.o.schedule = schedule;
  k.name = str("pp2 m2 ", plan::name(schedule), dp > 1 ? str(" dp", dp) : "");
  k.serial_microbatches = 2 * dp;
  return k;
}

TEST(MoeObjectiveEquality, EveryPipelineScheduleMatchesTheSerialMicroBatches) {
  std::vector<Case> cases;
  for (plan::ScheduleKind s :
       {plan::ScheduleKind::one_f_one_b, plan::ScheduleKind::gpipe, plan::ScheduleKind::interleaved,
        plan::ScheduleKind::zero_bubble_h1}) {
    cases.push_back(pipeline(s));
  }
  cases.push_back(pipeline(plan::ScheduleKind::one_f_one_b, 2));
  Case accum;  // the same micro-batches without a pipeline
  accum.o.grad_accum = 2;
  accum.name = "grad-accum 2";
  accum.serial_microbatches = 2;
  cases.push_back(accum);
  expect_equal_to_serial(cases);
}

TEST(MoeObjectiveEquality, PipelineWithFullRecomputeMatchesTheSerialMicroBatches) {
  expect_equal_to_serial({pipeline(plan::ScheduleKind::one_f_one_b)}, Recompute::full);
}

Case context(int cp, plan::CpAlgorithm algo, bool contiguous = false) {
  Case k;
  k.o.cp = cp;
  k.o.cp_algorithm = algo;
  k.o.cp_contiguous = contiguous;
  k.name = str("cp", cp, " ", plan::name(algo), contiguous ? " contiguous" : "");
  k.serial_microbatches = 1;
  return k;
}

TEST(MoeObjectiveEquality, EveryContextParallelAlgorithmMatchesTheSerialRun) {
  std::vector<Case> cases;
  for (int cp : {2, 4}) {
    for (plan::CpAlgorithm a :
         {plan::CpAlgorithm::ring, plan::CpAlgorithm::all_gather, plan::CpAlgorithm::ulysses}) {
      cases.push_back(context(cp, a));
    }
    cases.push_back(context(cp, plan::CpAlgorithm::ring, true));
  }
  expect_equal_to_serial(cases);
}

TEST(MoeObjectiveEquality, ContextParallelWithOtherAxesMatchesTheSerialRun) {
  std::vector<Case> cases;
  Case tp = context(2, plan::CpAlgorithm::ring);
  tp.o.tp = 2;
  tp.o.sequence_parallel = true;
  tp.name += " tp2 sp";
  cases.push_back(tp);
  Case dp = context(2, plan::CpAlgorithm::all_gather);
  dp.o.dp = 2;
  dp.name += " dp2";
  dp.serial_microbatches = 2;
  cases.push_back(dp);
  Case pp = context(2, plan::CpAlgorithm::ulysses);
  pp.o.pp = 2;
  pp.o.microbatches = 2;
  pp.name += " pp2 m2";
  pp.serial_microbatches = 2;
  cases.push_back(pp);
  expect_equal_to_serial(cases);
}

}  // namespace
}  // namespace dtrain::train
