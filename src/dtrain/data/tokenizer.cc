// The SentencePiece tokenizer: training with the options that make it exact and reproducible,
// the model behind Tokenizer, and the chunked encoding of a text file into an llm.c token file.
#include "dtrain/data/tokenizer.h"
#include "dtrain/core/timer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "dtrain/core/check.h"
#include "dtrain/core/files.h"
#include "dtrain/data/token_file.h"

namespace dtrain::data {
namespace {

namespace fs = std::filesystem;

// SentencePiece's random draws (unigram's sampling) come from this seed; with one thread the
// model is the same on every run.
constexpr unsigned kTrainSeed = 1;
// Text is read in blocks of this many bytes, and each is cut after a newline.
constexpr size_t kChunkBytes = size_t{1} << 20;
// ... then encoded in runs of whole lines of about this many bytes: SentencePiece's encoder
// runs 3x faster on 4 KiB than on 1 MiB at once (measured: `dtrain bench tokenize`).
constexpr size_t kEncodeBytes = 4096;
// A line longer than this is cut at a UTF-8 character boundary instead.
constexpr size_t kMaxLineBytes = size_t{16} << 20;

// A text file to read whole: a regular file (a device such as /dev/zero or a pipe has no size
// to report and may never end).
void check_regular_text_file(const std::string& path, std::string_view flag) {
  check_input_file(path, flag);
  std::error_code ec;
  DTRAIN_CHECK(fs::is_regular_file(path, ec), flag, " ", path,
               ": not a regular file (a device, pipe or socket); tokenize reads a text file "
               "(copy the data into one first)");
}

// Where `text` stops being UTF-8 text: the offset of the first byte that is no part of a valid
// UTF-8 character (overlong forms, surrogates and code points past U+10FFFF included) or is a
// NUL (binary data, which text never holds); npos when there is none. A character cut off by
// the end of `text` counts as invalid only when `at_end`; else `complete` is set to where it
// starts, so the caller can carry it into the next block.
size_t invalid_text_offset(std::string_view text, bool at_end, size_t* complete = nullptr) {
  size_t i = 0;
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  while (i < text.size()) {
    const unsigned char c = byte(i);
    if (c == 0) return i;
    if (c < 0x80) {
      ++i;
      continue;
    }
    int length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;   // no overlong forms
      if (c == 0xED) high = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;  // nothing past U+10FFFF
    } else {
      return i;
    }
    for (int k = 1; k < length; ++k) {
      if (i + k >= text.size()) {
        if (at_end) return i;
        if (complete != nullptr) *complete = i;
        return std::string_view::npos;
      }
      const unsigned char next = byte(i + k);
      if (next < (k == 1 ? low : 0x80) || next > (k == 1 ? high : 0xBF)) return i;
    }
    i += static_cast<size_t>(length);
  }
  if (complete != nullptr) *complete = text.size();
  return std::string_view::npos;
}

// The refusal of a file that is not UTF-8 text, at `offset`, saying what to do about it.
[[noreturn]] void throw_not_text(std::string_view flag, const std::string& path, int64_t offset,
                                 unsigned char byte) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const std::string hex = {'0', 'x', kHex[byte >> 4], kHex[byte & 15]};
  if (byte == 0) {
    throw Error(str(flag, " ", path, ": a NUL byte at byte offset ", offset,
                    ": a binary file, not text; tokenize reads UTF-8 text"));
  }
  throw Error(str(flag, " ", path, ": not UTF-8 text at byte offset ", offset, " (byte ", hex,
                  "); SentencePiece would read it as U+FFFD. Convert the file to UTF-8 first, "
                  "e.g. `iconv -f latin1 -t utf-8 ",
                  path,
                  "`, or drop the invalid bytes with "
                  "`iconv -c -f utf-8 -t utf-8 ",
                  path, "`"));
}

