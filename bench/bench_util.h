// Small helpers every benchmark report shares: the median of repeated timings, fixed-width
// number formatting for the tables, and running a peer (a command whose logfmt lines we read).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace dtrain::bench {

// The median of repeated measurements (mean of the middle two for an even count).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// `v` with `digits` decimals.
inline std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// `s` right-aligned in `width` columns.
inline std::string lpad(const std::string& s, size_t width) {
  return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
}

// The value of `key=` in a logfmt line, or "" when absent.
inline std::string field(const std::string& line, const std::string& key) {
  std::istringstream in(line);
  std::string pair;
  while (in >> pair) {
    if (pair.rfind(key + "=", 0) == 0) return pair.substr(key.size() + 1);
  }
  return "";
}

// Everything `command` printed (stdout; add 2>&1 for stderr), or nothing when it could not start.
inline std::optional<std::string> command_output(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (pipe == nullptr) return std::nullopt;
  std::array<char, 4096> buf{};
  std::string output;
  while (fgets(buf.data(), static_cast<int>(buf.size()), pipe.get()) != nullptr) {
    output += buf.data();
  }
  return output;
}

}  // namespace dtrain::bench
