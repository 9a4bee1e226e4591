// The safetensors reader and writer: a round trip is bitwise (F32) or bf16-rounded (BF16), the
// header is aligned, and every malformed header, length, dtype, shape or offset is refused
// naming the file and the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/formats/safetensors.h"
#include "error_text.h"

namespace dtrain::formats {
namespace {

using test_support::error_of;

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// A file from a header text and `data_bytes` zero bytes of data.
std::string file_of(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\0');
}

std::vector<SafetensorsTensor> sample_tensors() {
  Rng rng(3);
  std::vector<SafetensorsTensor> t = {{"wte.weight", {5, 3}, {}},
                                      {"h.0.ln_1.bias", {3}, {}},
                                      {"scalar", {}, {}},
                                      {"empty", {0, 4}, {}}};
  for (SafetensorsTensor& x : t) {
    int64_t n = 1;
    for (int64_t d : x.shape) n *= d;
    for (int64_t i = 0; i < n; ++i) x.data.push_back(static_cast<float>(rng.normal() * 10.0));
  }
  t[0].data[1] = std::numeric_limits<float>::infinity();
  t[0].data[2] = -0.0f;
  t[0].data[3] = 1e-40f;  // subnormal
  return t;
}

TEST(Safetensors, F32RoundTripIsBitwiseAndTheHeaderIsAligned) {
  const auto tensors = sample_tensors();
  const std::string bytes =
      safetensors_bytes(tensors, SafetensorsDtype::f32, {{"format", "pt"}, {"note", "x"}});
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  EXPECT_EQ((8 + header) % 8, 0u);
  const SafetensorsIndex index = parse_safetensors(as_bytes(bytes), "a.safetensors");
  ASSERT_EQ(index.tensors.size(), tensors.size());
  EXPECT_EQ(index.metadata.at("format"), "pt");
  for (const SafetensorsTensor& t : tensors) {
    const SafetensorsEntry* e = index.find(t.name);
    ASSERT_NE(e, nullptr) << t.name;
    EXPECT_EQ(e->shape, t.shape);
    EXPECT_EQ(e->dtype, SafetensorsDtype::f32);
    const std::vector<float> back = read_tensor_f32(as_bytes(bytes), index, *e);
    ASSERT_EQ(back.size(), t.data.size());
    if (!back.empty()) {
      EXPECT_EQ(std::memcmp(back.data(), t.data.data(), back.size() * 4), 0) << t.name;
    }
  }
  // Written in the given order: the data of tensor k follows that of tensor k-1.
  EXPECT_EQ(index.find("wte.weight")->begin, 0);
  EXPECT_EQ(index.find("h.0.ln_1.bias")->begin, 60);
}

TEST(Safetensors, Bf16StoresTheRoundedValues) {
  const auto tensors = sample_tensors();
  const std::string bytes = safetensors_bytes(tensors, SafetensorsDtype::bf16);
  const SafetensorsIndex index = parse_safetensors(as_bytes(bytes), "b.safetensors");
  const SafetensorsEntry* e = index.find("wte.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, SafetensorsDtype::bf16);
  EXPECT_EQ(e->end - e->begin, 15 * 2);
  const std::vector<float> back = read_tensor_f32(as_bytes(bytes), index, *e);
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i], round_to_bf16(tensors[0].data[i])) << i;
  }
}

TEST(Safetensors, WriteIsAtomicAndLeavesNoTemporary) {
  const auto dir = std::filesystem::temp_directory_path() / "dtrain_safetensors_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.safetensors").string();
  write_file_atomically(path, "old", "--output");
  const std::string bytes = safetensors_bytes(sample_tensors(), SafetensorsDtype::f32);
  write_file_atomically(path, bytes, "--output");
  std::ifstream in(path, std::ios::binary);
  const std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
  const std::string e =
      error_of([&] { write_file_atomically((dir / "no/such").string(), "x", "--output"); });
  EXPECT_NE(e.find("--output"), std::string::npos) << e;
  std::filesystem::remove_all(dir);
}

// A device is written in place, never replaced by a renamed file, and its write errors come back:
// through a link to /dev/full the link stays a link and the error says the device is full.
TEST(Safetensors, WriteToADeviceWritesInPlaceAndReportsAFullDevice) {
  // Linux always has /dev/full (and Debian's CI machines): its absence is a failure, not a skip.
  ASSERT_TRUE(std::filesystem::is_character_file("/dev/full")) << "no /dev/full here";
  const auto dir = std::filesystem::temp_directory_path() / "dtrain_safetensors_device_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto link = dir / "full";
  std::filesystem::create_symlink("/dev/full", link);
  const std::string e = error_of([&] { write_file_atomically(link.string(), "bytes", "--out"); });
  EXPECT_NE(e.find("--out " + link.string() + ": cannot write (No space left on device)"),
            std::string::npos)
      << e;
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);  // no temporary
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, MalformedFilesNameTheFileAndTheTensor) {
  struct Case {
    std::string bytes, words;
  };
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  std::string huge(8, '\0');
  const uint64_t big = 1000;
  std::memcpy(huge.data(), &big, 8);
  const std::vector<Case> cases = {
      {"abc", "shorter than the 8-byte header length"},
      {huge + "{}", "header length (first 8 bytes) is 1000"},
      {file_of("{not json", 0), "not valid JSON"},
      {file_of("[1,2]", 0), "not a JSON object"},
      {file_of(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", 16),
       "tensor 'a': dtype 'F64'"},
      {file_of(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "tensor 'a': shape [3] of F32 is 12 bytes, but data_offsets [0, 8) hold 8"},
      {file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
       "tensor 'a': data_offsets [8, 0) ends before it begins"},
      {file_of(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       "tensor 'a': shape holds -2"},
      {file_of(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "tensor 'a' has no \"data_offsets\""},
      {file_of("{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       "tensor 'b' (data_offsets [4, 12)) overlaps tensor 'a', which ends at 8"},
      {file_of("{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", 16),
       "bytes [8, 12) of the data belong to no tensor (before tensor 'b')"},
      {file_of("{" + ok_entry + "}", 4), "tensor 'a' (data_offsets [0, 8)) runs past the data's 4"},
      {file_of("{" + ok_entry + "}", 12), "4 bytes after tensor 'a' belong to no tensor"},
      {file_of(R"({"__metadata__":{"k":1}})", 0), "__metadata__ 'k' is not a string"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of([&] { parse_safetensors(as_bytes(c.bytes), "m.safetensors"); });
    EXPECT_NE(e.find("m.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find(c.words), std::string::npos) << "expected '" << c.words << "' in: " << e;
  }
  // The well-formed neighbours of the cases above are accepted.
  EXPECT_EQ(error_of([&] { parse_safetensors(as_bytes(file_of("{" + ok_entry + "}", 8)), "m"); }),
            "");
  EXPECT_EQ(error_of([&] { parse_safetensors(as_bytes(file_of("{}", 0)), "m"); }), "");
}

}  // namespace
}  // namespace dtrain::formats
