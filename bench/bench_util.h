// Small helpers every benchmark report shares: the median of repeated timings, fixed-width
// number formatting for the tables, and running a peer or a dtrain subprocess (a command whose
// logfmt lines or JSON we read).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/core/statistics.h"

namespace dtrain::bench {

// The median of repeated measurements (mean of the middle two for an even count).
using dtrain::median;

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

// `s` left-aligned in `width` columns.
inline std::string rpad(const std::string& s, size_t width) {
  return s.size() < width ? s + std::string(width - s.size(), ' ') : s;
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

// `s` as one word for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string quoted = "'";
  for (char ch : s) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return quoted + "'";
}

// The first executable `name` on $PATH, or "" when there is none.
inline std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::filesystem::path candidate = std::filesystem::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(candidate)) {
      return candidate.string();
    }
  }
  return "";
}

struct CommandResult {
  bool started = false;
  int exit_code = -1;  // -1: killed by a signal
  std::string output;  // stdout, and stderr too unless the command redirects it
};

// Runs `command` under /bin/sh; stderr joins stdout unless `merge_stderr` is false (the command
// then redirects it itself, e.g. to a file, so that stdout stays parseable JSON).
inline CommandResult run_command(const std::string& command, bool merge_stderr = true) {
  CommandResult result;
  FILE* pipe = popen((merge_stderr ? command + " 2>&1" : command).c_str(), "r");
  if (pipe == nullptr) return result;
  result.started = true;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), static_cast<int>(buf.size()), pipe) != nullptr)
    result.output += buf.data();
  const int status = pclose(pipe);
  result.exit_code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace dtrain::bench
