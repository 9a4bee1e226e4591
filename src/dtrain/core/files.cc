// The file checks: each tries what the run will do later (open, create) so that the answer is
// the file system's own, whatever the permissions, mounts or user.
#include "dtrain/core/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "dtrain/core/check.h"

namespace dtrain {
namespace fs = std::filesystem;

void check_input_file(const std::string& path, std::string_view flag) {
  DTRAIN_CHECK(!path.empty(), flag, " is empty: give a file name");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  DTRAIN_CHECK(fs::exists(st), flag, " ", path, ": no such file");
  DTRAIN_CHECK(!fs::is_directory(st), flag, " ", path, ": is a directory, not a file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DTRAIN_CHECK(fd >= 0, flag, " ", path, ": cannot be read (", std::strerror(errno), ")");
  ::close(fd);
}

void check_output_file(const std::string& path, std::string_view flag) {
  DTRAIN_CHECK(!path.empty(), flag, " is empty: give a file name");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  DTRAIN_CHECK(!fs::is_directory(st), flag, " ", path, ": is a directory, not a file");
  if (fs::exists(st)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    DTRAIN_CHECK(fd >= 0, flag, " ", path, ": cannot be written (", std::strerror(errno), ")");
    ::close(fd);
    return;
  }
  const fs::path parent = fs::path(path).parent_path();
  DTRAIN_CHECK(parent.empty() || fs::is_directory(parent, ec), flag, " ", path, ": no directory ",
               parent.string());
  // Probe with a file of a unique name beside it, not the file itself: the ranks of an MPI job
  // all check the same path at once, and an exclusive create of that one name fails for all
  // but the first.
  std::string probe = ((parent.empty() ? fs::path(".") : parent) / ".dtrain-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  DTRAIN_CHECK(fd >= 0, flag, " ", path, ": cannot be created (", std::strerror(errno), ")");
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_output_directory(const std::string& path, std::string_view flag) {
  DTRAIN_CHECK(!path.empty(), flag, " is empty: give a directory");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  DTRAIN_CHECK(!fs::exists(st) || fs::is_directory(st), flag, " ", path,
               ": exists and is not a directory");
  if (!fs::exists(st)) {
    fs::create_directories(path, ec);
    DTRAIN_CHECK(!ec && fs::is_directory(path), flag, " ", path, ": cannot create the directory (",
                 ec ? ec.message() : std::string("not a directory afterwards"), ")");
  }
  std::string probe = (fs::path(path) / ".dtrain-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  DTRAIN_CHECK(fd >= 0, flag, " ", path, ": cannot create files in it (", std::strerror(errno),
               ")");
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace dtrain
