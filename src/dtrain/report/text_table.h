// The cell formats the training reports' tables share: figures with fixed decimals, whole or
// with thousands separators, and cells aligned to a column width.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace dtrain::train {

// `v` with `digits` decimals.
inline std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// "123457" for 123456.7: byte counts and call counts print whole.
inline std::string whole_number(double v) {
  return fixed(v, 0);
}

// 1234567 -> "1,234,567" (built by appending: std::string::insert trips GCC 12's -Wrestrict)
inline std::string grouped(double v) {
  const std::string digits = fixed(v, 0);
  const size_t start = digits[0] == '-' ? 1 : 0;
  std::string out = digits.substr(0, start);
  for (size_t i = start; i < digits.size(); ++i) {
    if (i > start && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// `s` padded on the right to `width` characters.
inline std::string left_aligned(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

// "12.3%" for 0.123.
inline std::string percent(double fraction) {
  return fixed(100 * fraction, 1) + "%";
}

// "0,2,4": ranks and nodes in messages and tables.
inline std::string joined(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

// `s` padded on the left to `width` characters (longer text is left as it is).
inline std::string right_aligned(const std::string& s, size_t width) {
  return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
}

}  // namespace dtrain::train
