// Fault injection: one rank throws or stops silently before a chosen step; every other rank
// fails soon with an error naming that rank and the operation with its sequence number, nothing
// hangs, and resuming from the last checkpoint ends with the uninterrupted run's state.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>

#include "checkpoint_harness.h"
#include "dtrain/core/check.h"
#include "dtrain/run/fault.h"

namespace dtrain::train {
namespace {

using namespace testing;
namespace fs = std::filesystem;

TEST(Fault, ParsesAndRejectsSpecs) {
  const FaultSpec f = parse_fault("rank=2,step=5,kind=exit");
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.step, 5);
  EXPECT_EQ(f.kind, FaultKind::exit_rank);
  EXPECT_EQ(parse_fault("kind=throw,step=1,rank=0").kind, FaultKind::throw_error);
  const FaultSpec oom = parse_fault("rank=1,step=3,kind=bad_alloc");
  EXPECT_EQ(oom.kind, FaultKind::bad_alloc);
  EXPECT_EQ(describe(oom), "rank=1,step=3,kind=bad_alloc");
  // It fires as the allocation failure it stands for, at its rank and step only.
  EXPECT_THROW(inject_fault_if_due(oom, 1, 3), std::bad_alloc);
  EXPECT_NO_THROW(inject_fault_if_due(oom, 0, 3));
  EXPECT_NO_THROW(inject_fault_if_due(oom, 1, 2));
  for (const char* bad : {"", "rank=1", "rank=1,step=0,kind=exit", "rank=x,step=1,kind=exit",
                          "rank=1,step=1,kind=segv", "rank=1,step=1,kind=exit,when=now", "r"}) {
    try {
      parse_fault(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--inject-fault"), std::string::npos) << e.what();
    }
  }
}

// The threads backend's side of kind=exit: the exited rank records no error of its own, the
// peer waiting on it fails naming it, and a run whose only rank exited still fails.
TEST(Fault, AnExitedRankIsSilentButTheRunFails) {
  try {
    comm::threads::run_ranks(2, [](comm::Communicator& c) {
      if (c.rank() == 1) throw comm::RankExited("stopped");
      float x = 0;
      c.recv(&x, sizeof x, 1, 5);
    });
    ADD_FAILURE() << "the run succeeded";
  } catch (const comm::CommError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 finished its work"), std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find("stopped"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      comm::threads::run_ranks(1, [](comm::Communicator&) { throw comm::RankExited("stopped"); }),
      comm::CommError);
}

TEST(Fault, OtherRanksNameTheFailedRankAndResumeFinishesTheRun) {
  const int64_t N = 4;
  const fs::path tmp = fresh_dir("fault");
  for (const Layout& l :
       {Layout{"dp2-zero1", 2, 1}, Layout{"tp2", 1, 0, 2}, Layout{"pp2", 1, 0, 1, 2},
        Layout{"dp4-zero3", 4, 3}, Layout{"dp2-pp2-zero3", 2, 3, 1, 2}}) {
    // The reference: N steps without a fault.
    TrainerConfig straight = ckpt_trainer(N, N);
    straight.checkpoint.save_dir = (tmp / l.name / "straight").string();
    on_layout(l, [&](StepEngine& e, int) { Trainer(straight, e, ckpt_data()).run(); });
    const checkpoint::SerialState expected =
        checkpoint::load_checkpoint(straight.checkpoint.save_dir).state;

    for (FaultKind kind : {FaultKind::throw_error, FaultKind::exit_rank}) {
      const std::string what = l.name + (kind == FaultKind::exit_rank ? " exit" : " throw");
      const int faulty = l.ranks() - 1;
      TrainerConfig t = ckpt_trainer(N, N);
      t.checkpoint.save_dir = (tmp / l.name / (kind == FaultKind::exit_rank ? "e" : "t")).string();
      t.checkpoint.save_every = 2;
      t.fault = FaultSpec{faulty, 3, kind};
      std::vector<std::string> errors(static_cast<size_t>(l.ranks()));
      std::mutex mu;
      const auto start = std::chrono::steady_clock::now();
      EXPECT_THROW(on_layout(l,
                             [&](StepEngine& e, int rank) {
                               try {
                                 Trainer(t, e, ckpt_data()).run();
                               } catch (const std::exception& ex) {
                                 std::lock_guard<std::mutex> lock(mu);
                                 errors[static_cast<size_t>(rank)] = ex.what();
                                 throw;
                               }
                             }),
                   Error)
          << what;
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_LT(seconds, 30) << what << ": the other ranks took too long to fail";
      const std::string named = "rank " + std::to_string(faulty);
      for (int r = 0; r < l.ranks(); ++r) {
        const std::string& e = errors[static_cast<size_t>(r)];
        if (r == faulty) {
          EXPECT_NE(e.find("injected fault"), std::string::npos) << what << ": " << e;
          continue;
        }
        EXPECT_NE(e.find(named), std::string::npos) << what << " rank " << r << ": " << e;
        EXPECT_NE(e.find('#'), std::string::npos)
            << what << " rank " << r << " does not name the operation's number: " << e;
      }
      // The last checkpoint (step 2) is whole; resuming finishes the run exactly.
      TrainerConfig resume = ckpt_trainer(N, N);
      resume.checkpoint.save_dir = t.checkpoint.save_dir;
      resume.checkpoint.resume = t.checkpoint.save_dir;
      on_layout(l, [&](StepEngine& e, int) { Trainer(resume, e, ckpt_data()).run(); });
      expect_same_state(expected, checkpoint::load_checkpoint(t.checkpoint.save_dir).state, what);
    }
  }
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace dtrain::train
