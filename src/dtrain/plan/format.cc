// The formatting helpers of format.h.
#include "dtrain/plan/format.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace dtrain::plan {

std::string format_fixed(double v, int decimals) {
  char out[64];
  std::snprintf(out, sizeof(out), "%.*f", decimals, v);
  return out;
}

std::string format_gb(double bytes) {
  const double gb = bytes * 1e-9;
  const double a = std::fabs(gb);
  if (a >= 1000) return format_fixed(gb * 1e-3, 2) + " TB";
  return format_fixed(gb, a >= 100 ? 1 : a >= 1 || a == 0 ? 2 : 3) + " GB";
}

std::string format_seconds(double seconds) {
  const double a = std::fabs(seconds);
  if (a == 0) return "0 s";
  if (a >= 1) return format_fixed(seconds, 2) + " s";
  if (a >= 1e-3) return format_fixed(seconds * 1e3, 1) + " ms";
  return format_fixed(seconds * 1e6, 1) + " us";
}

std::string format_percent(double fraction) {
  return format_fixed(fraction * 100, 1) + "%";
}

std::string format_count(double n) {
  const std::string digits = format_fixed(std::fabs(n), 0);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string format_params(double params) {
  if (params >= 1e12) return format_fixed(params * 1e-12, 2) + "T";
  if (params >= 1e9) return format_fixed(params * 1e-9, 2) + "B";
  if (params >= 1e6) return format_fixed(params * 1e-6, 1) + "M";
  return format_count(params);
}

std::string format_rate(double bytes_per_s) {
  return format_fixed(bytes_per_s * 1e-9, bytes_per_s >= 1e10 ? 0 : 1) + " GB/s";
}

std::string pad_right(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string format_sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2e", v);
  return buf;
}

}  // namespace dtrain::plan
