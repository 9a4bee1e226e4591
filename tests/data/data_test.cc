// The byte tokenizer, loading errors that name --data and the file, the split, the check that
// a window fits, and deterministic, resumable batches.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "dtrain/core/check.h"
#include "dtrain/data/data.h"

namespace dtrain::data {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string temp_file(const std::string& name, const std::string& content) {
  const auto path = std::filesystem::temp_directory_path() / ("dtrain_data_test_" + name);
  std::ofstream(path, std::ios::binary) << content;
  return path.string();
}

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string text;
  for (int c = 0; c < 256; ++c) text += static_cast<char>(c);
  const auto tokens = tokenize_bytes(text);
  ASSERT_EQ(tokens.size(), 256u);
  for (int c = 0; c < 256; ++c) EXPECT_EQ(tokens[c], c);
  EXPECT_EQ(detokenize_bytes(tokens), text);
}

TEST(LoadByteTokens, ErrorsNameTheFlagAndTheFile) {
  const std::string missing = "/nonexistent/dtrain/corpus.txt";
  std::string e = error_of([&] { load_byte_tokens(missing); });
  EXPECT_NE(e.find("--data"), std::string::npos) << e;
  EXPECT_NE(e.find(missing), std::string::npos) << e;
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;

  const std::string empty = temp_file("empty.txt", "");
  e = error_of([&] { load_byte_tokens(empty); });
  EXPECT_NE(e.find("--data"), std::string::npos) << e;
  EXPECT_NE(e.find("empty"), std::string::npos) << e;

  const std::string dir = std::filesystem::temp_directory_path().string();
  e = error_of([&] { load_byte_tokens(dir); });
  EXPECT_NE(e.find("directory"), std::string::npos) << e;

  EXPECT_EQ(load_byte_tokens(temp_file("abc.txt", "abc")), (std::vector<int32_t>{97, 98, 99}));
}

TEST(DefaultCorpus, ShipsWithTheRepository) {
  const auto tokens = load_byte_tokens(default_corpus_path());
  EXPECT_GT(tokens.size(), 100000u);
  EXPECT_LT(tokens.size(), 1000000u);  // "a few hundred KB at most"
}

TEST(Split, HoldsOutTheEndOfTheFile) {
  std::vector<int32_t> t(100);
  for (int i = 0; i < 100; ++i) t[i] = i;
  const TokenSplit s = split_train_val(t, 0.1, "x");
  ASSERT_EQ(s.train.size(), 90u);
  ASSERT_EQ(s.val.size(), 10u);
  EXPECT_EQ(s.train[89], 89);
  EXPECT_EQ(s.val[0], 90);
}

TEST(Split, WindowLongerThanTheDataNamesSeqAndFile) {
  const TokenSplit s = split_train_val(std::vector<int32_t>(200, 1), 0.1, "short.txt");  // val 20
  EXPECT_EQ(error_of([&] { check_split_fits(s, 19); }), "");
  const std::string e = error_of([&] { check_split_fits(s, 20); });
  EXPECT_NE(e.find("--seq-length 20"), std::string::npos) << e;
  EXPECT_NE(e.find("short.txt"), std::string::npos) << e;
}

TEST(BatchSampler, TargetsAreInputsShiftedByOne) {
  std::vector<int32_t> t(500);
  for (int i = 0; i < 500; ++i) t[i] = i;  // a token is its own position
  BatchSampler sampler(t, 4, 16, 7);
  Batch b;
  for (int k = 0; k < 20; ++k) {
    sampler.next(b);
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t i = 0; i < 16; ++i) {
        const int32_t x = b.inputs[r * 16 + i];
        EXPECT_EQ(b.targets[r * 16 + i], x + 1);
        if (i > 0) {
          EXPECT_EQ(x, b.inputs[r * 16 + i - 1] + 1);
        }
      }
      EXPECT_LE(b.targets[r * 16 + 15], 499);  // the window stays inside the data
    }
  }
}

TEST(BatchSampler, SameSeedSameBatchesAndStateResumes) {
  std::vector<int32_t> t(10000);
  for (int i = 0; i < 10000; ++i) t[i] = i;
  BatchSampler a(t, 8, 32, 42), b(t, 8, 32, 42), c(t, 8, 32, 43);
  Batch x, y, z;
  std::set<int32_t> starts;
  for (int k = 0; k < 5; ++k) {
    a.next(x);
    b.next(y);
    c.next(z);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_NE(x.inputs, z.inputs);
    for (int r = 0; r < 8; ++r) starts.insert(x.inputs[r * 32]);
  }
  EXPECT_GT(starts.size(), 35u);  // 40 windows at random offsets in 10k: nearly all distinct
  const SamplerState saved = a.state();
  EXPECT_EQ(saved.batches_drawn, 5);
  a.next(x);
  BatchSampler resumed(t, 8, 32, 0);
  resumed.set_state(saved);
  resumed.next(y);
  EXPECT_EQ(x.inputs, y.inputs);
}

TEST(EvalBatch, IsFixedAndCoversTheSplitInOrder) {
  std::vector<int32_t> t(1000);
  for (int i = 0; i < 1000; ++i) t[i] = i;
  Batch b;
  b.resize(4, 10);
  eval_batch(t, 0, b);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(b.inputs[r * 10], r * 10);
  eval_batch(t, 3, b);
  EXPECT_EQ(b.inputs[0], 120);  // batch 3 starts at window 12
  Batch again;
  again.resize(4, 10);
  eval_batch(t, 3, again);
  EXPECT_EQ(b.inputs, again.inputs);
}

}  // namespace
}  // namespace dtrain::data
