// Token files for --data: llm.c's format (a header of 256 int32: magic 20240520, version 1 for
// uint16 tokens, the token count; then the tokens) recognised by its magic, and nanoGPT's raw
// uint16 `.bin` (no header) when --vocab is given. The file is mapped, not read; it is scanned
// once at open so that a token >= the vocabulary is refused with its offset, before any step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "dtrain/data/token_source.h"

namespace dtrain::data {

inline constexpr int32_t kLlmcMagic = 20240520;       // header[0]
inline constexpr int32_t kLlmcVersionUint16 = 1;      // header[1]: uint16 tokens
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;  // header[2] is the token count
// llm.c's token files hold GPT-2 tokens; the vocabulary when --vocab does not say otherwise.
inline constexpr int64_t kGpt2Vocab = 50257;

enum class TokenFileFormat { text, llmc, raw_uint16 };
const char* format_name(TokenFileFormat format);  // "text", "llm.c", "raw uint16"

// Where the tokens of a file lie: `count` uint16 tokens from byte `data_offset`.
struct TokenFileLayout {
  TokenFileFormat format = TokenFileFormat::text;
  int64_t data_offset = 0;
  int64_t count = 0;
  int64_t vocab = 0;  // tokens must be < vocab (0 for text: bytes)
};

// The format of a file of `file_bytes` bytes whose first bytes are `head` (at least
// min(file_bytes, kLlmcHeaderBytes) of them), named `path`, with --vocab `vocab` if given:
// llm.c by its magic; else raw uint16 if the name ends in .bin and --vocab is given; else text.
// Throws Error naming --data, the file and the byte offset of a malformed header or length.
TokenFileLayout token_file_layout(std::span<const std::byte> head, int64_t file_bytes,
                                  std::string_view path, std::optional<int64_t> vocab);

// Throws Error naming --data, the file and the byte offset of the first token >= layout.vocab.
// `file` is the whole file (the tokens are read from layout.data_offset; no alignment needed).
void check_token_range(std::span<const std::byte> file, const TokenFileLayout& layout,
                       std::string_view path);

// What --data gave: the tokens (a mapping for token files, int32 bytes for text), the format
// and, for token files, the vocabulary the model must have.
struct TokenData {
  TokenSource tokens;
  TokenFileFormat format = TokenFileFormat::text;
  int64_t vocab = 0;  // 0 for text
};
TokenData load_token_data(const std::string& path, std::optional<int64_t> vocab);

}  // namespace dtrain::data
