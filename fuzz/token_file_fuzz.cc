// Fuzz target: token_file_layout and check_token_range, the token file readers behind --data.
// The first byte picks the name (.bin or .txt) and whether --vocab is given (and which); the rest
// is the file. Any input may be rejected with dtrain::Error; a crash, undefined behaviour or any
// other exception is a finding. An accepted token file must hold its tokens inside the input,
// each below the vocabulary.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include "dtrain/core/check.h"
#include "dtrain/data/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const auto file = std::as_bytes(std::span<const uint8_t>(data + 1, size - 1));
  const char* path = (mode & 1) != 0 ? "fuzz/tokens.bin" : "fuzz/tokens.txt";
  std::optional<int64_t> vocab;
  if ((mode & 2) != 0) vocab = int64_t{1} << ((mode >> 2) % 17);  // 1 .. 65536
  using namespace dtrain::train;
  TokenFileLayout layout;
  try {
    const auto file_bytes = static_cast<int64_t>(file.size());
    layout =
        token_file_layout(file.first(static_cast<size_t>(std::min(file_bytes, kLlmcHeaderBytes))),
                          file_bytes, path, vocab);
    check_token_range(file, layout, path);
  } catch (const dtrain::Error&) {
    return 0;  // rejected with a message: the expected outcome for most inputs
  }
  if (layout.format == TokenFileFormat::text) return 0;
  if (layout.data_offset + 2 * layout.count > static_cast<int64_t>(file.size())) __builtin_trap();
  for (int64_t i = 0; i < layout.count; ++i) {
    uint16_t token = 0;
    std::memcpy(&token, file.data() + layout.data_offset + 2 * i, 2);
    if (token >= layout.vocab) __builtin_trap();
  }
  return 0;
}
