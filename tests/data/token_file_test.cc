// Token files for --data: llm.c's header and nanoGPT's raw uint16 .bin read through a mapping
// give the batches the same tokens give from memory (sampler, validation, resume); malformed
// headers, lengths and out-of-range tokens are refused naming the file and the byte offset.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/data/data.h"
#include "dtrain/data/token_file.h"
#include "error_text.h"

namespace dtrain::data {
namespace {

using test_support::error_of;

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("dtrain_token_file_test_" + name);
}

std::string write_bytes(const std::string& name, const std::string& bytes) {
  const auto path = temp_path(name);
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

std::string uint16_bytes(const std::vector<int32_t>& tokens) {
  std::string out(tokens.size() * 2, '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto v = static_cast<uint16_t>(tokens[i]);
    std::memcpy(out.data() + 2 * i, &v, 2);
  }
  return out;
}

// llm.c's header: 256 int32, magic, version, count, the rest 0.
std::string llmc_header(int32_t magic, int32_t version, int32_t count) {
  std::vector<int32_t> h(256, 0);
  h[0] = magic;
  h[1] = version;
  h[2] = count;
  return std::string(reinterpret_cast<const char*>(h.data()), h.size() * 4);
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(vocab)));
  return t;
}

TEST(TokenFile, LlmcFileIsMappedWithItsTokensAndGpt2Vocab) {
  const auto tokens = random_tokens(5000, kGpt2Vocab, 3);
  const std::string path =
      write_bytes("a.bin", llmc_header(kLlmcMagic, 1, static_cast<int32_t>(tokens.size())) +
                               uint16_bytes(tokens));
  const TokenData data = load_token_data(path, std::nullopt);
  EXPECT_EQ(data.format, TokenFileFormat::llmc);
  EXPECT_EQ(data.vocab, kGpt2Vocab);
  EXPECT_EQ(data.tokens.bytes_per_token(), 2);  // read from the mapping, not widened to int32
  ASSERT_EQ(data.tokens.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(data.tokens[i], tokens[i]) << i;
  // --vocab overrides the default (every token is below it here).
  EXPECT_EQ(load_token_data(path, 60000).vocab, 60000);
}

TEST(TokenFile, RawBinNeedsVocabAndAnEvenLength) {
  const auto tokens = random_tokens(999, 300, 4);
  const std::string path = write_bytes("raw.bin", uint16_bytes(tokens));
  const TokenData data = load_token_data(path, 300);
  EXPECT_EQ(data.format, TokenFileFormat::raw_uint16);
  EXPECT_EQ(data.vocab, 300);
  ASSERT_EQ(data.tokens.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(data.tokens[i], tokens[i]) << i;

  std::string e = error_of([&] { load_token_data(path, std::nullopt); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("--vocab"), std::string::npos) << e;

  const std::string odd = write_bytes("odd.bin", uint16_bytes(tokens) + "x");
  e = error_of([&] { load_token_data(odd, 300); });
  EXPECT_NE(e.find(odd), std::string::npos) << e;
  EXPECT_NE(e.find("byte offset " + std::to_string(tokens.size() * 2)), std::string::npos) << e;
}

TEST(TokenFile, TextStaysBytesEvenWithVocab) {
  const std::string path = write_bytes("t.txt", "hello");
  for (std::optional<int64_t> vocab : {std::optional<int64_t>{}, std::optional<int64_t>{512}}) {
    const TokenData data = load_token_data(path, vocab);
    EXPECT_EQ(data.format, TokenFileFormat::text);
    ASSERT_EQ(data.tokens.size(), 5u);
    EXPECT_EQ(data.tokens[1], 'e');
  }
}

TEST(TokenFile, FirstTokenOutsideTheVocabularyIsNamedWithItsOffset) {
  for (const int64_t bad_index : {0, 4095, 4096, 12345}) {
    auto tokens = random_tokens(20000, 300, 5);
    tokens[static_cast<size_t>(bad_index)] = 300;
    tokens[19999] = 301;  // a later bad token: the first is the one reported
    const std::string raw = write_bytes("bad.bin", uint16_bytes(tokens));
    std::string e = error_of([&] { load_token_data(raw, 300); });
    EXPECT_NE(e.find(raw), std::string::npos) << e;
    EXPECT_NE(e.find("at index " + std::to_string(bad_index) + " (byte offset " +
                     std::to_string(2 * bad_index) + ")"),
              std::string::npos)
        << e;
    const std::string llmc =
        write_bytes("bad_llmc.bin", llmc_header(kLlmcMagic, 1, 20000) + uint16_bytes(tokens));
    e = error_of([&] { load_token_data(llmc, 300); });
    EXPECT_NE(e.find("byte offset " + std::to_string(kLlmcHeaderBytes + 2 * bad_index)),
              std::string::npos)
        << e;
  }
}

TEST(TokenFile, MalformedHeadersNameTheFileAndOffset) {
  const auto tokens = random_tokens(100, 50, 6);
  const std::string body = uint16_bytes(tokens);
  struct Case {
    std::string bytes, words;
  };
  const std::vector<Case> cases = {
      {llmc_header(kLlmcMagic, 1, 100).substr(0, 100),
       "short header: the file ends at byte offset 100"},
      {llmc_header(kLlmcMagic, 2, 100) + body, "version 2 at byte offset 4"},
      {llmc_header(kLlmcMagic, 1, 101) + body, "counts 101 tokens, which end at byte offset 1226"},
      {llmc_header(kLlmcMagic, 1, 0) + body, "token count at byte offset 8 is 0"},
      {llmc_header(kLlmcMagic, 1, 99) + body,
       "2 byte(s) after the last token, from byte offset 1222"},
  };
  for (const Case& c : cases) {
    const std::string path = write_bytes("hdr.bin", c.bytes);
    const std::string e = error_of([&] { load_token_data(path, 50); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find(c.words), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { load_token_data(write_bytes("empty.bin", ""), 50); }).find("empty"),
            std::string::npos);
}

// The same tokens from a mapped uint16 file and from int32 memory: the same split, the same
// training batches (and after a resume), the same validation batches.
TEST(TokenFile, BatchesEqualThoseOfTheSameTokensInMemory) {
  const auto tokens = random_tokens(30000, 1000, 7);
  const std::string path =
      write_bytes("same.bin", llmc_header(kLlmcMagic, 1, 30000) + uint16_bytes(tokens));
  const TokenSplit mapped = split_train_val(load_token_data(path, 1000).tokens, 0.1, path);
  const TokenSplit memory = split_train_val(tokens, 0.1, "memory");
  ASSERT_EQ(mapped.train.size(), memory.train.size());
  ASSERT_EQ(mapped.val.size(), memory.val.size());
  BatchSampler a(mapped.train, 4, 64, 11), b(memory.train, 4, 64, 11);
  Batch x, y;
  for (int k = 0; k < 10; ++k) {
    a.next(x);
    b.next(y);
    ASSERT_EQ(x.inputs, y.inputs);
    ASSERT_EQ(x.targets, y.targets);
  }
  BatchSampler resumed(mapped.train, 4, 64, 0);
  resumed.set_state(b.state());
  resumed.next(x);
  b.next(y);
  EXPECT_EQ(x.inputs, y.inputs);
  x.resize(4, 64);
  y.resize(4, 64);
  for (int k = 0; k < 3; ++k) {
    eval_batch(mapped.val, k, x);
    eval_batch(memory.val, k, y);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.targets, y.targets);
  }
}

}  // namespace
}  // namespace dtrain::data
