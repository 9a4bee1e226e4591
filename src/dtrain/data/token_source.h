// The tokens a sampler reads windows from: int32 tokens in memory (the byte tokenizer's) or
// uint16 tokens in a read-only mapping of a token file (data/token_file.h). A TokenSource is a
// cheap view that shares ownership of its storage, so the train/validation split is two slices
// of one mapping and nothing is copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace dtrain::data {

class TokenSource {
 public:
  TokenSource() = default;
  // A view of `tokens`: the caller keeps them alive for as long as the source is used.
  TokenSource(std::span<const int32_t> tokens);  // NOLINT: implicit, a span is a source
  // Owns `tokens`.
  static TokenSource owning(std::vector<int32_t> tokens);
  // A view of uint16 tokens that `owner` (a MappedFile, say) keeps alive.
  static TokenSource narrow(std::span<const uint16_t> tokens, std::shared_ptr<const void> owner);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int32_t operator[](size_t i) const { return wide_ != nullptr ? wide_[i] : narrow_[i]; }
  // Tokens [start, start + count) as int32 into out[0 .. count); the range must be inside.
  void copy(int64_t start, int64_t count, int32_t* out) const;
  // Tokens [begin, end), sharing this source's storage.
  TokenSource slice(int64_t begin, int64_t end) const;
  // The stored representation (4 bytes a token in memory, 2 in a token file): what a checksum
  // of the data covers.
  std::span<const std::byte> bytes() const;
  int bytes_per_token() const { return wide_ != nullptr ? 4 : 2; }

 private:
  std::shared_ptr<const void> owner_;
  const int32_t* wide_ = nullptr;  // exactly one of wide_ / narrow_ is set (or neither: empty)
  const uint16_t* narrow_ = nullptr;
  size_t size_ = 0;
};

}  // namespace dtrain::data
