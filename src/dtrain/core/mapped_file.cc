// MappedFile: open, fstat, mmap(PROT_READ, MAP_PRIVATE), close the descriptor (the mapping keeps
// the file), munmap in the destructor.
#include "dtrain/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dtrain/core/check.h"

namespace dtrain {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, std::string_view flag) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DTRAIN_CHECK(fd >= 0, flag, " ", path, ": cannot be opened (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    DTRAIN_CHECK(false, flag, " ", path, ": cannot be read (", std::strerror(err), ")");
  }
  if (!S_ISREG(st.st_mode) || st.st_size == 0) {
    ::close(fd);
    DTRAIN_CHECK(S_ISREG(st.st_mode), flag, " ", path, ": is not a regular file");
    DTRAIN_CHECK(false, flag, " ", path, ": file is empty");
  }
  const auto size = static_cast<size_t>(st.st_size);
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  DTRAIN_CHECK(addr != MAP_FAILED, flag, " ", path, ": cannot be mapped (", std::strerror(err),
               ")");
  return std::shared_ptr<const MappedFile>(
      new MappedFile(static_cast<const std::byte*>(addr), size, path));
}

MappedFile::~MappedFile() {
  ::munmap(const_cast<std::byte*>(data_), size_);  // NOLINT: munmap takes a non-const pointer
}

}  // namespace dtrain
