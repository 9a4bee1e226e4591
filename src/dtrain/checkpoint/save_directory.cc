// The --save directory's owner (run.json), its lock (.lock with flock), and the run id of a
// checkpoint (its manifest's "run" field).
#include "dtrain/checkpoint/save_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dtrain/core/check.h"
#include "dtrain/core/version.h"

namespace dtrain::checkpoint {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::optional<json> read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

bool has_checkpoints(const fs::path& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n == "latest" || (n.starts_with("step-") && e.is_directory())) return true;
  }
  return false;
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

void write_run_file(const fs::path& dir, const std::string& run_id) {
  const json record = {{"format", "dtrain-run"},
                       {"id", run_id},
                       {"started", now_text()},
                       {"host", host_name()},
                       {"version", str(version(), " (", git_commit(), ")")}};
  const fs::path tmp = dir / (std::string(kRunFileName) + ".tmp");
  {
    std::ofstream out(tmp);
    out << record.dump(1) << "\n";
    out.close();  // the bytes reach the file here: a full disk shows now, before the rename
    DTRAIN_CHECK(!out.fail(), "--save ", dir.string(), ": cannot write ", tmp.string(), " (",
                 std::strerror(errno), ")");
  }
  fs::rename(tmp, dir / kRunFileName);
}

}  // namespace

std::optional<std::string> save_directory_owner(const std::string& dir) {
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return std::nullopt;
  // A run.json without a checkpoint is a run that ended (or was killed) before its first save:
  // there is nothing of it to protect, so the directory belongs to nobody.
  if (!has_checkpoints(root)) return std::nullopt;
  if (fs::exists(root / kRunFileName)) {
    const std::optional<json> j = read_json(root / kRunFileName);
    if (j && j->contains("id") && (*j)["id"].is_string()) return (*j)["id"].get<std::string>();
    return std::string("(unreadable run.json)");
  }
  return std::string();
}

void check_save_directory(const std::string& dir, const std::string& run_id, bool resuming,
                          bool overwrite) {
  const std::optional<std::string> owner = save_directory_owner(dir);
  if (!owner || *owner == run_id || overwrite) return;
  const std::string whose = owner->empty()
                                ? std::string("checkpoints of an earlier run (no run.json)")
                                : str("the checkpoints of another run (run ", *owner, ")");
  throw Error(str("--save ", dir, " holds ", whose, "; ",
                  resuming ? "this run resumes a different one. "
                           : "continue that run with --resume " + dir + ", or ",
                  "pass --overwrite to replace them, or choose another --save directory"));
}

SaveDirectoryLock::SaveDirectoryLock(const std::string& dir, const std::string& run_id,
                                     bool resuming, bool overwrite) {
  std::error_code ec;
  fs::create_directories(dir, ec);  // resolve() made it already; library callers may not have
  const fs::path path = fs::path(dir) / kLockFileName;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  DTRAIN_CHECK(fd_ >= 0, "--save ", dir, ": cannot open ", path.string(), " (",
               std::strerror(errno), ")");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[256] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "another process";
    while (!who.empty() && who.back() == '\n') who.pop_back();
    DTRAIN_CHECK(err != EWOULDBLOCK, "--save ", dir, " is in use by another dtrain run (", who,
                 "); wait for it to finish or choose another --save directory");
    throw Error(
        str("--save ", dir, ": cannot lock ", path.string(), " (", std::strerror(err), ")"));
  }
  // A holder's text left in the file means its process ended without releasing the lock (killed,
  // kill -9 included): the kernel dropped the flock, so the lock is ours; say whose it was.
  {
    char previous[256] = {};
    const ssize_t n = ::pread(fd_, previous, sizeof previous - 1, 0);
    std::string who = n > 0 ? std::string(previous, static_cast<size_t>(n)) : "";
    while (!who.empty() && who.back() == '\n') who.pop_back();
    if (!who.empty()) {
      std::fprintf(stderr,
                   "note: --save %s: the lock left by %s is stale (that process has ended); "
                   "taking it\n",
                   dir.c_str(), who.c_str());
    }
  }
  try {
    // Checked again under the lock: a run that finished between resolve() and now may have
    // claimed the directory.
    check_save_directory(dir, run_id, resuming, overwrite);
    const std::string holder = str("pid ", ::getpid(), " on ", host_name(), " since ", now_text());
    if (::ftruncate(fd_, 0) == 0) {
      [[maybe_unused]] const ssize_t w = ::pwrite(fd_, holder.data(), holder.size(), 0);
    }
    if (save_directory_owner(dir) != run_id) write_run_file(dir, run_id);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SaveDirectoryLock::~SaveDirectoryLock() {
  if (fd_ < 0) return;
  // The holder's text goes, the file stays: removing it would race with a process that has
  // opened it and is about to lock it.
  [[maybe_unused]] const int truncated = ::ftruncate(fd_, 0);
  ::close(fd_);
}

std::string checkpoint_run_id(const std::string& checkpoint_dir) {
  const std::optional<json> j = read_json(fs::path(checkpoint_dir) / "manifest.json");
  if (!j || !j->contains("run") || !(*j)["run"].is_object()) return "";
  const json& run = (*j)["run"];
  return run.contains("id") && run["id"].is_string() ? run["id"].get<std::string>() : "";
}

}  // namespace dtrain::checkpoint
