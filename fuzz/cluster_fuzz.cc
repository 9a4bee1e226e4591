// Fuzz target: the planner's cluster inputs, `--cluster` specs ("8x8xH100") and cluster JSON
// files. Any input may be rejected with dtrain::Error; anything else (a crash, undefined
// behaviour, another exception escaping) is a finding. Accepted JSON must round-trip.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "dtrain/core/check.h"
#include "dtrain/machine/hardware.h"

namespace {

void check_round_trip(const dtrain::plan::Cluster& c) {
  const dtrain::plan::Cluster again =
      dtrain::plan::cluster_from_json(dtrain::plan::to_json(c), "round trip");
  if (again.nodes != c.nodes || again.gpus_per_node != c.gpus_per_node ||
      again.gpu.name != c.gpu.name) {
    __builtin_trap();
  }
}

// parse_cluster reads a file when the spec ends in ".json" in any case.
bool names_a_json_file(std::string_view spec) {
  if (spec.size() <= 5) return false;
  std::string tail(spec.substr(spec.size() - 5));
  for (char& ch : tail) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return tail == ".json";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the parser, so one corpus covers both and the seeds stay readable.
  const bool as_json = (data[0] & 1) == 0;  // seeds use 'j' (JSON) and 's' (spec)
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (as_json) {
      const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) return 0;
      const dtrain::plan::Cluster c = dtrain::plan::cluster_from_json(j, "fuzz.json");
      dtrain::plan::validate(c);
      check_round_trip(c);
    } else if (!names_a_json_file(text)) {  // a spec; reading files is not what we test
      dtrain::plan::validate(dtrain::plan::parse_cluster(text));
    }
  } catch (const dtrain::Error&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
