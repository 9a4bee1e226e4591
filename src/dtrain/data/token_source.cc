// TokenSource: views over int32 or uint16 tokens; copy() widens a window to int32.
#include "dtrain/data/token_source.h"

#include <algorithm>

#include "dtrain/core/check.h"

namespace dtrain::data {

TokenSource::TokenSource(std::span<const int32_t> tokens)
    : wide_(tokens.data()), size_(tokens.size()) {}

TokenSource TokenSource::owning(std::vector<int32_t> tokens) {
  auto owner = std::make_shared<const std::vector<int32_t>>(std::move(tokens));
  TokenSource source{std::span<const int32_t>(*owner)};
  source.owner_ = std::move(owner);
  return source;
}

TokenSource TokenSource::narrow(std::span<const uint16_t> tokens,
                                std::shared_ptr<const void> owner) {
  TokenSource source;
  source.narrow_ = tokens.data();
  source.size_ = tokens.size();
  source.owner_ = std::move(owner);
  return source;
}

void TokenSource::copy(int64_t start, int64_t count, int32_t* out) const {
  DTRAIN_CHECK(start >= 0 && count >= 0 && static_cast<size_t>(start + count) <= size_,
               "TokenSource::copy: tokens [", start, ", ", start + count, ") are outside the ",
               size_, " tokens");
  if (wide_ != nullptr) {
    std::copy_n(wide_ + start, count, out);
  } else {
    std::copy_n(narrow_ + start, count, out);  // each uint16 widened to int32
  }
}

TokenSource TokenSource::slice(int64_t begin, int64_t end) const {
  DTRAIN_CHECK(0 <= begin && begin <= end && static_cast<size_t>(end) <= size_,
               "TokenSource::slice: [", begin, ", ", end, ") is outside the ", size_, " tokens");
  TokenSource s = *this;
  if (wide_ != nullptr) s.wide_ = wide_ + begin;
  if (narrow_ != nullptr) s.narrow_ = narrow_ + begin;
  s.size_ = static_cast<size_t>(end - begin);
  return s;
}

std::span<const std::byte> TokenSource::bytes() const {
  if (wide_ != nullptr) return std::as_bytes(std::span<const int32_t>(wide_, size_));
  if (narrow_ != nullptr) return std::as_bytes(std::span<const uint16_t>(narrow_, size_));
  return {};
}

}  // namespace dtrain::data
