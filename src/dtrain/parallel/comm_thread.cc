// CommThread: a queue of tasks, one worker thread, completion counted in submission order.
#include "dtrain/parallel/comm_thread.h"

#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"

namespace dtrain::parallel {

CommThread::CommThread(std::unique_ptr<comm::Communicator> comm)
    : comm_(std::move(comm)), thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int64_t CommThread::submit(std::string what, Task task) {
  int64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = submitted_++;
    queue_.push_back({std::move(what), std::move(task)});
  }
  cv_.notify_all();
  return ticket;
}

void CommThread::wait(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return finished_ > ticket || failure_ != nullptr; });
  if (failure_ != nullptr) std::rethrow_exception(failure_);
}

void CommThread::wait_all() {
  int64_t last = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = submitted_ - 1;
  }
  if (last >= 0) wait(last);
}

std::vector<CommThread::Event> CommThread::take_events() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Event> out;
  out.swap(events_);
  return out;
}

void CommThread::loop() {
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_ || failure_ != nullptr) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    Event event{std::move(item.what), {now_us(), 0}};
    std::exception_ptr error;
    try {
      item.task(*comm_);
    } catch (...) {
      error = std::current_exception();
    }
    item.task = nullptr;  // release what the task owned (a freed gradient bucket) right away
    event.time.end_us = now_us();
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(event));
      if (error != nullptr) {
        failure_ = error;
      } else {
        ++finished_;
      }
    }
    cv_.notify_all();
    if (error != nullptr) return;
  }
}

}  // namespace dtrain::parallel
