// MemoryTracker: lock-free counters; the peak is raised with a compare-exchange loop.
#include "dtrain/core/memory.h"

#include "dtrain/core/check.h"

namespace dtrain {

std::string_view memory_tag_name(MemoryTag tag) {
  switch (tag) {
    case MemoryTag::params:
      return "params";
    case MemoryTag::grads:
      return "grads";
    case MemoryTag::optimizer:
      return "optimizer";
    case MemoryTag::activations:
      return "activations";
    case MemoryTag::communication:
      return "communication";
  }
  return "unknown";
}

void MemoryTracker::raise_peak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

void MemoryTracker::allocate(MemoryTag tag, int64_t bytes) {
  Counter& c = counters_[static_cast<int>(tag)];
  raise_peak(c.peak, c.current.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  raise_peak(total_.peak, total_.current.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void MemoryTracker::release(MemoryTag tag, int64_t bytes) {
  Counter& c = counters_[static_cast<int>(tag)];
  int64_t before = c.current.fetch_sub(bytes, std::memory_order_relaxed);
  total_.current.fetch_sub(bytes, std::memory_order_relaxed);
  DTRAIN_CHECK(before >= bytes, "memory accounting: released ", bytes, " bytes of ",
               memory_tag_name(tag), " but only ", before, " were allocated");
}

int64_t MemoryTracker::current_bytes(MemoryTag tag) const {
  return counters_[static_cast<int>(tag)].current.load(std::memory_order_relaxed);
}
int64_t MemoryTracker::peak_bytes(MemoryTag tag) const {
  return counters_[static_cast<int>(tag)].peak.load(std::memory_order_relaxed);
}
int64_t MemoryTracker::current_total_bytes() const {
  return total_.current.load(std::memory_order_relaxed);
}
int64_t MemoryTracker::peak_total_bytes() const {
  return total_.peak.load(std::memory_order_relaxed);
}

void MemoryTracker::reset_peaks() {
  for (Counter& c : counters_) c.peak.store(c.current.load());
  total_.peak.store(total_.current.load());
}

}  // namespace dtrain
