// core/: size parsing and formatting, per-tag memory accounting with peaks, Buffer charging.
#include <gtest/gtest.h>

#include <string>

#include "dtrain/core/buffer.h"
#include "dtrain/core/check.h"
#include "dtrain/core/memory.h"
#include "dtrain/core/units.h"

namespace dtrain {
namespace {

TEST(Units, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(parse_bytes("0", "--x"), 0);
  EXPECT_EQ(parse_bytes("512", "--x"), 512);
  EXPECT_EQ(parse_bytes("4KiB", "--x"), 4 * 1024);
  EXPECT_EQ(parse_bytes("4k", "--x"), 4 * 1024);
  EXPECT_EQ(parse_bytes("64MiB", "--x"), 64 * 1024 * 1024);
  EXPECT_EQ(parse_bytes("1GB", "--x"), 1000 * 1000 * 1000);
  EXPECT_EQ(parse_bytes("2gib", "--x"), int64_t{2} << 30);
}

TEST(Units, ErrorsNameTheFlagAndTheText) {
  for (const char* bad : {"12XB", "MiB", "", "-4", "1.5MiB", "99999999999999999999"}) {
    try {
      parse_bytes(bad, "--bucket-size");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--bucket-size"), std::string::npos) << e.what();
    }
  }
}

TEST(Units, FormatsWithBinaryUnits) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(64 << 20), "64 MiB");
  EXPECT_EQ(format_bytes(1.5 * (1 << 30)), "1.50 GiB");
}

TEST(Memory, TracksCurrentAndPeakPerTagAndInTotal) {
  MemoryTracker t;
  t.allocate(MemoryTag::params, 100);
  t.allocate(MemoryTag::activations, 50);
  t.release(MemoryTag::activations, 50);
  t.allocate(MemoryTag::activations, 30);
  EXPECT_EQ(t.current_bytes(MemoryTag::params), 100);
  EXPECT_EQ(t.current_bytes(MemoryTag::activations), 30);
  EXPECT_EQ(t.peak_bytes(MemoryTag::activations), 50);
  EXPECT_EQ(t.current_total_bytes(), 130);
  EXPECT_EQ(t.peak_total_bytes(), 150);
  t.reset_peaks();
  EXPECT_EQ(t.peak_bytes(MemoryTag::activations), 30);
  EXPECT_THROW(t.release(MemoryTag::grads, 1), Error);
}

TEST(Memory, BufferChargesItsTagUntilReleased) {
  MemoryTracker t;
  {
    Buffer<float> a(1000, MemoryTag::grads, &t);
    EXPECT_EQ(t.current_bytes(MemoryTag::grads), 4000);
    Buffer<float> b = std::move(a);
    EXPECT_EQ(t.current_bytes(MemoryTag::grads), 4000) << "a move transfers, not duplicates";
    b.release();
    EXPECT_EQ(t.current_bytes(MemoryTag::grads), 0);
    b.resize(10);
    EXPECT_EQ(b[9], 0.0f) << "zero-initialised";
  }
  EXPECT_EQ(t.current_bytes(MemoryTag::grads), 0);
  EXPECT_EQ(t.peak_bytes(MemoryTag::grads), 4000);
}

}  // namespace
}  // namespace dtrain
