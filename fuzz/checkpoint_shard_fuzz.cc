// Fuzz target: the shard reader. Input starting with 'r': read_shard on the bytes after a
// 20-byte piece description (offset, count, crc32), so its own bounds checks see any values.
// Otherwise a bundle (checkpoint_bundle.h): a manifest and its shard files, through
// parse_manifest and assemble_state. dtrain::Error is the only accepted failure.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "checkpoint_bundle.h"
#include "dtrain/checkpoint/checkpoint.h"
#include "dtrain/core/check.h"

namespace {

void read_one_piece(std::span<const uint8_t> input) {
  if (input.size() < 20) return;
  dtrain::checkpoint::ShardEntry entry;
  entry.tensor = "wte";
  std::memcpy(&entry.byte_offset, input.data(), 8);
  std::memcpy(&entry.count, input.data() + 8, 8);
  std::memcpy(&entry.crc32, input.data() + 16, 4);
  const std::span<const std::byte> bytes = std::as_bytes(input.subspan(20));
  const std::vector<float> values = dtrain::checkpoint::read_shard(bytes, entry, "fuzz.bin");
  if (static_cast<int64_t>(values.size()) != entry.count) __builtin_trap();
}

void read_bundle(std::string_view input) {
  const dtrain::fuzz::Bundle bundle = dtrain::fuzz::split_bundle(input);
  const dtrain::checkpoint::Manifest manifest =
      dtrain::checkpoint::parse_manifest(bundle.manifest, "fuzz/manifest.json");
  const dtrain::checkpoint::SerialState state =
      dtrain::checkpoint::assemble_state(manifest, bundle.files, "fuzz/manifest.json");
  const auto total = static_cast<size_t>(state.table.total_count());
  if (state.params.size() != total || state.adam_m.size() != total ||
      state.adam_v.size() != total) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    if (size > 0 && data[0] == 'r') {
      read_one_piece(std::span<const uint8_t>(data + 1, size - 1));
    } else {
      read_bundle(std::string_view(reinterpret_cast<const char*>(data), size));
    }
  } catch (const dtrain::Error&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