// Reads `path` block by block and refuses it at the first byte that is not UTF-8 text.
void check_utf8_file(const std::string& path, std::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  DTRAIN_CHECK(in.good(), flag, " ", path, ": cannot be read");
  std::string carry;
  std::vector<char> block(kChunkBytes);
  int64_t consumed = 0;  // bytes before carry
  for (;;) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    const auto got = static_cast<size_t>(in.gcount());
    DTRAIN_CHECK(!in.bad(), flag, " ", path, ": read error");
    const bool at_end = in.eof() || got == 0;
    carry.append(block.data(), got);
    size_t complete = carry.size();
    const size_t bad = invalid_text_offset(carry, at_end, &complete);
    if (bad != std::string_view::npos) {
      throw_not_text(flag, path, consumed + static_cast<int64_t>(bad),
                     static_cast<unsigned char>(carry[bad]));
    }
    if (at_end) return;
    consumed += static_cast<int64_t>(complete);
    carry.erase(0, complete);
  }
}

// SentencePiece's refusal in dtrain's words: its messages name its own options
// (--character_coverage, vocab_size), which dtrain does not have. The vocabulary bounds are
// restated with --vocab; anything else is passed on without the "Internal:" code.
[[noreturn]] void throw_training_error(const TokenizerTrainOptions& o, std::string message) {
  const std::string what = str("tokenize --train ", o.corpus, " --vocab ", o.vocab, ": ");
  const auto number_after = [&](std::string_view mark) -> std::optional<int64_t> {
    const size_t at = message.find(mark);
    if (at == std::string::npos) return std::nullopt;
    size_t k = at + mark.size();
    while (k < message.size() && (message[k] < '0' || message[k] > '9')) ++k;
    if (k == message.size()) return std::nullopt;
    return std::stoll(message.substr(k, 18));
  };
  if (message.find("smaller than required_chars") != std::string::npos) {
    const std::optional<int64_t> needed = number_after(" vs ");
    throw Error(str(what, "the vocabulary is too small for this corpus: it needs at least ",
                    needed ? std::to_string(*needed) : std::string("more"),
                    " pieces (the 256 byte pieces, the unknown piece and one per distinct "
                    "character); give a larger --vocab"));
  }
  if (message.find("Vocabulary size too high") != std::string::npos ||
      message.find("<= ") != std::string::npos) {
    const std::optional<int64_t> most = number_after("<= ");
    throw Error(str(what, "the corpus is too small to fill this vocabulary",
                    most ? str(" (at most ", *most, " pieces)") : std::string(),
                    "; give a smaller --vocab or a larger --train corpus"));
  }
  if (message.find("required_chars") != std::string::npos ||
      message.find("no sentence") != std::string::npos ||
      message.find("sentences") != std::string::npos) {
    throw Error(str(what, "SentencePiece found no usable text in the corpus (", message,
                    "); give a text file with words in it"));
  }
  const std::string internal = "INTERNAL: ";
  if (message.rfind("Internal: ", 0) == 0 || message.rfind(internal, 0) == 0) {
    message.erase(0, internal.size());
  }
  throw Error(str(what, "SentencePiece could not train a tokenizer: ", message));
}

}  // namespace

TokenizerTrainReport train_tokenizer(const TokenizerTrainOptions& o) {
  check_regular_text_file(o.corpus, "--train");
  check_output_file(o.model, "--model");
  DTRAIN_CHECK(o.vocab <= kMaxUint16Vocab, "--vocab ", o.vocab, " is larger than ", kMaxUint16Vocab,
               ": token files hold uint16 tokens");
  DTRAIN_CHECK(o.vocab > 0, "--vocab must be positive (got ", o.vocab, ")");
  TokenizerTrainReport report;
  report.corpus_bytes = static_cast<int64_t>(fs::file_size(o.corpus));
  DTRAIN_CHECK(report.corpus_bytes > 0, "--train ", o.corpus, ": the file is empty");
  check_utf8_file(o.corpus, "--train");
  const std::unordered_map<std::string, std::string> args = {
      {"input", o.corpus},
      {"vocab_size", std::to_string(o.vocab)},
      {"model_type", o.type == TokenizerType::bpe ? "bpe" : "unigram"},
      {"byte_fallback", "true"},  // a character outside the pieces is its UTF-8 bytes
      {"character_coverage", "1.0"},
      // Exact round trips: no Unicode normalization, no added or merged whitespace.
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"bos_id", "-1"},  // no sentence markers: a token file is one stream of text
      {"eos_id", "-1"},
      {"input_sentence_size", "0"},  // every line, no sampling
      {"shuffle_input_sentence", "false"},
      {"num_threads", "1"},
      {"minloglevel", "2"}};  // no progress log or warnings on stderr (errors come back)
  sentencepiece::SetRandomGeneratorSeed(kTrainSeed);
  const Stopwatch watch;
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, nullptr, &model);
  if (!status.ok()) throw_training_error(o, status.ToString());
  {
    std::ofstream out(o.model, std::ios::binary | std::ios::trunc);
    DTRAIN_CHECK(out.good(), "--model ", o.model, ": cannot be written (", std::strerror(errno),
                 ")");
    errno = 0;
    out.write(model.data(), static_cast<std::streamsize>(model.size()));
    out.close();
    DTRAIN_CHECK(!out.fail(), "--model ", o.model, ": cannot be written (",
                 errno != 0 ? std::strerror(errno) : "write failed", ")");
  }
  report.seconds = watch.elapsed_s();
  report.vocab = Tokenizer(o.model, "--model").vocab();
  return report;
}

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

