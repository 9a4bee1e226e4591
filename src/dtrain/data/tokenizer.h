// Subword tokenizers beside the byte vocabulary: a SentencePiece model (BPE or unigram, with byte
// fallback so that any byte encodes) trained on a text file, and the text files it encodes into
// llm.c token files. SentencePiece stays behind this header (linked privately by the train layer).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::data {

// Token files hold uint16 tokens: a tokenizer for them has at most this many pieces.
inline constexpr int64_t kMaxUint16Vocab = 65536;

enum class TokenizerType { bpe, unigram };

struct TokenizerTrainOptions {
  std::string corpus;  // a text file; one training sentence per line
  std::string model;   // the .model file to write
  int64_t vocab = 4096;
  TokenizerType type = TokenizerType::bpe;
};

struct TokenizerTrainReport {
  int64_t vocab = 0;         // pieces of the model written (the vocabulary V of a model)
  int64_t corpus_bytes = 0;  // bytes of --train
  double seconds = 0;        // training, the model's write included
};

// Trains with one thread and a fixed seed, so the same corpus and options write the same model.
// The normalization is the identity and no whitespace is added or removed, so decode(encode(s))
// == s for any UTF-8 text without U+2581 (SentencePiece's space mark). Throws Error naming
// --train, --vocab or --model with the reason: a corpus that is not a regular file or not UTF-8
// text (the byte offset of the first bad byte; a NUL is binary), and what SentencePiece refuses
// restated in dtrain's flags (a vocabulary too small for the characters, or more than the
// corpus makes).
TokenizerTrainReport train_tokenizer(const TokenizerTrainOptions& options);

// A loaded SentencePiece model. Movable, not copyable.
class Tokenizer {
 public:
  // Throws Error naming `flag`, the file and the reason when it is not a SentencePiece model.
  Tokenizer(const std::string& path, std::string_view flag);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  int64_t vocab() const;  // pieces: every id is below it
  std::vector<int32_t> encode(std::string_view text) const;
  // Throws Error for an id outside [0, vocab()).
  std::string decode(std::span<const int32_t> tokens) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct EncodeReport {
  int64_t input_bytes = 0;
  int64_t tokens = 0;
  double seconds = 0;  // reading, encoding and writing
  int threads = 1;     // that encoded
};

// Encodes the text file `input` into the llm.c token file `output` (header: magic, version 1,
// the token count; then uint16 tokens). The text is read and encoded in chunks cut after a
// newline (a line longer than 16 MiB is cut at a UTF-8 character boundary), so memory stays
// bounded whatever the file's size; pieces never span a newline, so the tokens are those of the
// whole text at once. Each block's runs of lines are encoded on `threads` threads (0: one per
// hardware thread); the file is the same for any count. Throws Error naming --model (more than
// 65536 pieces), the input (missing, empty, not a regular file, not UTF-8 text: with the byte
// offset; the output is then removed) or the output (unwritable; more tokens than the
// header's int32 count can hold).
EncodeReport encode_file(const Tokenizer& tokenizer, const std::string& input,
                         const std::string& output, int threads = 0);

}  // namespace dtrain::data
