// The two cell formats the training reports' tables share: a figure as a whole number, and a
// cell right-aligned to a column width.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace dtrain::train {

// "123457" for 123456.7: byte counts and call counts print whole.
inline std::string whole_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.0f", v);
  return buf;
}

// `s` padded on the left to `width` characters (longer text is left as it is).
inline std::string right_aligned(const std::string& s, size_t width) {
  return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
}

}  // namespace dtrain::train
