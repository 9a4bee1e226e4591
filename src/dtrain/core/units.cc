// parse_bytes / format_bytes.
#include "dtrain/core/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include "dtrain/core/check.h"

namespace dtrain {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

int64_t parse_bytes(std::string_view text, std::string_view flag) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  DTRAIN_CHECK(
      digits > 0, flag, ": '", text,
      "' is not a size (expected a number with an optional unit such as 4KiB, 64MiB, 1GB)");
  const std::string unit = lower(text.substr(digits));
  int64_t scale = 0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "k" || unit == "kib")
    scale = int64_t{1} << 10;
  else if (unit == "m" || unit == "mib")
    scale = int64_t{1} << 20;
  else if (unit == "g" || unit == "gib")
    scale = int64_t{1} << 30;
  else if (unit == "t" || unit == "tib")
    scale = int64_t{1} << 40;
  else if (unit == "kb")
    scale = 1000;
  else if (unit == "mb")
    scale = 1000 * 1000;
  else if (unit == "gb")
    scale = 1000 * 1000 * 1000;
  else if (unit == "tb")
    scale = int64_t{1000} * 1000 * 1000 * 1000;
  DTRAIN_CHECK(scale > 0, flag, ": unknown unit '", text.substr(digits), "' in '", text,
               "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
  DTRAIN_CHECK(digits <= 15, flag, ": '", text, "' is too large");
  const int64_t value = std::stoll(std::string(text.substr(0, digits)));
  DTRAIN_CHECK(value <= std::numeric_limits<int64_t>::max() / scale, flag, ": '", text,
               "' is too large");
  return value * scale;
}

std::string format_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char out[48];
  if (u == 0)
    std::snprintf(out, sizeof(out), "%.0f B", v);
  else if (v == std::floor(v))
    std::snprintf(out, sizeof(out), "%.0f %s", v, kUnits[u]);
  else
    std::snprintf(out, sizeof(out), "%.2f %s", v, kUnits[u]);
  return out;
}

}  // namespace dtrain
