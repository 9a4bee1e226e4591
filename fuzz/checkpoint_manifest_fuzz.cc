// Fuzz target: parse_manifest, the checkpoint manifest reader. Any text may be rejected with
// dtrain::Error; a crash, undefined behaviour or any other exception is a finding. A manifest it
// accepts must survive manifest_to_json and parse again to the same text (a fixed point).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "dtrain/checkpoint/checkpoint.h"
#include "dtrain/core/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  dtrain::checkpoint::Manifest manifest;
  try {
    manifest = dtrain::checkpoint::parse_manifest(text, "fuzz/manifest.json");
  } catch (const dtrain::Error&) {
    return 0;  // rejected with a message: the expected outcome for most inputs
  }
  const std::string once = dtrain::checkpoint::manifest_to_json(manifest);
  const std::string twice =
      dtrain::checkpoint::manifest_to_json(dtrain::checkpoint::parse_manifest(once, "round trip"));
  if (once != twice) __builtin_trap();
  return 0;
}
