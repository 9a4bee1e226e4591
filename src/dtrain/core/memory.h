// Per-rank memory accounting: every buffer the engine allocates carries a tag (params, grads,
// optimizer, activations, communication), and the tracker keeps current and peak bytes per tag.
// These measured figures are what the tests compare with the planner's memory formulas.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dtrain {

enum class MemoryTag { params, grads, optimizer, activations, communication };
inline constexpr int kMemoryTagCount = 5;
std::string_view memory_tag_name(MemoryTag tag);

// Thread-safe: a rank's compute thread and its communication thread may both allocate.
class MemoryTracker {
 public:
  void allocate(MemoryTag tag, int64_t bytes);
  void release(MemoryTag tag, int64_t bytes);

  int64_t current_bytes(MemoryTag tag) const;
  int64_t peak_bytes(MemoryTag tag) const;
  int64_t current_total_bytes() const;
  int64_t peak_total_bytes() const;  // peak of the sum, not the sum of peaks
  // Starts a new peak window (e.g. per step) at the current values.
  void reset_peaks();

 private:
  struct Counter {
    std::atomic<int64_t> current{0};
    std::atomic<int64_t> peak{0};
  };
  static void raise_peak(std::atomic<int64_t>& peak, int64_t value);
  std::array<Counter, kMemoryTagCount> counters_;
  Counter total_;
};

}  // namespace dtrain
