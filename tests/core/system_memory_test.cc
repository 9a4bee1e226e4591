// The cgroup memory limits the start-up check reads, on a fake cgroup file system: v2's
// memory.max and memory.current, v1's memory.limit_in_bytes and usage_in_bytes, the smaller room
// of a hybrid hierarchy, "no limit" in both spellings, and the message naming the limit's file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "dtrain/core/system_memory.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMiB = int64_t{1} << 20;

class CgroupRoom : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("dtrain-cgroup-" + std::to_string(::getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes `text` to root/relative, making its folders.
  void write(const std::string& relative, const std::string& text) {
    const fs::path path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text << "\n";
  }
  std::optional<AvailableMemory> room(const std::string& proc_self_cgroup) {
    return cgroup_memory_room(proc_self_cgroup, root_.string());
  }

  fs::path root_;
};

TEST_F(CgroupRoom, V2MemoryMaxLessCurrent) {
  write("job/memory.max", std::to_string(512 * kMiB));
  write("job/memory.current", std::to_string(128 * kMiB));
  const auto r = room("0::/job\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->bytes, 384 * kMiB);
  EXPECT_FALSE(r->address_space);
  EXPECT_EQ(r->source, "room under the cgroup memory limit " + (root_ / "job/memory.max").string() +
                           " 512.0 MiB, of which 128.0 MiB is used");
}

TEST_F(CgroupRoom, V1LimitInBytesLessUsage) {
  write("memory/job/memory.limit_in_bytes", std::to_string(2048 * kMiB));
  write("memory/job/memory.usage_in_bytes", std::to_string(1024 * kMiB));
  const auto r = room("12:pids:/job\n4:memory:/job\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->bytes, 1024 * kMiB);
  EXPECT_NE(r->source.find("memory/job/memory.limit_in_bytes 2.0 GiB, of which 1.0 GiB is used"),
            std::string::npos)
      << r->source;
}

// A hybrid hierarchy lists both; the smaller room binds, whichever line comes first.
TEST_F(CgroupRoom, TheSmallerRoomOfAHybridHierarchyBinds) {
  write("memory/job/memory.limit_in_bytes", std::to_string(1024 * kMiB));
  write("memory/job/memory.usage_in_bytes", "0");
  write("job/memory.max", std::to_string(300 * kMiB));
  write("job/memory.current", std::to_string(100 * kMiB));
  const auto r = room("4:memory:/job\n0::/job\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->bytes, 200 * kMiB);
  EXPECT_NE(r->source.find("memory.max"), std::string::npos) << r->source;
}

TEST_F(CgroupRoom, NoLimitIsNoRoomFigure) {
  // v2 says "max"; v1 a page-rounded 2^63; a hierarchy without the files says nothing.
  write("job/memory.max", "max");
  write("job/memory.current", std::to_string(100 * kMiB));
  write("memory/job/memory.limit_in_bytes", "9223372036854771712");
  write("memory/job/memory.usage_in_bytes", std::to_string(100 * kMiB));
  EXPECT_FALSE(room("0::/job\n").has_value());
  EXPECT_FALSE(room("4:memory:/job\n").has_value());
  EXPECT_FALSE(room("0::/elsewhere\n4:memory:/elsewhere\n").has_value());
  EXPECT_FALSE(room("").has_value());
}

// Usage past the limit (the kernel reclaims lazily) leaves no room, not a negative one.
TEST_F(CgroupRoom, UsagePastTheLimitLeavesNone) {
  write("job/memory.max", std::to_string(64 * kMiB));
  write("job/memory.current", std::to_string(65 * kMiB));
  const auto r = room("0::/job\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->bytes, 0);
}

}  // namespace
}  // namespace dtrain
