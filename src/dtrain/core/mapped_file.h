// A file mapped read-only into memory (mmap): its bytes are paged in on first touch and stay in
// the page cache, so a token file of many GB is never copied into the process.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace dtrain {

class MappedFile {
 public:
  // Maps all of `path`. Throws Error "FLAG PATH: <reason>" when it cannot be opened or mapped,
  // or is empty (a zero-length mapping does not exist).
  static std::shared_ptr<const MappedFile> open(const std::string& path, std::string_view flag);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(const std::byte* data, size_t size, std::string path)
      : data_(data), size_(size), path_(std::move(path)) {}
  const std::byte* data_;
  size_t size_;
  std::string path_;
};

}  // namespace dtrain
