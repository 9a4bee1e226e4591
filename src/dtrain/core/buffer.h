// Buffer<T>: an owned, 64-byte aligned, zero-initialised array whose bytes are charged to a
// MemoryTracker under one tag for as long as it holds them. Move-only; release() frees early
// (ZeRO-3 frees gathered parameters after use).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <utility>

#include "dtrain/core/memory.h"

namespace dtrain {

template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(int64_t count, MemoryTag tag, MemoryTracker* tracker) : tag_(tag), tracker_(tracker) {
    resize(count);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept { swap(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      release();
      swap(other);
    }
    return *this;
  }
  ~Buffer() { release(); }

  // Reallocates to `count` zeroed elements (contents are not kept).
  void resize(int64_t count) {
    release();
    if (count <= 0) return;
    const size_t bytes = (static_cast<size_t>(count) * sizeof(T) + 63) / 64 * 64;
    data_ = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_), 0, bytes);
    count_ = count;
    if (tracker_ != nullptr) tracker_->allocate(tag_, bytes_used());
  }
  void release() {
    if (data_ == nullptr) return;
    if (tracker_ != nullptr) tracker_->release(tag_, bytes_used());
    std::free(data_);
    data_ = nullptr;
    count_ = 0;
  }
  void zero() {
    if (data_ != nullptr) std::memset(static_cast<void*>(data_), 0, bytes_used());
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return count_; }
  int64_t bytes_used() const { return count_ * static_cast<int64_t>(sizeof(T)); }
  bool empty() const { return count_ == 0; }
  T& operator[](int64_t i) { return data_[i]; }
  const T& operator[](int64_t i) const { return data_[i]; }
  std::span<T> span() { return {data_, static_cast<size_t>(count_)}; }
  std::span<const T> span() const { return {data_, static_cast<size_t>(count_)}; }
  MemoryTag tag() const { return tag_; }

 private:
  void swap(Buffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    std::swap(tag_, other.tag_);
    std::swap(tracker_, other.tracker_);
  }
  T* data_ = nullptr;
  int64_t count_ = 0;
  MemoryTag tag_ = MemoryTag::activations;
  MemoryTracker* tracker_ = nullptr;
};

}  // namespace dtrain
