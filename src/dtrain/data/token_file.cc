// Token files: the header and length checks, the one scan for out-of-range tokens, and the
// mapping behind a TokenSource.
#include "dtrain/data/token_file.h"

#include <bit>
#include <cstring>

#include "dtrain/core/check.h"
#include "dtrain/core/mapped_file.h"
#include "dtrain/data/data.h"

namespace dtrain::data {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and mapped as they are");

const char* format_name(TokenFileFormat format) {
  switch (format) {
    case TokenFileFormat::text:
      return "text";
    case TokenFileFormat::llmc:
      return "llm.c";
    case TokenFileFormat::raw_uint16:
      return "raw uint16";
  }
  return "?";
}

namespace {

int32_t header_word(std::span<const std::byte> head, int index) {
  int32_t v = 0;
  std::memcpy(&v, head.data() + 4 * index, 4);
  return v;
}

bool ends_with_bin(std::string_view path) {
  return path.size() >= 4 && path.substr(path.size() - 4) == ".bin";
}

TokenFileLayout llmc_layout(std::span<const std::byte> head, int64_t file_bytes,
                            std::string_view path, std::optional<int64_t> vocab) {
  DTRAIN_CHECK(file_bytes >= kLlmcHeaderBytes, "--data ", path, ": llm.c token file (magic ",
               kLlmcMagic, ") with a short header: the file ends at byte offset ", file_bytes,
               " but the header is ", kLlmcHeaderBytes, " bytes");
  const int32_t version = header_word(head, 1);
  DTRAIN_CHECK(version == kLlmcVersionUint16, "--data ", path, ": llm.c token file version ",
               version, " at byte offset 4; only version ", kLlmcVersionUint16,
               " (uint16 tokens) is read");
  const int64_t count = header_word(head, 2);
  const int64_t tokens_bytes = file_bytes - kLlmcHeaderBytes;
  DTRAIN_CHECK(count > 0, "--data ", path, ": the token count at byte offset 8 is ", count,
               "; it must be positive");
  DTRAIN_CHECK(kLlmcHeaderBytes + 2 * count <= file_bytes, "--data ", path,
               ": the header (byte offset 8) counts ", count, " tokens, which end at byte offset ",
               kLlmcHeaderBytes + 2 * count, ", but the file has ", file_bytes, " bytes (",
               tokens_bytes / 2, " tokens)");
  DTRAIN_CHECK(kLlmcHeaderBytes + 2 * count == file_bytes, "--data ", path, ": ",
               file_bytes - kLlmcHeaderBytes - 2 * count,
               " byte(s) after the last token, from byte offset ", kLlmcHeaderBytes + 2 * count,
               " (the header at byte offset 8 counts ", count, " tokens)");
  TokenFileLayout layout{TokenFileFormat::llmc, kLlmcHeaderBytes, count,
                         vocab.value_or(kGpt2Vocab)};
  return layout;
}

}  // namespace

TokenFileLayout token_file_layout(std::span<const std::byte> head, int64_t file_bytes,
                                  std::string_view path, std::optional<int64_t> vocab) {
  DTRAIN_CHECK(file_bytes > 0, "--data ", path, ": file is empty");
  DTRAIN_CHECK(!vocab || *vocab > 0, "--vocab must be positive (got ", vocab.value_or(0), ")");
  if (head.size() >= 4 && header_word(head, 0) == kLlmcMagic) {
    return llmc_layout(head, file_bytes, path, vocab);
  }
  if (ends_with_bin(path)) {
    DTRAIN_CHECK(vocab.has_value(), "--data ", path, ": a .bin file without llm.c's header (magic ",
                 kLlmcMagic,
                 ") is read as raw uint16 tokens and needs --vocab N, the "
                 "vocabulary its tokens come from (50257 for GPT-2)");
    DTRAIN_CHECK(file_bytes % 2 == 0, "--data ", path,
                 ": raw uint16 tokens need an even length, "
                 "but the file has ",
                 file_bytes, " bytes (the last token, at byte offset ", file_bytes - 1,
                 ", is cut)");
    return {TokenFileFormat::raw_uint16, 0, file_bytes / 2, *vocab};
  }
  return {TokenFileFormat::text, 0, file_bytes, 0};
}

void check_token_range(std::span<const std::byte> file, const TokenFileLayout& layout,
                       std::string_view path) {
  if (layout.format == TokenFileFormat::text) return;
  DTRAIN_CHECK(layout.data_offset >= 0 && layout.count >= 0 &&
                   static_cast<size_t>(layout.data_offset + 2 * layout.count) <= file.size(),
               "--data ", path, ": the tokens run past the end of the file");
  const std::byte* p = file.data() + layout.data_offset;
  // Blocks of tokens, their maximum first (a loop the compiler vectorises); the block that holds
  // a bad token is searched again for its first.
  constexpr int64_t kBlock = 4096;
  for (int64_t begin = 0; begin < layout.count; begin += kBlock) {
    const int64_t n = std::min(kBlock, layout.count - begin);
    uint16_t block[kBlock];
    std::memcpy(block, p + 2 * begin, static_cast<size_t>(2 * n));
    uint16_t largest = 0;
    for (int64_t i = 0; i < n; ++i) largest = std::max(largest, block[i]);
    if (largest < layout.vocab) continue;
    for (int64_t i = 0; i < n; ++i) {
      DTRAIN_CHECK(block[i] < layout.vocab, "--data ", path, ": token ", block[i], " at index ",
                   begin + i, " (byte offset ", layout.data_offset + 2 * (begin + i),
                   ") is not below the vocabulary size ", layout.vocab,
                   layout.format == TokenFileFormat::llmc && layout.vocab == kGpt2Vocab
                       ? " (GPT-2's, llm.c's default; --vocab sets another)"
                       : " (--vocab)");
    }
  }
}

TokenData load_token_data(const std::string& path, std::optional<int64_t> vocab) {
  std::shared_ptr<const MappedFile> file = MappedFile::open(path, "--data");
  const std::span<const std::byte> bytes = file->bytes();
  const auto file_bytes = static_cast<int64_t>(bytes.size());
  const TokenFileLayout layout =
      token_file_layout(bytes.first(static_cast<size_t>(std::min(file_bytes, kLlmcHeaderBytes))),
                        file_bytes, path, vocab);
  TokenData data;
  data.format = layout.format;
  if (layout.format == TokenFileFormat::text) {
    data.tokens = TokenSource::owning(
        tokenize_bytes({reinterpret_cast<const char*>(bytes.data()), bytes.size()}));
    return data;
  }
  check_token_range(bytes, layout, path);
  data.vocab = layout.vocab;
  // The data offset is 0 or 1024 in a page-aligned mapping: the uint16 view is aligned.
  const auto* tokens = reinterpret_cast<const uint16_t*>(bytes.data() + layout.data_offset);
  data.tokens = TokenSource::narrow({tokens, static_cast<size_t>(layout.count)}, std::move(file));
  return data;
}

}  // namespace dtrain::data
