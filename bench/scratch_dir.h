// A benchmark's temporary folder (`bench tokenize` writes 100+ MB there): made with a unique name,
// and removed when the benchmark ends, throws, or is stopped by Ctrl-C or SIGTERM, so that no run
// leaves its files behind in the temporary directory.
#pragma once

#include <csignal>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::bench {

class ScratchDir {
 public:
  // Makes `<temp>/<prefix>-XXXXXX` for the files `names` (the only ones the benchmark writes
  // there), and, for this object's lifetime, handles SIGINT and SIGTERM: the handler removes
  // those files and the folder (unlink and rmdir are async-signal-safe), says so on stderr, and
  // ends the process by the same signal. One ScratchDir at a time holds the handlers.
  ScratchDir(std::string_view prefix, const std::vector<std::string>& names);
  // Removes the folder and all it holds, and restores the previous handlers.
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of one of the names given to the constructor.
  std::string file(std::string_view name) const;

 private:
  std::filesystem::path path_;
  std::vector<std::string> names_;
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

}  // namespace dtrain::bench
