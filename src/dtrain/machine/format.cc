// The formatting helpers of format.h.
#include "dtrain/machine/format.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string>

namespace dtrain::plan {

std::string format_fixed(double v, int decimals) {
  char out[64];
  std::snprintf(out, sizeof(out), "%.*f", decimals, v);
  return out;
}

namespace {

// The text of a value that is not a finite number, so no branch below has to scale it.
std::string non_finite(double v) {
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

// `value` in `units[0]`, moved up a unit (x1000) while it would print 1000 or more: the
// rounding is done before the comparison, so 999.96 GB prints "1.00 TB", not "1000.0 GB".
// Empty past the last unit: the caller chooses the fallback.
std::string scaled(double value, const char* const* units, size_t unit_count) {
  for (size_t u = 0; u < unit_count; ++u, value *= 1e-3) {
    // Decimals by the magnitude after rounding (0.99996 TB prints "1.00 TB", not "1.000 TB").
    std::string digits = format_fixed(value, 2);  // zero, and 1 <= |value| < 100
    if (value != 0 && std::fabs(std::stod(format_fixed(value, 3))) < 1) {
      digits = format_fixed(value, 3);
    } else if (std::fabs(std::stod(digits)) >= 100) {
      digits = format_fixed(value, 1);
    }
    if (std::fabs(std::stod(digits)) < 1000) return digits + " " + units[u];
  }
  return "";
}

}  // namespace

std::string format_gb(double bytes) {
  if (!std::isfinite(bytes)) return non_finite(bytes) + " GB";
  // SI prefixes up to yotta (10^24); a figure past 1000 YB is no size anyone plans, and
  // scientific notation in bytes keeps it short and unambiguous ("1.00e+30 B").
  static const char* const kUnits[] = {"GB", "TB", "PB", "EB", "ZB", "YB"};
  const std::string s = scaled(bytes * 1e-9, kUnits, std::size(kUnits));
  return s.empty() ? format_sci(bytes) + " B" : s;
}

std::string format_seconds(double seconds) {
  const double a = std::fabs(seconds);
  if (!std::isfinite(seconds)) return non_finite(seconds) + " s";
  if (a == 0) return "0 s";
  if (a >= 1e6) return format_sci(seconds) + " s";  // past 11 days: digits, not a date
  if (a >= 1) return format_fixed(seconds, 2) + " s";
  if (a >= 1e-3) return format_fixed(seconds * 1e3, 1) + " ms";
  return format_fixed(seconds * 1e6, 1) + " us";
}

std::string format_percent(double fraction) {
  return format_fixed(fraction * 100, 1) + "%";
}

std::string format_count(double n) {
  if (!std::isfinite(n)) return non_finite(n);
  if (std::fabs(n) >= 1e18) return format_sci(n);  // past int64: no 31-digit rows
  const std::string digits = format_fixed(std::fabs(n), 0);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string format_params(double params) {
  if (!std::isfinite(params)) return non_finite(params);
  if (params >= 1e15) return format_sci(params);  // no "1000000.00T"
  if (params >= 1e12) return format_fixed(params * 1e-12, 2) + "T";
  if (params >= 1e9) return format_fixed(params * 1e-9, 2) + "B";
  if (params >= 1e6) return format_fixed(params * 1e-6, 1) + "M";
  return format_count(params);
}

std::string format_rate(double bytes_per_s) {
  if (!std::isfinite(bytes_per_s)) return non_finite(bytes_per_s) + " GB/s";
  // A link rate stays in GB/s, the unit of every datasheet it is compared with; one that is
  // no hardware's (a mistyped measurement) prints in scientific notation, not as 16 digits.
  if (std::fabs(bytes_per_s) >= 1e15) return format_sci(bytes_per_s * 1e-9) + " GB/s";
  return format_fixed(bytes_per_s * 1e-9, std::fabs(bytes_per_s) >= 1e10 ? 0 : 1) + " GB/s";
}

std::string format_flops(double flops_per_s) {
  if (!std::isfinite(flops_per_s)) return non_finite(flops_per_s) + " FLOP/s";
  // Three significant figures in the prefix that puts the value in [1, 1000): "989 TFLOP/s",
  // "52.3 GFLOP/s", "1.50 TFLOP/s"; rounded first, so 999.7 GFLOP/s prints "1.00 TFLOP/s".
  static const char* const kUnits[] = {"FLOP/s",  "kFLOP/s", "MFLOP/s", "GFLOP/s",
                                       "TFLOP/s", "PFLOP/s", "EFLOP/s"};
  double value = flops_per_s;
  for (const char* unit : kUnits) {
    const double a = std::fabs(value);
    const int decimals = a >= 99.95 ? 0 : a >= 9.995 ? 1 : 2;
    const std::string digits = format_fixed(value, decimals);
    if (std::fabs(std::stod(digits)) < 1000) return digits + " " + unit;
    value *= 1e-3;
  }
  return format_sci(flops_per_s) + " FLOP/s";
}

std::string TextTable::render() const {
  std::vector<size_t> widths = min_widths_;
  for (const std::vector<std::string>& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    // Every column but a row's last keeps one space after its widest cell.
    for (size_t c = 0; c + 1 < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size() + 1);
  }
  std::string out;
  for (const std::vector<std::string>& row : rows_) {
    out += indent_;
    for (size_t c = 0; c < row.size(); ++c)
      out += c + 1 < row.size() ? pad_right(row[c], widths[c]) : row[c];
    out += "\n";
  }
  return out;
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
