// The SentencePiece tokenizer: a small one trained on the default corpus has the vocabulary asked
// for, is the same model when trained twice, encodes below its vocabulary and decodes back to the
// exact text (bytes outside the corpus too, through byte fallback); a text file encoded in chunks
// gives an llm.c file whose header counts its tokens, equal to encoding the whole text at once,
// that --data reads; bad flags and files are refused naming them.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/data/data.h"
#include "dtrain/data/token_file.h"
#include "dtrain/data/tokenizer.h"
#include "error_text.h"

namespace dtrain::data {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kVocab = 512;

using test_support::error_of;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("dtrain_tokenizer_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    corpus_ = default_corpus_path();
    trained_ = train_tokenizer({.corpus = corpus_,
                                .model = (dir_ / "bpe.model").string(),
                                .vocab = kVocab,
                                .type = TokenizerType::bpe});
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static inline fs::path dir_;
  static inline std::string corpus_;
  static inline TokenizerTrainReport trained_;
};

TEST_F(TokenizerTest, TrainsTheVocabularyAskedForTheSameEveryTime) {
  EXPECT_EQ(trained_.vocab, kVocab);
  EXPECT_EQ(trained_.corpus_bytes, static_cast<int64_t>(fs::file_size(corpus_)));
  EXPECT_GT(trained_.seconds, 0);
  const Tokenizer tokenizer((dir_ / "bpe.model").string(), "--model");
  EXPECT_EQ(tokenizer.vocab(), kVocab);
  train_tokenizer({.corpus = corpus_,
                   .model = (dir_ / "again.model").string(),
                   .vocab = kVocab,
                   .type = TokenizerType::bpe});
  EXPECT_EQ(read_file(dir_ / "bpe.model"), read_file(dir_ / "again.model"));
}

TEST_F(TokenizerTest, EncodesBelowTheVocabularyAndDecodesToTheExactText) {
  const std::string corpus = read_file(corpus_);
  // Bytes the corpus never holds: control bytes, runs of spaces and tabs, multi-byte characters.
  const std::string odd = std::string("\x01\x7f  two  spaces\t\ttabs\n\n\nJ\xc3\xa9r\xc3\xb4me ") +
                          "\xe2\x98\x83 \xe6\x97\xa5\xe6\x9c\xac\n ";
  for (const TokenizerType type : {TokenizerType::bpe, TokenizerType::unigram}) {
    const std::string model = (dir_ / "round_trip.model").string();
    train_tokenizer({.corpus = corpus_, .model = model, .vocab = kVocab, .type = type});
    const Tokenizer tokenizer(model, "--model");
    for (const std::string& text : {corpus, odd, std::string(" leading and trailing ")}) {
      const std::vector<int32_t> ids = tokenizer.encode(text);
      ASSERT_FALSE(ids.empty());
      for (int32_t id : ids) {
        ASSERT_GE(id, 0);
        ASSERT_LT(id, tokenizer.vocab());
      }
      EXPECT_EQ(tokenizer.decode(ids), text);
    }
    // Subwords: the corpus takes fewer tokens than bytes.
    EXPECT_LT(tokenizer.encode(corpus).size(), corpus.size());
  }
}

TEST_F(TokenizerTest, AnEncodedFileIsAnLlmcFileOfTheWholeTextsTokens) {
  const Tokenizer tokenizer((dir_ / "bpe.model").string(), "--model");
  // Past one 1 MiB chunk, so the text is cut after newlines; no newline at the end.
  std::string text;
  while (text.size() < (size_t{5} << 20) / 4) text += read_file(corpus_);
  text += "the last line has no newline";
  write_file(dir_ / "in.txt", text);
  const EncodeReport r =
      encode_file(tokenizer, (dir_ / "in.txt").string(), (dir_ / "out.bin").string(), 1);
  EXPECT_EQ(r.input_bytes, static_cast<int64_t>(text.size()));
  const std::vector<int32_t> whole = tokenizer.encode(text);
  ASSERT_EQ(r.tokens, static_cast<int64_t>(whole.size()));

  const std::string file = read_file(dir_ / "out.bin");
  ASSERT_EQ(file.size(), static_cast<size_t>(kLlmcHeaderBytes + 2 * r.tokens));
  std::vector<int32_t> header(kLlmcHeaderBytes / 4);
  std::memcpy(header.data(), file.data(), kLlmcHeaderBytes);
  EXPECT_EQ(header[0], kLlmcMagic);
  EXPECT_EQ(header[1], kLlmcVersionUint16);
  EXPECT_EQ(header[2], r.tokens);
  for (size_t i = 3; i < header.size(); ++i) ASSERT_EQ(header[i], 0) << "header word " << i;
  std::vector<uint16_t> stored(static_cast<size_t>(r.tokens));
  std::memcpy(stored.data(), file.data() + kLlmcHeaderBytes, 2 * stored.size());
  EXPECT_TRUE(std::equal(stored.begin(), stored.end(), whole.begin()));

  // Any number of threads writes the same file.
  const EncodeReport three =
      encode_file(tokenizer, (dir_ / "in.txt").string(), (dir_ / "out3.bin").string(), 3);
  EXPECT_EQ(three.threads, 3);
  EXPECT_EQ(read_file(dir_ / "out3.bin"), file);

  // What `train --data out.bin --vocab 512` reads: the same tokens, all below the vocabulary.
  const TokenData data = load_token_data((dir_ / "out.bin").string(), kVocab);
  EXPECT_EQ(data.format, TokenFileFormat::llmc);
  EXPECT_EQ(data.vocab, kVocab);
  ASSERT_EQ(static_cast<int64_t>(data.tokens.size()), r.tokens);
  std::vector<int32_t> read(whole.size());
  data.tokens.copy(0, r.tokens, read.data());
  EXPECT_EQ(read, whole);
  EXPECT_EQ(tokenizer.decode(read), text);
}

TEST_F(TokenizerTest, RefusesBadFlagsAndFilesNamingThem) {
  const std::string model = (dir_ / "bpe.model").string();
  const std::string out = (dir_ / "refused.model").string();
  EXPECT_NE(error_of([&] {
              train_tokenizer({.corpus = corpus_, .model = out, .vocab = 70000});
            }).find("--vocab 70000 is larger than 65536: token files hold uint16 tokens"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              train_tokenizer({.corpus = (dir_ / "none.txt").string(), .model = out, .vocab = 512});
            }).find("--train " + (dir_ / "none.txt").string() + ": no such file"),
            std::string::npos);
  // More pieces than the corpus can make, and fewer than its characters need: the bound in
  // dtrain's words (SentencePiece's own name its options), after our flags.
  const std::string too_many = error_of([&] {
    write_file(dir_ / "tiny.txt", "abc abc\n");
    train_tokenizer({.corpus = (dir_ / "tiny.txt").string(), .model = out, .vocab = 5000});
  });
  EXPECT_NE(
      too_many.find("--vocab 5000: the corpus is too small to fill this vocabulary (at most "),
      std::string::npos)
      << too_many;
  const std::string too_few =
      error_of([&] { train_tokenizer({.corpus = corpus_, .model = out, .vocab = 10}); });
  EXPECT_NE(too_few.find("--vocab 10: the vocabulary is too small for this corpus: it needs at "
                         "least "),
            std::string::npos)
      << too_few;
  for (const std::string& e : {too_many, too_few}) {
    EXPECT_EQ(e.find("Internal"), std::string::npos) << e;
    EXPECT_EQ(e.find("vocab_size"), std::string::npos) << e;
    EXPECT_EQ(e.find("character_coverage"), std::string::npos) << e;
  }
  // Not UTF-8 text: the byte offset and what to do.
  const std::string latin1 = error_of([&] {
    write_file(dir_ / "latin1.txt", "abc\ncaf\xe9\n");
    train_tokenizer({.corpus = (dir_ / "latin1.txt").string(), .model = out, .vocab = 512});
  });
  EXPECT_NE(latin1.find("not UTF-8 text at byte offset 7 (byte 0xE9)"), std::string::npos)
      << latin1;
  EXPECT_NE(latin1.find("iconv"), std::string::npos) << latin1;
  write_file(dir_ / "not_a_model", "plain text");
  EXPECT_NE(
      error_of([&] {
        Tokenizer((dir_ / "not_a_model").string(), "--tokenizer");
      }).find("--tokenizer " + (dir_ / "not_a_model").string() + ": not a SentencePiece model"),
      std::string::npos);
  const Tokenizer tokenizer(model, "--model");
  const std::vector<int32_t> outside = {1, static_cast<int32_t>(kVocab)};
  EXPECT_NE(error_of([&] {
              tokenizer.decode(outside);
            }).find("token 512 at index 1 is not below the vocabulary size 512"),
            std::string::npos);
  write_file(dir_ / "empty.txt", "");
  EXPECT_NE(error_of([&] {
              encode_file(tokenizer, (dir_ / "empty.txt").string(), (dir_ / "e.bin").string());
            }).find("empty.txt: the file is empty"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "e.bin"));
}

}  // namespace
}  // namespace dtrain::data
