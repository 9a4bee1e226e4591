// A graceful stop (Ctrl-C, SIGTERM, SIGUSR1): the signal handler only records the signal; the
// ranks then agree on one step to stop after, so that every rank ends on the same step boundary
// (a rank that stopped alone would leave its peers waiting in a collective). Before the first
// step there is nothing to save, so a signal then ends the process at once (started() is false).
#pragma once

#include <atomic>
#include <cstdint>

namespace dtrain::train {

class StopRequest {
 public:
  // Async-signal-safe: two lock-free atomic operations. Returns false when a stop was already
  // requested (the caller's cue to quit at once on a second Ctrl-C).
  bool request(int signal_number) {
    int expected = 0;
    return signal_.compare_exchange_strong(expected, signal_number);
  }
  int signal_number() const { return signal_.load(); }

  // The run's loop has begun: from now on a signal asks for a stop at a step boundary (with a
  // final checkpoint) instead of ending the start-up at once.
  void mark_started() { started_.store(true); }
  bool started() const { return started_.load(); }

  // Ranks that share this object (the threads backend) call it at each step boundary with the
  // updates done. The first rank to see the request fixes the stop at the next boundary: every
  // step ends in a collective over all ranks, so no rank can be past `steps_done + 1` while this
  // one is at `steps_done`. Ranks in separate processes (MPI), each with its own StopRequest,
  // agree instead through an all-reduce of signal_number() (Trainer::agree_on_stop).
  bool should_stop(int64_t steps_done) {
    if (signal_.load() == 0) return false;
    int64_t expected = -1;
    stop_after_.compare_exchange_strong(expected, steps_done + 1);
    return steps_done >= stop_after_.load();
  }

 private:
  std::atomic<int> signal_{0};
  std::atomic<bool> started_{false};
  std::atomic<int64_t> stop_after_{-1};
  static_assert(std::atomic<int>::is_always_lock_free &&
                std::atomic<int64_t>::is_always_lock_free &&
                std::atomic<bool>::is_always_lock_free);
};

}  // namespace dtrain::train
