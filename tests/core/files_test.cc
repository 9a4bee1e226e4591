// core/files.h and core/system_memory.h: each path check says why a path cannot be used (and
// leaves nothing behind when it can), and the available memory is read from the kernel.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "dtrain/core/check.h"
#include "dtrain/core/files.h"
#include "dtrain/core/system_memory.h"
#include "error_text.h"

namespace dtrain {
namespace {
namespace fs = std::filesystem;

using dtrain::test_support::error_of;

class FileChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dtrain-files-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(FileChecks, OutputFileIsTriedAndLeftAsItWas) {
  const std::string fresh = (dir_ / "t.svg").string();
  EXPECT_NO_THROW(check_output_file(fresh, "--timeline"));
  EXPECT_FALSE(fs::exists(fresh)) << "the probe must not leave the file behind";
  std::ofstream(fresh) << "kept";
  EXPECT_NO_THROW(check_output_file(fresh, "--timeline"));
  std::ifstream in(fresh);
  std::string text;
  in >> text;
  EXPECT_EQ(text, "kept") << "an existing file must not be truncated by the check";
  EXPECT_NE(error_of([&] { check_output_file(dir_.string(), "--timeline"); }).find("directory"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { check_output_file((dir_ / "a/b.json").string(), "--trace"); }).find("--trace"),
      std::string::npos);
  EXPECT_NE(error_of([&] { check_output_file("", "--trace"); }).find("empty"), std::string::npos);
  EXPECT_NE(error_of([&] { check_output_file("/proc/x.svg", "--timeline"); }).find("cannot"),
            std::string::npos);
}

TEST_F(FileChecks, InputFileMustBeAReadableFile) {
  const std::string file = (dir_ / "in.txt").string();
  std::ofstream(file) << "text";
  EXPECT_NO_THROW(check_input_file(file, "--data"));
  EXPECT_NE(
      error_of([&] { check_input_file((dir_ / "none").string(), "--data"); }).find("no such file"),
      std::string::npos);
  EXPECT_NE(error_of([&] { check_input_file(dir_.string(), "--data"); }).find("is a directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_input_file("", "--data"); }).find("empty"), std::string::npos);
}

TEST_F(FileChecks, OutputDirectoryIsCreatedAndProbed) {
  const fs::path made = dir_ / "x" / "y";
  EXPECT_NO_THROW(check_output_directory(made.string(), "--save"));
  EXPECT_TRUE(fs::is_directory(made));
  EXPECT_TRUE(fs::is_empty(made)) << "the probe file must be removed";
  const std::string file = (dir_ / "f").string();
  std::ofstream(file) << "x";
  EXPECT_NE(error_of([&] { check_output_directory(file, "--save"); }).find("not a directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_output_directory("/proc/x", "--save"); }).find("--save /proc/x"),
            std::string::npos);
}

TEST(SystemMemory, AvailableMemoryIsPositiveAndNamed) {
  const std::optional<AvailableMemory> m = available_memory();
  ASSERT_TRUE(m.has_value()) << "/proc/meminfo is readable on Linux";
  EXPECT_GT(m->bytes, 0);
  EXPECT_FALSE(m->source.empty());
  EXPECT_EQ(format_gib(1.5 * 1024 * 1024 * 1024), "1.5 GiB");
  EXPECT_EQ(format_gib(512.0 * 1024 * 1024), "512.0 MiB");
}

}  // namespace
}  // namespace dtrain
