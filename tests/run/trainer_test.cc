// The trainer on one rank of the engine (the run `dtrain train` makes without layout flags): the
// same seed gives a bitwise identical run, the loss on the default
// corpus falls clearly below ln V, memory reported per tag equals the plan, and bad options
// fail with errors that name the flag.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/check.h"
#include "dtrain/engine/engine.h"
#include "dtrain/model/gemm.h"
#include "dtrain/run/run.h"
#include "dtrain/run/trainer.h"

namespace dtrain::train {
namespace {

TrainOptions quick(int64_t steps) {
  TrainOptions o;
  o.model = "tiny";
  o.steps = steps;
  o.eval_every = 0;
  o.eval_batches = 2;
  return o;
}

// Runs the options on one rank and returns the summary and the final parameters.
std::pair<TrainSummary, std::vector<float>> run_and_keep_params(const TrainOptions& o) {
  const TrainSetup setup = resolve(o);
  std::pair<TrainSummary, std::vector<float>> out;
  comm::threads::run_ranks(1, [&](comm::Communicator& world) {
    Engine engine(setup.engine, world);
    Trainer trainer(setup.trainer, engine, setup.data);
    out.first = trainer.run();
    out.second.assign(engine.model().params().begin(), engine.model().params().end());
  });
  return out;
}

TEST(Trainer, SameSeedGivesABitwiseIdenticalRun) {
  TrainOptions o = quick(12);
  o.seed = 5;
  const auto [a, pa] = run_and_keep_params(o);
  const auto [b, pb] = run_and_keep_params(o);
  EXPECT_EQ(a.train_losses, b.train_losses);  // float ==: bit for bit
  EXPECT_EQ(a.final_val_loss, b.final_val_loss);
  EXPECT_EQ(pa, pb);
  o.seed = 6;
  const auto [c, pc] = run_and_keep_params(o);
  EXPECT_NE(a.train_losses, c.train_losses);
  EXPECT_NE(pa, pc);
}

TEST(Trainer, MeasuresOtherProgramsLoadOnlyOverStepsAfterTheFirst) {
  // The threads backend's run is one process: the cores the other programs kept busy are
  // measured from the end of the first step (a figure in [0, cores], and the window it covers);
  // one step leaves no window, and an MPI job (whose other ranks are processes too) none.
  TrainOptions o = quick(4);
  const auto [several, p1] = run_and_keep_params(o);
  EXPECT_GE(several.other_load_cores, 0);
  EXPECT_LE(several.other_load_cores, std::thread::hardware_concurrency() + 0.5);
  EXPECT_GT(several.other_load_window_s, 0);
  o.steps = 1;
  const auto [one, p2] = run_and_keep_params(o);
  EXPECT_EQ(one.other_load_cores, -1);
  TrainSetup setup = resolve(quick(4));
  EXPECT_TRUE(setup.trainer.single_process_job);
}

TEST(Trainer, ComputeThreadsDoNotChangeABit) {
  // The team shares out the pieces of each GEMM (fixed by its shape, model::gemm_split), the
  // heads, the elementwise ops' rows and the optimizer's span; every piece is computed by the
  // same calls as in the serial run, so this holds under any BLAS kernel. A bench-sized custom
  // model makes the GEMMs big enough to split. OpenBLAS single-threaded, as run_training sets it.
  const int blas_before = model::blas_threads();
  model::set_blas_threads(1);
  TrainOptions o = quick(3);
  o.channels = 128;
  o.heads = 4;
  o.seq = 32;
  o.batch = 4;
  o.seed = 7;
  const auto [a, pa] = run_and_keep_params(o);
  o.threads = 2;
  const auto [b, pb] = run_and_keep_params(o);
  model::set_blas_threads(blas_before);
  EXPECT_EQ(a.train_losses, b.train_losses);
  EXPECT_EQ(pa, pb);
}

// Cross-entropy of the validation bytes under the training bytes' frequencies: the best a
// model without context can do.
double unigram_loss(const data::TokenSplit& split) {
  std::vector<double> count(256, 1.0);  // add-one, so no byte has probability 0
  for (size_t i = 0; i < split.train.size(); ++i) count[static_cast<size_t>(split.train[i])] += 1;
  const double total = static_cast<double>(split.train.size()) + 256;
  double loss = 0;
  for (size_t i = 0; i < split.val.size(); ++i) {
    loss -= std::log(count[static_cast<size_t>(split.val[i])] / total);
  }
  return loss / static_cast<double>(split.val.size());
}

TEST(Trainer, LossOnTheDefaultCorpusFallsClearlyBelowLnV) {
  // 200 steps of the tiny model with the default schedule (about half a second). A uniform
  // guess scores ln 256 = 5.55 and byte frequencies alone about 3.07 on this corpus; the run
  // must start near ln V and end 0.3 below the frequency model, which takes context.
  TrainOptions o = quick(200);
  o.eval_every = 50;
  o.lr = 3e-3f;
  const double unigram = unigram_loss(resolve(o).data);
  const TrainSummary s = run_training(o, nullptr);
  EXPECT_NEAR(s.first_val_loss, s.ln_vocab, 0.1);
  EXPECT_LT(s.final_val_loss, unigram - 0.3);
  EXPECT_LT(s.final_train_loss_avg, unigram - 0.3);
  ASSERT_EQ(s.evals.size(), 5u);  // steps 0, 50, 100, 150, 200
  EXPECT_LT(s.evals[4].val_loss, s.evals[2].val_loss);
  std::printf(
      "tiny, 200 steps: val loss %.4f -> %.4f, train (last 10) %.4f; ln V %.4f, "
      "byte frequencies %.4f\n",
      s.first_val_loss, s.final_val_loss, s.final_train_loss_avg, s.ln_vocab, unigram);
}

TEST(Trainer, ReportsMemoryPerTagEqualToThePlan) {
  TrainOptions o = quick(2);
  o.threads = 2;  // the workspace holds one attention-score gradient per thread
  const TrainSummary s = run_training(o, nullptr);
  const int64_t param_bytes = 4 * s.param_count;
  for (const MemoryRow& m : s.memory) {
    switch (m.tag) {
      case MemoryTag::params:
      case MemoryTag::grads:
        EXPECT_EQ(m.peak_bytes, param_bytes);
        break;
      case MemoryTag::optimizer:
        EXPECT_EQ(m.peak_bytes, 2 * param_bytes);
        break;
      case MemoryTag::activations:
        EXPECT_EQ(static_cast<double>(m.peak_bytes), s.planned_activation_bytes);
        EXPECT_EQ(m.current_bytes, m.peak_bytes);  // allocated once, never grown
        break;
      case MemoryTag::communication:
        EXPECT_EQ(m.peak_bytes, 0);
        break;
    }
  }
}

TEST(Trainer, EvaluationDoesNotChangeTheParameters) {
  const TrainSetup setup = resolve(quick(1));
  comm::threads::run_ranks(1, [&](comm::Communicator& world) {
    Engine engine(setup.engine, world);
    Trainer trainer(setup.trainer, engine, setup.data);
    const std::vector<float> before(engine.model().params().begin(), engine.model().params().end());
    const float a = trainer.evaluate();
    const float b = trainer.evaluate();
    EXPECT_EQ(a, b);
    EXPECT_TRUE(std::equal(before.begin(), before.end(), engine.model().params().begin()));
  });
}

std::string error_of(const TrainOptions& o) {
  try {
    resolve(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Resolve, BadOptionsNameTheFlag) {
  struct Case {
    std::function<void(TrainOptions&)> set;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {[](TrainOptions& o) { o.model = "huge"; }, {"--model", "huge", "tiny", "bench"}},
      {[](TrainOptions& o) { o.heads = 3; }, {"--heads 3", "--hidden 32"}},
      {[](TrainOptions& o) { o.layers = 0; }, {"--layers", "positive"}},
      {[](TrainOptions& o) { o.channels = -4; }, {"--hidden", "positive"}},
      {[](TrainOptions& o) { o.vocab = 100; }, {"--vocab 100", "256"}},
      {[](TrainOptions& o) { o.batch = 0; }, {"--global-batch", "positive"}},
      {[](TrainOptions& o) { o.seq = 64; }, {"--seq-length 64", "--context 32"}},
      {[](TrainOptions& o) { o.steps = 0; }, {"--steps", "positive"}},
      {[](TrainOptions& o) { o.lr = -1; }, {"--lr"}},
      {[](TrainOptions& o) { o.threads = 0; }, {"--threads"}},
      {[](TrainOptions& o) {
         o.threads = 2;
         o.blas_threads = 2;
       },
       {"--threads 2", "--blas-threads 2"}},
      {[](TrainOptions& o) { o.data = "/nonexistent/x.txt"; }, {"--data", "/nonexistent/x.txt"}},
  };
  for (const Case& c : cases) {
    TrainOptions o = quick(1);
    c.set(o);
    const std::string e = error_of(o);
    for (const std::string& w : c.words)
      EXPECT_NE(e.find(w), std::string::npos) << "'" << e << "' lacks '" << w << "'";
  }
  EXPECT_EQ(error_of(quick(1)), "");
}

TEST(Resolve, ContextLongerThanTheDataNamesSeqAndFile) {
  const auto path = std::filesystem::temp_directory_path() / "dtrain_trainer_test_short.txt";
  std::ofstream(path) << std::string(300, 'a');  // 270 training, 30 validation bytes
  TrainOptions o = quick(1);
  o.data = path.string();
  // T defaults to the tiny context, 32, and needs 33 validation tokens: the error names the
  // flag that set T.
  std::string e = error_of(o);
  EXPECT_NE(e.find("--context 32"), std::string::npos) << e;
  EXPECT_NE(e.find(path.string()), std::string::npos) << e;
  o.seq = 31;
  e = error_of(o);
  EXPECT_NE(e.find("--seq-length 31"), std::string::npos) << e;
  o.seq = 16;
  EXPECT_EQ(error_of(o), "");
}

}  // namespace
}  // namespace dtrain::train