Tokenizer::Tokenizer(const std::string& path, std::string_view flag)
    : impl_(std::make_unique<Impl>()) {
  check_input_file(path, flag);
  // SentencePiece's own text here is a source location ("Internal: ...cc(1101)
  // [model_proto->ParseFromArray(...)]"), which tells a user nothing.
  const auto status = impl_->processor.Load(path);
  DTRAIN_CHECK(status.ok(), flag, " ", path,
               ": not a SentencePiece model (the file does not parse as one; `dtrain tokenize "
               "--train CORPUS --model M.model` writes them)");
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

int64_t Tokenizer::vocab() const {
  return impl_->processor.GetPieceSize();
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = impl_->processor.Encode(text, &ids);
  DTRAIN_CHECK(status.ok(), "tokenizer: encoding failed: ", status.ToString());
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(std::span<const int32_t> tokens) const {
  const int64_t v = vocab();
  for (size_t i = 0; i < tokens.size(); ++i) {
    DTRAIN_CHECK(tokens[i] >= 0 && tokens[i] < v, "tokenizer: token ", tokens[i], " at index ", i,
                 " is not below the vocabulary size ", v);
  }
  std::string text;
  const auto status =
      impl_->processor.Decode(std::vector<int>(tokens.begin(), tokens.end()), &text);
  DTRAIN_CHECK(status.ok(), "tokenizer: decoding failed: ", status.ToString());
  return text;
}

namespace {

// Where to cut `text` so that the head can be encoded alone: after its last newline; for a line
// longer than kMaxLineBytes, before a UTF-8 lead byte; 0 when the chunk must grow first.
size_t chunk_end(std::string_view text, bool at_eof) {
  if (at_eof) return text.size();
  const size_t newline = text.rfind('\n');
  if (newline != std::string_view::npos) return newline + 1;
  if (text.size() < kMaxLineBytes) return 0;
  size_t cut = text.size();
  while (cut > 0 && (static_cast<unsigned char>(text[cut - 1]) & 0xC0) == 0x80) --cut;
  // text[cut - 1] starts the last character, which may be incomplete: cut before it.
  return cut > 1 ? cut - 1 : text.size();
}

// The length of the first run of `text` to encode: whole lines up to about kEncodeBytes (the
// first line alone when it is longer), or all of `text` when it holds no further newline.
size_t encode_run(std::string_view text) {
  if (text.size() <= kEncodeBytes) return text.size();
  size_t newline = text.rfind('\n', kEncodeBytes - 1);
  if (newline == std::string_view::npos) newline = text.find('\n', kEncodeBytes);
  return newline == std::string_view::npos ? text.size() : newline + 1;
}

// Encodes `head` run by run (encode_run), the runs shared among `threads` threads, and appends
// the tokens in the text's order to `out`: the same tokens for any thread count.
void encode_runs(const Tokenizer& tokenizer, std::string_view head, int threads,
                 std::vector<uint16_t>& out) {
  std::vector<std::string_view> runs;
  for (size_t pos = 0; pos < head.size();) {
    const size_t n = encode_run(head.substr(pos));
    runs.push_back(head.substr(pos, n));
    pos += n;
  }
  std::vector<std::vector<int32_t>> ids(runs.size());
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;
  auto work = [&] {
    try {
      for (size_t i = next++; i < runs.size(); i = next++) ids[i] = tokenizer.encode(runs[i]);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  {
    std::vector<std::jthread> pool;
    for (int t = 1; t < threads && static_cast<size_t>(t) < runs.size(); ++t)
      pool.emplace_back(work);
    work();
  }
  if (error) std::rethrow_exception(error);
  for (const auto& v : ids) out.insert(out.end(), v.begin(), v.end());  // every id < 65536
}

void write_header(std::ostream& out, int64_t count) {
  std::vector<int32_t> header(kLlmcHeaderBytes / 4, 0);
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersionUint16;
  header[2] = static_cast<int32_t>(count);
  out.seekp(0);
  out.write(reinterpret_cast<const char*>(header.data()), kLlmcHeaderBytes);
}

}  // namespace

EncodeReport encode_file(const Tokenizer& tokenizer, const std::string& input,
                         const std::string& output, int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  DTRAIN_CHECK(tokenizer.vocab() <= kMaxUint16Vocab, "--model has ", tokenizer.vocab(),
               " pieces, more than the ", kMaxUint16Vocab,
               " that uint16 token files hold (train it with a smaller --vocab)");
  check_regular_text_file(input, "input");
  check_output_file(output, "output");
  EncodeReport report;
  report.input_bytes = static_cast<int64_t>(fs::file_size(input));
  DTRAIN_CHECK(report.input_bytes > 0, "input ", input, ": the file is empty");
  const Stopwatch watch;
  std::ifstream in(input, std::ios::binary);
  DTRAIN_CHECK(in.good(), "input ", input, ": cannot be read");
  std::ofstream out(output, std::ios::binary | std::ios::trunc);
  DTRAIN_CHECK(out.good(), "output ", output, ": cannot be written");
  // Checked right after each write, while errno still holds the reason (a full disk: "No space
  // left on device").
  auto check_written = [&] {
    DTRAIN_CHECK(!out.fail(), "output ", output, ": cannot be written (",
                 errno != 0 ? std::strerror(errno) : "write failed", ")");
  };
  try {
    errno = 0;
    write_header(out, 0);  // the count is written at the end
    check_written();
    std::string text;
    std::vector<char> block(kChunkBytes);
    std::vector<uint16_t> narrow;
    bool at_eof = false;
    int64_t consumed = 0;  // bytes of input before `text`
    while (!at_eof) {
      in.read(block.data(), static_cast<std::streamsize>(block.size()));
      const auto got = static_cast<size_t>(in.gcount());
      DTRAIN_CHECK(!in.bad(), "input ", input, ": read error");
      at_eof = in.eof() || got == 0;
      text.append(block.data(), got);
      const size_t end = chunk_end(text, at_eof);
      if (end == 0) continue;
      // Chunks end after a newline or before a character, so each holds whole characters.
      const size_t bad = invalid_text_offset(std::string_view(text).substr(0, end), true);
      if (bad != std::string_view::npos) {
        throw_not_text("input", input, consumed + static_cast<int64_t>(bad),
                       static_cast<unsigned char>(text[bad]));
      }
      narrow.clear();
      encode_runs(tokenizer, std::string_view(text).substr(0, end), threads, narrow);
      text.erase(0, end);
      consumed += static_cast<int64_t>(end);
      errno = 0;
      out.write(reinterpret_cast<const char*>(narrow.data()),
                static_cast<std::streamsize>(2 * narrow.size()));
      check_written();
      report.tokens += static_cast<int64_t>(narrow.size());
      DTRAIN_CHECK(report.tokens <= std::numeric_limits<int32_t>::max(), "output ", output,
                   ": more than ", std::numeric_limits<int32_t>::max(),
                   " tokens, the most an llm.c header's int32 count holds; split input ", input);
    }
    errno = 0;
    out.flush();
    check_written();
    write_header(out, report.tokens);
    out.close();
    check_written();
  } catch (...) {
    out.close();
    // The half-written token file goes; a device (/dev/full) or a pipe is not ours to remove.
    std::error_code ec;
    if (fs::is_regular_file(fs::status(output, ec))) fs::remove(output, ec);
    throw;
  }
  report.seconds = watch.elapsed_s();
  report.threads = threads;
  return report;
}

}  // namespace dtrain::data
