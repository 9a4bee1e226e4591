// ThreadTeam: a fixed team of threads that splits one op across cores (intra-op parallelism).
// OpenBLAS's own threads barely speed up the model's GEMMs (their shapes are below its
// splitting thresholds), so with a team each member runs single-threaded sgemm on its pieces of C.
// Work is split into fixed contiguous ranges, so results do not depend on timing.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dtrain::model {

struct Range {
  int64_t begin = 0;
  int64_t end = 0;
};

// Member k's share of [0, n) when `members` split it into contiguous ranges whose boundaries
// are multiples of `align` (except n itself).
Range split_range(int64_t n, int member, int members, int64_t align = 1);

inline constexpr int kMaxTeamSize = 64;

class ThreadTeam {
 public:
  // Starts threads - 1 workers (1 <= threads <= kMaxTeamSize); the thread that calls run()
  // is member 0.
  explicit ThreadTeam(int threads);
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return size_; }
  // Runs fn(member) for every member 0..size()-1 and returns when all have finished. The
  // first exception thrown by any member is rethrown here. Not reentrant: fn must not call
  // run() on the same team.
  void run(const std::function<void(int member)>& fn);

 private:
  void worker(int member);

  int size_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped once per run(); workers wait for a change
  std::atomic<int> finished_{0};         // workers done with the current generation
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// Runs fn(range) over [0, n) split across the team (or as one range without a team).
inline void parallel_ranges(ThreadTeam* team, int64_t n, int64_t align,
                            const std::function<void(Range)>& fn) {
  if (team == nullptr || team->size() == 1 || n < 2 * align) {
    fn({0, n});
    return;
  }
  team->run([&](int member) {
    const Range r = split_range(n, member, team->size(), align);
    if (r.end > r.begin) fn(r);
  });
}

}  // namespace dtrain::model
