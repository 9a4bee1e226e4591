// A --save directory belongs to one run: its run.json names the run, and a lock file held with
// flock(2) while the run writes keeps a second writer out (the kernel drops the lock when the
// holder dies, even by kill -9, so a stale lock never blocks anyone: its holder's text left in
// the file is reported as stale and the lock taken). A fresh run refuses a directory holding
// another run's checkpoints unless told --overwrite; a directory without one belongs to nobody.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dtrain::checkpoint {

inline constexpr std::string_view kRunFileName = "run.json";
inline constexpr std::string_view kLockFileName = ".lock";

// Who the directory's checkpoints belong to: run.json's id, or "" when the directory has
// checkpoints but no run.json (written before run records existed); nullopt when it holds no
// checkpoint (missing, empty, other files only, or the run.json of a run that never saved).
std::optional<std::string> save_directory_owner(const std::string& dir);

// Throws Error naming --save unless a run with id `run_id` may write into `dir`: the directory
// holds no run, or this run (a resume of it), or `overwrite` hands it over. `resuming` says
// whether this run continues a checkpoint (for the message's advice).
void check_save_directory(const std::string& dir, const std::string& run_id, bool resuming,
                          bool overwrite);

// Holds `dir`'s lock from construction to destruction, and records `run_id` in run.json once
// it holds it (after checking ownership again, under the lock). Throws Error naming the
// holder's pid and host when another process holds it.
class SaveDirectoryLock {
 public:
  SaveDirectoryLock(const std::string& dir, const std::string& run_id, bool resuming,
                    bool overwrite);
  ~SaveDirectoryLock();
  SaveDirectoryLock(const SaveDirectoryLock&) = delete;
  SaveDirectoryLock& operator=(const SaveDirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

// The run id recorded in a checkpoint directory's manifest ("" when it has none or cannot be
// read: such a checkpoint is never pruned as this run's).
std::string checkpoint_run_id(const std::string& checkpoint_dir);

}  // namespace dtrain::checkpoint
