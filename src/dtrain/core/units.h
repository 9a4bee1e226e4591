// Sizes with units: "64MiB" <-> 67108864. Parsing errors name the flag the text came from.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dtrain {

// Accepts an integer with an optional unit: B, KiB, MiB, GiB, TiB (powers of 1024) or
// KB, MB, GB, TB (powers of 1000), case-insensitive for the prefix ("64MiB", "4k" = 4 KiB).
// Throws Error naming `flag` on anything else.
int64_t parse_bytes(std::string_view text, std::string_view flag);

// "64 MiB", "1.50 GiB", "512 B".
std::string format_bytes(double bytes);

}  // namespace dtrain
