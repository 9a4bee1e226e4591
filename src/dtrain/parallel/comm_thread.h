// CommThread: a rank's communication thread. It owns a communicator of its own (a subgroup of
// the data-parallel group, e.g. "dp-async", so its messages never mix with the compute
// thread's), runs the submitted tasks one at a time in submission order, and records when each
// ran. Every rank submits the same tasks in the same order, so the collectives inside match.
// The compute thread goes on with backward while a bucket is reduced, and waits for a task only
// when it needs its result. Waiting is polite: a condition variable, no spinning.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/parallel/data_parallel.h"

namespace dtrain::parallel {

class CommThread {
 public:
  using Task = std::function<void(comm::Communicator&)>;
  struct Event {
    std::string what;  // "all_reduce h.3..h.2", ...
    TimeInterval time;
  };

  explicit CommThread(std::unique_ptr<comm::Communicator> comm);
  // Stops after the running task (queued tasks are dropped) and joins.
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `task`; returns its ticket (0, 1, 2, ... in submission order).
  int64_t submit(std::string what, Task task);
  // Blocks until the task with `ticket` (and every earlier one) has run. Rethrows the first
  // failure of any task.
  void wait(int64_t ticket);
  void wait_all();
  // The tasks run since the last call, with their start and end (now_us clock).
  std::vector<Event> take_events();
  // For the traffic counters (atomic, safe to read while the thread runs).
  const comm::Communicator& communicator() const { return *comm_; }

 private:
  struct Item {
    std::string what;
    Task task;
  };
  void loop();

  std::unique_ptr<comm::Communicator> comm_;
  std::mutex mu_;
  std::condition_variable cv_;  // signals new work, finished work and stopping
  std::deque<Item> queue_;
  int64_t submitted_ = 0, finished_ = 0;
  bool stop_ = false;
  std::exception_ptr failure_;
  std::vector<Event> events_;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace dtrain::parallel
