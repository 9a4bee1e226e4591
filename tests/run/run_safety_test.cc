// What keeps a run from losing work: the stop agreement of the ranks, the --save directory's
// owner and lock, the settings a --resume is checked against, and the progress figures after a
// resume.
#include <gtest/gtest.h>
#include <unistd.h>

#include <barrier>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/checkpoint/run_record.h"
#include "dtrain/checkpoint/save_directory.h"
#include "dtrain/core/check.h"
#include "dtrain/run/progress.h"
#include "dtrain/run/stop_request.h"
#include "error_text.h"
#include "reference/serial_engine.h"

namespace dtrain::train {
namespace {
namespace fs = std::filesystem;

using dtrain::test_support::error_of;

// The first rank to see the request fixes the stop one step on: a rank still finishing the
// current step reaches the same boundary later and must not stop there.
TEST(StopRequest, TheFirstSightingFixesTheNextBoundary) {
  StopRequest stop;
  EXPECT_FALSE(stop.should_stop(5)) << "no request yet";
  EXPECT_TRUE(stop.request(2));
  EXPECT_FALSE(stop.request(2)) << "a second request reports that one came before";
  EXPECT_FALSE(stop.should_stop(5));  // rank A sees it at boundary 5: one more step
  EXPECT_FALSE(stop.should_stop(5));  // rank B reaches boundary 5 afterwards: continues too
  EXPECT_TRUE(stop.should_stop(6));   // both stop after step 6
  EXPECT_TRUE(stop.should_stop(6));
  EXPECT_EQ(stop.signal_number(), 2);
}

// Eight rank threads that meet at a barrier inside every step (the collective every step ends
// with), one of them receiving the signal mid-step: all stop after the same step.
TEST(StopRequest, RanksInLockStepStopTogether) {
  StopRequest stop;
  constexpr int kRanks = 8;
  std::barrier step_collective(kRanks);
  std::vector<int64_t> stopped(kRanks, -1);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      for (int64_t done = 0; done < 1000; ++done) {
        if (r == 3 && done == 17) stop.request(15);  // the signal lands during step 18
        for (int k = 0; k < r * 50; ++k) std::this_thread::yield();  // uneven ranks
        step_collective.arrive_and_wait();
        if (stop.should_stop(done + 1)) {
          stopped[static_cast<size_t>(r)] = done + 1;
          return;
        }
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int64_t s : stopped) EXPECT_EQ(s, stopped[0]);
  EXPECT_GE(stopped[0], 18);
  EXPECT_LE(stopped[0], 19);
}

checkpoint::RunSettings settings() {
  checkpoint::RunSettings s;
  s.lr = 3e-3;
  s.min_lr = 3e-4;
  s.warmup = 20;
  s.schedule_steps = 200;
  s.beta1 = 0.9;
  s.beta2 = 0.95;
  s.eps = 1e-8;
  s.weight_decay = 0.1;
  s.grad_clip = 1;
  s.init_seed = 7;
  s.data_name = "a.txt";
  s.data_tokens = 1000;
  s.data_crc32 = 0x1234;
  return s;
}

TEST(RunRecord, DifferencesNameEachFlagAndSurviveJson) {
  checkpoint::RunRecord r{"00ff", "0.4.0", settings()};
  const checkpoint::RunRecord back =
      checkpoint::run_record_from_json(checkpoint::run_record_to_json(r), "m.json");
  EXPECT_EQ(back.id, r.id);
  EXPECT_EQ(back.settings, r.settings);
  checkpoint::RunSettings other = settings();
  EXPECT_TRUE(checkpoint::setting_differences(r.settings, other).empty());
  other.data_name = "moved/a.txt";  // the same tokens under another name
  other.init_seed = 9;              // recorded, not compared
  other.precision = "bf16";         // resumes across precisions
  EXPECT_TRUE(checkpoint::setting_differences(r.settings, other).empty());
  other.lr = 1e-3;
  other.warmup = 10;
  other.data_crc32 = 0x4321;
  const std::vector<std::string> d = checkpoint::setting_differences(r.settings, other);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], "--lr 0.003 -> 0.001");
  EXPECT_EQ(d[1], "--warmup 20 -> 10");
  EXPECT_NE(d[2].find("--data a.txt"), std::string::npos);
  EXPECT_NE(error_of([] {
              checkpoint::run_record_from_json(nlohmann::json::object(), "m.json");
            }).find("m.json"),
            std::string::npos);
}

class SaveDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("dtrain-save-" + std::to_string(::getpid()))).string();
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(SaveDirectory, BelongsToOneRun) {
  EXPECT_FALSE(checkpoint::save_directory_owner(dir_).has_value());
  EXPECT_NO_THROW(checkpoint::check_save_directory(dir_, "aa", false, false));
  {
    checkpoint::SaveDirectoryLock lock(dir_, "aa", false, false);
    // run.json alone claims nothing: a run killed before its first checkpoint leaves no owner.
    EXPECT_FALSE(checkpoint::save_directory_owner(dir_).has_value());
    fs::create_directories(fs::path(dir_) / "step-00000001");  // aa's first checkpoint
    EXPECT_EQ(checkpoint::save_directory_owner(dir_), "aa");
    // A second holder, even in this process (flock locks an open file description).
    const std::string busy =
        error_of([&] { checkpoint::SaveDirectoryLock second(dir_, "aa", true, false); });
    EXPECT_NE(busy.find("is in use by another dtrain run (pid " + std::to_string(::getpid())),
              std::string::npos)
        << busy;
  }
  const std::string other =
      error_of([&] { checkpoint::check_save_directory(dir_, "bb", false, false); });
  EXPECT_NE(other.find("another run (run aa)"), std::string::npos) << other;
  EXPECT_NE(other.find("--resume " + dir_), std::string::npos) << other;
  EXPECT_NO_THROW(checkpoint::check_save_directory(dir_, "aa", true, false));
  EXPECT_NO_THROW(checkpoint::check_save_directory(dir_, "bb", false, true))
      << "--overwrite hands it over";
  { checkpoint::SaveDirectoryLock taken(dir_, "bb", false, true); }
  EXPECT_EQ(checkpoint::save_directory_owner(dir_), "bb");
}

TEST_F(SaveDirectory, CheckpointsWithoutARunRecordBelongToAnUnknownRun) {
  fs::create_directories(fs::path(dir_) / "step-00000002");
  EXPECT_EQ(checkpoint::save_directory_owner(dir_), "");
  EXPECT_NE(error_of([&] {
              checkpoint::check_save_directory(dir_, "aa", false, false);
            }).find("earlier run (no run.json)"),
            std::string::npos);
  EXPECT_EQ(checkpoint::checkpoint_run_id((fs::path(dir_) / "step-00000002").string()), "");
}

// After a resume at step 100, a step of 10 ms shows the tokens of one step per 10 ms, not of
// 101 steps: the printer counts only the steps it saw.
TEST(ProgressPrinter, TokensPerSecondAfterResumeCountOnlyThisRunsSteps) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  ASSERT_NE(out, nullptr);
  {
    ProgressPrinter printer(out, /*interactive=*/false, /*line_every=*/1);
    TrainerConfig config;
    config.model = model::gpt_preset("tiny").config;
    config.model_name = "tiny";
    config.steps = 200;
    config.batch = 4;
    config.seq = 25;  // 100 tokens a step
    StepConfig ec;
    ec.model = config.model;
    ec.batch = 4;
    ec.seq = 25;
    SerialEngine engine(ec);
    printer.on_start(config, engine);
    StepRecord r;
    r.step = 101;
    r.step_ms = 10;
    printer.on_step(r);
  }
  std::fclose(out);
  const std::string printed(text, size);
  std::free(text);
  EXPECT_NE(printed.find("| 10000 tok/s"), std::string::npos) << printed;
}

}  // namespace
}  // namespace dtrain::train
