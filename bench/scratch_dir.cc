// The signal handler can only use what is async-signal-safe: the paths to remove are copied into
// fixed buffers before the handlers are installed, and the handler calls unlink, rmdir, write,
// sigaction and raise, nothing else.
#include "bench/scratch_dir.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "dtrain/core/check.h"

namespace dtrain::bench {
namespace {

constexpr size_t kMaxFiles = 8;
constexpr size_t kMaxPath = 4096;

// What the handler removes: the files, then the folder (last). Process-wide because a signal
// handler has no other way to reach it; `g_armed` says whether it holds a live ScratchDir.
std::array<std::array<char, kMaxPath>, kMaxFiles + 1> g_paths{};
size_t g_path_count = 0;
std::atomic<bool> g_armed{false};

extern "C" void remove_scratch_and_stop(int signal_number) {
  // The interrupted code may read errno after the handler returns (a sanitizer delivers the
  // re-raised signal only then): unlink, rmdir and write must not change what it sees.
  const int saved_errno = errno;
  if (g_armed.exchange(false)) {
    for (size_t i = 0; i + 1 < g_path_count; ++i) ::unlink(g_paths[i].data());
    ::rmdir(g_paths[g_path_count - 1].data());
    constexpr char kMessage[] = "\ninterrupted: the benchmark's temporary files are removed\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  }
  // End by the signal itself, as the default action would have (the shell reports 130 for
  // Ctrl-C, a scheduler sees SIGTERM).
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(signal_number, &fallback, nullptr);
  ::raise(signal_number);
  errno = saved_errno;
}

void copy_path(const std::filesystem::path& path, std::array<char, kMaxPath>& into) {
  const std::string text = path.string();
  DTRAIN_CHECK(text.size() < kMaxPath, "temporary path too long: ", text);
  std::copy(text.begin(), text.end(), into.begin());
  into[text.size()] = '\0';
}

}  // namespace

ScratchDir::ScratchDir(std::string_view prefix, const std::vector<std::string>& names)
    : names_(names) {
  DTRAIN_CHECK(names.size() <= kMaxFiles, "ScratchDir: at most ", kMaxFiles, " files");
  DTRAIN_CHECK(!g_armed.load(), "ScratchDir: one at a time");
  std::string pattern =
      (std::filesystem::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
  DTRAIN_CHECK(::mkdtemp(pattern.data()) != nullptr, "cannot make a temporary folder ", pattern,
               " (", std::strerror(errno), ")");
  path_ = pattern;
  for (size_t i = 0; i < names.size(); ++i) copy_path(path_ / names[i], g_paths[i]);
  copy_path(path_, g_paths[names.size()]);
  g_path_count = names.size() + 1;
  g_armed.store(true);
  struct sigaction action {};
  action.sa_handler = remove_scratch_and_stop;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGINT);  // one handler at a time, whichever signal comes
  sigaddset(&action.sa_mask, SIGTERM);
  ::sigaction(SIGINT, &action, &old_int_);
  ::sigaction(SIGTERM, &action, &old_term_);
}

ScratchDir::~ScratchDir() {
  // Removed while the handlers still stand: a signal now removes what is left and ends the run.
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  g_armed.store(false);
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
}

std::string ScratchDir::file(std::string_view name) const {
  DTRAIN_CHECK(std::find(names_.begin(), names_.end(), name) != names_.end(), "ScratchDir: '", name,
               "' was not declared");
  return (path_ / name).string();
}

}  // namespace dtrain::bench
