// Threads backend. Matching follows MPI's rules within one group: a message matches the first
// posted receive with the same (source, tag), in posting order. Each destination rank has a
// mailbox of unmatched sends and unmatched receives; whichever side arrives second copies the
// bytes and completes both requests. Waiting spins briefly (a wake-up through the kernel costs
// tens of microseconds on a VM), then blocks on a per-rank condition variable.
#include "dtrain/comm/threads/backend.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "dtrain/core/buffer.h"
#include "dtrain/core/check.h"
#include "dtrain/core/cpu_relax.h"
#include "dtrain/core/timer.h"

namespace dtrain::comm::threads {
namespace {

enum class State { pending, done, failed };

struct Envelope {
  uint64_t context = 0;
  int src = 0;  // world ranks
  int dst = 0;
  int tag = 0;
  const void* send_data = nullptr;
  void* recv_data = nullptr;
  int64_t bytes = 0;
  bool is_send = false;
  std::atomic<State> state{State::pending};
  std::string error;  // set before state becomes failed
};

class World {
 public:
  World(int size, WorldOptions options)
      : size_(size), options_(options), mailboxes_(size), waiters_(size), exited_(size) {
    for (auto& e : exited_) e.store(false);
    spin_iterations_ = size <= static_cast<int>(std::thread::hardware_concurrency()) ? 20000 : 50;
  }

  int size() const { return size_; }
  double timeout_s() const { return options_.timeout_s; }

  // Posts a send or receive; completes it at once when its partner is already waiting.
  void post(Envelope* e) {
    Mailbox& box = mailboxes_[e->dst];
    Envelope* partner = nullptr;
    {
      std::lock_guard<std::mutex> lock(box.mu);
      auto& others = e->is_send ? box.recvs : box.sends;
      auto it = std::find_if(others.begin(), others.end(), [&](const Envelope* o) {
        return o->context == e->context && o->src == e->src && o->tag == e->tag;
      });
      if (it != others.end()) {
        partner = *it;
        others.erase(it);
      } else {
        (e->is_send ? box.sends : box.recvs).push_back(e);
      }
    }
    if (partner != nullptr) complete(e->is_send ? e : partner, e->is_send ? partner : e);
  }

  // Takes a pending envelope back out of its mailbox and marks it failed. False if a partner
  // already matched it (then a copy is in flight and the envelope completes momentarily).
  bool cancel(Envelope* e) {
    Mailbox& box = mailboxes_[e->dst];
    std::lock_guard<std::mutex> lock(box.mu);
    auto& list = e->is_send ? box.sends : box.recvs;
    auto it = std::find(list.begin(), list.end(), e);
    if (it == list.end()) return false;
    list.erase(it);
    e->error = "cancelled";
    e->state.store(State::failed, std::memory_order_release);
    return true;
  }

  void wait(Envelope* e, const std::string& what) {
    const int me = e->is_send ? e->src : e->dst;
    const int peer = e->is_send ? e->dst : e->src;
    // The deadline counts the spin too: on a loaded machine (or under a sanitizer) its yields
    // alone can outlast a short timeout.
    const double deadline_us = now_us() + options_.timeout_s * 1e6;
    for (int i = 0; i < spin_iterations_; ++i) {
      if (e->state.load(std::memory_order_acquire) != State::pending) return finish(e);
      if ((i & 63) == 63) std::this_thread::yield();
    }
    Waiter& w = waiters_[me];
    std::unique_lock<std::mutex> lock(w.mu);
    while (true) {
      if (e->state.load(std::memory_order_acquire) != State::pending) break;
      if (aborted_.load()) {
        lock.unlock();
        fail_pending(e, str(failure_message(), "; ", what));
      }
      if (exited_[peer].load()) {
        lock.unlock();
        fail_pending(e, str("rank ", peer, " finished its work while ", what,
                            " was still pending (it exited early, or the ranks disagree on the ",
                            "sequence of operations)"));
      }
      const double left_us = deadline_us - now_us();
      if (left_us <= 0) {
        lock.unlock();
        fail_pending(e, str("timed out after ", options_.timeout_s, " s: ", what,
                            " never completed (is rank ", peer, " stuck or dead?)"));
      }
      w.cv.wait_for(lock,
                    std::chrono::microseconds(static_cast<int64_t>(std::min(left_us, 100000.0))));
    }
    lock.unlock();
    finish(e);
  }

  // Called when a request is destroyed unfinished: take it back, or wait out a copy in flight.
  void abandon(Envelope* e) {
    if (e->state.load(std::memory_order_acquire) != State::pending) return;
    if (cancel(e)) return;
    while (e->state.load(std::memory_order_acquire) == State::pending) std::this_thread::yield();
  }

  void abort(int rank, const std::string& reason) {
    {
      std::lock_guard<std::mutex> lock(failure_mu_);
      if (aborted_.load()) return;
      failure_ = str("rank ", rank, " failed: ", reason);
      aborted_.store(true);
    }
    wake_all();
  }

  void mark_exited(int rank) {
    exited_[rank].store(true);
    wake_all();
  }

  bool aborted() const { return aborted_.load(); }
  bool exited(int rank) const { return exited_[rank].load(); }
  std::string failure_message() {
    std::lock_guard<std::mutex> lock(failure_mu_);
    return failure_;
  }
  int spin_iterations() const { return spin_iterations_; }

  // The state a group's members share for the direct algorithm, one per group context (made by
  // the first member that asks, kept while the world lives).
  struct SharedGroupState {
    static constexpr int64_t kSmallSlotBytes = 64 << 10;
    struct alignas(64) Flag {
      std::atomic<uint64_t> value{0};     // the latest exchange this rank posted
      std::atomic<uint64_t> barriers{0};  // barriers this rank has arrived at (for errors)
    };
    explicit SharedGroupState(int n)
        : inputs(static_cast<size_t>(n)), outputs(inputs.size()), flags(inputs.size()) {}
    // Written by their owner before it arrives at a barrier, read by the others after it.
    std::vector<const void*> inputs;
    std::vector<void*> outputs;
    std::vector<Flag> flags;  // the latency path's exchange numbers, by rank
    // The barrier: generation in the high 32 bits, a "broken" bit, the arrivals so far below it.
    alignas(64) std::atomic<uint64_t> barrier{0};
    alignas(64) std::atomic<int> sleepers{0};
    std::mutex mu;
    std::condition_variable cv;
    std::once_flag small_once;
    Buffer<std::byte> small;  // 2 small slots per rank, allocated on first use
  };
  SharedGroupState& shared_group(uint64_t context, int members) {
    std::lock_guard<std::mutex> lock(groups_mu_);
    auto& slot = groups_[context];
    if (!slot) slot = std::make_unique<SharedGroupState>(members);
    DTRAIN_CHECK(static_cast<int>(slot->inputs.size()) == members,
                 "two groups of different sizes share the context of one");
    return *slot;
  }

 private:
  struct Mailbox {
    std::mutex mu;
    std::list<Envelope*> sends;  // unmatched sends to this rank
    std::list<Envelope*> recvs;  // unmatched receives posted by this rank
  };
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
  };

  void complete(Envelope* send, Envelope* recv) {
    // Once an envelope's state leaves pending its owner may return and free it: read what the
    // notifications need first.
    const int send_rank = send->src, recv_rank = recv->dst;
    if (send->bytes != recv->bytes) {
      const std::string msg =
          str("message size mismatch: rank ", send->src, " sends ", send->bytes, " bytes to rank ",
              recv->dst, " (tag ", send->tag, ") which expects ", recv->bytes);
      send->error = msg;
      recv->error = msg;
      send->state.store(State::failed, std::memory_order_release);
      recv->state.store(State::failed, std::memory_order_release);
    } else {
      if (send->bytes > 0) std::memcpy(recv->recv_data, send->send_data, send->bytes);
      send->state.store(State::done, std::memory_order_release);
      recv->state.store(State::done, std::memory_order_release);
    }
    notify(send_rank);
    notify(recv_rank);
  }

  void notify(int rank) {
    { std::lock_guard<std::mutex> lock(waiters_[rank].mu); }
    waiters_[rank].cv.notify_all();
  }

  void wake_all() {
    for (int r = 0; r < size_; ++r) notify(r);
  }

  [[noreturn]] void fail_pending(Envelope* e, const std::string& message) {
    abandon(e);
    throw CommError(message);
  }

  void finish(Envelope* e) {
    if (e->state.load(std::memory_order_acquire) == State::failed) throw CommError(e->error);
  }

  int size_;
  WorldOptions options_;
  int spin_iterations_ = 0;
  std::vector<Mailbox> mailboxes_;
  std::vector<Waiter> waiters_;
  std::vector<std::atomic<bool>> exited_;
  std::atomic<bool> aborted_{false};
  std::mutex failure_mu_;
  std::string failure_;
  std::mutex groups_mu_;
  std::map<uint64_t, std::unique_ptr<SharedGroupState>> groups_;
};

// The direct algorithm's view of a group of threads: buffers are published as pointers, and
// the barrier is a sense-counting one on the group's shared state: spin (a hand-off between
// running threads takes well under a microsecond), then sleep on the state's condition
// variable, checking for failed or departed members and the deadline as the message path does.
class ThreadSharedMemory : public SharedMemoryGroup {
 public:
  ThreadSharedMemory(World& world, World::SharedGroupState& state, const std::vector<int>& members,
                     int rank, std::function<std::string()> operation)
      : world_(world),
        state_(state),
        members_(members),
        rank_(rank),
        operation_(std::move(operation)) {}

  void barrier() override { arrive(false); }
  void closing_barrier() override { arrive(true); }

  int64_t small_slot_bytes() const override { return World::SharedGroupState::kSmallSlotBytes; }
  std::byte* small_slot(int rank, int parity) override {
    World::SharedGroupState& s = state_;
    const int64_t bytes = World::SharedGroupState::kSmallSlotBytes;
    std::call_once(s.small_once, [&] {
      s.small = Buffer<std::byte>(2 * bytes * static_cast<int64_t>(s.flags.size()),
                                  MemoryTag::communication, nullptr);
    });
    return s.small.data() + (2 * rank + parity) * bytes;
  }
  static constexpr uint64_t kBroken = uint64_t{1} << 31;
  static constexpr uint64_t kArrivals = kBroken - 1;

  // A generation counting barrier in one word, so that giving up on it (setting the broken bit
  // while the generation is still the one waited for) and completing it exclude each other.
  void arrive(bool closing) {
    World::SharedGroupState& s = state_;
    const uint64_t n = members_.size();
    s.flags[rank_].barriers.fetch_add(1, std::memory_order_relaxed);
    const uint64_t before = s.barrier.fetch_add(1, std::memory_order_acq_rel);
    const uint64_t gen = before >> 32;
    if ((before & kBroken) != 0) {
      throw CommError(str("rank ", members_[rank_], ": the shared-memory barrier in ", operation_(),
                          " was given up by a member that failed or timed out", failure_suffix()));
    }
    if ((before & kArrivals) + 1 == n) {
      s.barrier.store((gen + 1) << 32, std::memory_order_release);
      wake_sleepers();
      return;
    }
    const uint64_t mine = s.flags[rank_].barriers.load(std::memory_order_relaxed);
    wait_until([&] { return (s.barrier.load(std::memory_order_seq_cst) >> 32) != gen; },
               "a shared-memory barrier",
               [&](int q) { return s.flags[q].barriers.load(std::memory_order_relaxed) < mine; },
               [&] {
                 // Break generation `gen` unless it completed meanwhile.
                 uint64_t w = s.barrier.load(std::memory_order_seq_cst);
                 while ((w >> 32) == gen && (w & kArrivals) < n) {
                   if (s.barrier.compare_exchange_weak(w, w | kBroken, std::memory_order_seq_cst)) {
                     if (closing) await_writers(mine);
                     return true;
                   }
                 }
                 return false;
               });
  }

  // Closing a call this rank gave up on: the peers that passed the opening barrier may still be
  // writing into this rank's buffers until they arrive here (or leave): wait for that, at most
  // one more timeout.
  void await_writers(uint64_t mine) {
    World::SharedGroupState& s = state_;
    const double deadline_us = now_us() + world_.timeout_s() * 1e6;
    for (int q = 0; q < static_cast<int>(members_.size()); ++q) {
      while (q != rank_ && s.flags[q].barriers.load(std::memory_order_acquire) < mine &&
             !world_.exited(members_[q]) && now_us() < deadline_us) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }

  std::string failure_suffix() {
    return world_.aborted() ? str(" (", world_.failure_message(), ")") : std::string();
  }

  void post(uint64_t exchange) override {
    state_.flags[rank_].value.store(exchange, std::memory_order_release);
    wake_sleepers();
  }
  void wait_posted(uint64_t exchange) override {
    World::SharedGroupState& s = state_;
    wait_until(
        [&] {
          for (const auto& f : s.flags) {
            if (f.value.load(std::memory_order_seq_cst) < exchange) return false;
          }
          return true;
        },
        "a shared-memory exchange",
        [&](int q) { return s.flags[q].value.load(std::memory_order_relaxed) < exchange; },
        // Peers read this rank's small slot, which the world owns: leaving is always safe.
        [] { return true; });
  }

  bool shares_address_space() const override { return true; }
  void publish(const void* input, void* output) override {
    state_.inputs[rank_] = input;
    state_.outputs[rank_] = output;
  }
  const void* input_of(int rank) const override { return state_.inputs[rank]; }
  void* output_of(int rank) const override { return state_.outputs[rank]; }
  int64_t slot_bytes() const override { return 0; }
  std::byte* slot(int /*rank*/) const override { return nullptr; }

 private:
  void wake_sleepers() {
    World::SharedGroupState& s = state_;
    if (s.sleepers.load(std::memory_order_relaxed) > 0) {
      { std::lock_guard<std::mutex> lock(s.mu); }
      s.cv.notify_all();
    }
  }

  // Spins while the ranks are likely running (a hand-off between running threads takes well
  // under a microsecond), then sleeps on the state's condition variable, checking for failed
  // or departed members and the deadline as the message path does.
  static constexpr double kSpinUs = 20, kYieldUs = 5000;

  // `missing(q)`: whether member q has not arrived yet (named when the wait times out).
  // `give_up()`: called before failing; false when the wait completed after all (go on).
  template <typename Done, typename Missing, typename GiveUp>
  void wait_until(Done done, const char* what, Missing missing, GiveUp give_up) {
    // Spin with a pause, not a yield, between looks while the ranks fit the cores:
    // sched_yield is a system call (about a microsecond on a VM), as long as the whole hand-off
    // it waits for. The spin is bounded in time, not in looks (a pause takes 10 to 140 cycles
    // by CPU): when another process takes a core the peer may be the one waiting for it, and
    // spinning on would only keep it off. Then yields, then naps.
    const double spin_start_us = now_us();
    if (world_.spin_iterations() > 64) {
      for (int i = 0;; ++i) {
        if (done()) return;
        cpu_relax();
        if ((i & 255) == 255 && now_us() - spin_start_us > kSpinUs) break;
      }
    }
    while (now_us() - spin_start_us < kYieldUs) {
      if (done()) return;
      std::this_thread::yield();
    }
    World::SharedGroupState& s = state_;
    const double deadline_us = now_us() + world_.timeout_s() * 1e6;
    s.sleepers.fetch_add(1, std::memory_order_seq_cst);
    struct Leave {
      std::atomic<int>& sleepers;
      ~Leave() { sleepers.fetch_sub(1, std::memory_order_seq_cst); }
    } leave{s.sleepers};
    std::unique_lock<std::mutex> lock(s.mu);
    int sleep_us = 50;
    while (!done()) {
      if (const std::string error = failure(what); !error.empty()) {
        if (done()) break;  // a member that left after releasing this wait is no failure
        lock.unlock();
        if (!give_up()) return;
        throw CommError(error);
      }
      if (now_us() > deadline_us) {
        lock.unlock();
        if (!give_up()) return;
        std::string absent;
        for (int q = 0; q < static_cast<int>(members_.size()); ++q) {
          if (q != rank_ && missing(q)) absent += str(absent.empty() ? "" : ", ", members_[q]);
        }
        throw CommError(str("timed out after ", world_.timeout_s(), " s: rank ", members_[rank_],
                            ": waited at ", what, " in ", operation_(), "; nothing came from rank ",
                            absent.empty() ? "?" : absent, " (stuck or dead?)"));
      }
      // post() and the barrier's release store their number without a full fence (a locked
      // store costs about as much as the whole hand-off), so a wake-up can be missed in the
      // instant between a waiter's last look and its sleep: the sleep is bounded, from 50 us
      // growing to 1 ms, so a missed one costs little.
      s.cv.wait_for(lock, std::chrono::microseconds(sleep_us));
      sleep_us = std::min(sleep_us * 2, 1000);
    }
  }

  // Why waiting is hopeless, or "" while it is not.
  std::string failure(const char* what) {
    if (world_.aborted()) {
      return str(world_.failure_message(), "; rank ", members_[rank_], " was at ", what, " in ",
                 operation_());
    }
    for (int m : members_) {
      if (m != members_[rank_] && world_.exited(m)) {
        return str("rank ", m, " finished its work while rank ", members_[rank_], ": waited at ",
                   what, " in ", operation_(),
                   " (it exited early, or the ranks disagree on the sequence of operations)");
      }
    }
    return "";
  }

  World& world_;
  World::SharedGroupState& state_;
  const std::vector<int>& members_;
  int rank_;
  std::function<std::string()> operation_;
};

class ThreadRequest : public Request {
 public:
  ThreadRequest(World& world, std::string what) : world_(world), what_(std::move(what)) {}
  ~ThreadRequest() override { world_.abandon(&envelope_); }
  void wait() override { world_.wait(&envelope_, what_); }
  bool done() override { return envelope_.state.load() != State::pending; }
  Envelope& envelope() { return envelope_; }

 private:
  World& world_;
  std::string what_;
  Envelope envelope_;
};

// FNV-1a over the parent's context, the group's name and its members: a context id that all
// members compute alike, with no communication.
uint64_t derive_context(uint64_t parent, std::string_view name, const std::vector<int>& members) {
  uint64_t h = 1469598103934665603ull ^ parent;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (char c : name) mix(static_cast<unsigned char>(c));
  mix(0xfeed);
  for (int m : members) mix(static_cast<uint64_t>(m));
  return h == 0 ? 1 : h;
}

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(World& world, std::vector<int> members, int rank, uint64_t context)
      : world_(world), members_(std::move(members)), rank_(rank), context_(context) {
    init_accounting(world.size());
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  int global_rank_of(int rank) const override { return members_[rank]; }
  int world_size() const override { return world_.size(); }

  void barrier() override {
    // Dissemination barrier: ceil(log2 N) rounds of empty messages.
    const int n = size();
    for (int d = 1; d < n; d <<= 1) {
      char token = 0;
      send_recv(&token, 0, (rank_ + d) % n, &token, 0, (rank_ - d + n) % n, kBarrierTag);
    }
  }

  std::unique_ptr<Communicator> subgroup(std::span<const int> ranks,
                                         std::string_view name) override {
    std::vector<int> members;
    int my_index = -1;
    for (size_t i = 0; i < ranks.size(); ++i) {
      DTRAIN_CHECK(ranks[i] >= 0 && ranks[i] < size(), "subgroup '", name, "': rank ", ranks[i],
                   " is outside the parent group of ", size());
      DTRAIN_CHECK(i == 0 || ranks[i] > ranks[i - 1], "subgroup '", name,
                   "': ranks must be ascending and distinct");
      if (ranks[i] == rank_) my_index = static_cast<int>(i);
      members.push_back(members_[ranks[i]]);
    }
    DTRAIN_CHECK(my_index >= 0, "subgroup '", name, "': rank ", rank_,
                 " creates a group it is not a member of");
    const uint64_t context = derive_context(context_, name, members);
    return std::make_unique<ThreadCommunicator>(world_, std::move(members), my_index, context);
  }

  SharedMemoryGroup* shared_memory() override {
    if (!shared_) {
      shared_ = std::make_unique<ThreadSharedMemory>(world_, world_.shared_group(context_, size()),
                                                     members_, rank_,
                                                     [this] { return current_operation(); });
    }
    return shared_.get();
  }

 protected:
  RequestPtr start_send(const void* data, int64_t bytes, int peer, int tag) override {
    auto request = std::make_unique<ThreadRequest>(world_, describe("send to", peer, tag));
    Envelope& e = request->envelope();
    fill(e, peer, tag, bytes, /*is_send=*/true);
    e.send_data = data;
    world_.post(&e);
    return request;
  }
  RequestPtr start_recv(void* data, int64_t bytes, int peer, int tag) override {
    auto request = std::make_unique<ThreadRequest>(world_, describe("recv from", peer, tag));
    Envelope& e = request->envelope();
    fill(e, peer, tag, bytes, /*is_send=*/false);
    e.recv_data = data;
    world_.post(&e);
    return request;
  }

 private:
  static constexpr int kBarrierTag = -1;

  void fill(Envelope& e, int peer, int tag, int64_t bytes, bool is_send) {
    e.context = context_;
    e.src = is_send ? members_[rank_] : members_[peer];
    e.dst = is_send ? members_[peer] : members_[rank_];
    e.tag = tag;
    e.bytes = bytes;
    e.is_send = is_send;
  }

  World& world_;
  std::vector<int> members_;  // world ranks, by group rank
  int rank_;
  uint64_t context_;
  std::unique_ptr<ThreadSharedMemory> shared_;
};

}  // namespace

void run_ranks(int ranks, const std::function<void(Communicator&)>& fn, WorldOptions options) {
  DTRAIN_CHECK(ranks >= 1, "run_ranks: the number of ranks must be >= 1, got ", ranks);
  DTRAIN_CHECK(options.timeout_s > 0, "run_ranks: the timeout must be positive, got ",
               options.timeout_s);
  World world(ranks, options);
  std::vector<int> members(ranks);
  for (int r = 0; r < ranks; ++r) members[r] = r;

  std::mutex first_mu;
  std::exception_ptr first_error;
  std::atomic<int> exited_rank{-1};
  auto body = [&](int r) {
    try {
      ThreadCommunicator comm(world, members, r, /*context=*/0);
      fn(comm);
      world.mark_exited(r);
    } catch (const RankExited&) {
      exited_rank.store(r);
      world.mark_exited(r);  // a silent stop: the others find out from their pending operations
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(first_mu);
        if (!first_error) first_error = std::current_exception();
      }
      world.abort(r, e.what());
      world.mark_exited(r);
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(first_mu);
        if (!first_error) first_error = std::current_exception();
      }
      world.abort(r, "unknown exception");
      world.mark_exited(r);
    }
  };
  if (ranks == 1) {
    body(0);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(ranks);
    // A rank thread that cannot start (its stack does not fit under ulimit -v, or the thread
    // limit) fails the run: the ranks already started are aborted and joined, not left waiting
    // for a peer that never comes.
    try {
      for (int r = 0; r < ranks; ++r) threads.emplace_back(body, r);
    } catch (const std::system_error& e) {
      const int started = static_cast<int>(threads.size());
      world.abort(started, str("its thread could not start (", e.what(), ")"));
      for (int r = started; r < ranks; ++r) world.mark_exited(r);
      for (auto& t : threads) t.join();
      throw Error(str("cannot start rank ", started, " of ", ranks, " as a thread (", e.what(),
                      "): each rank thread needs its own stack; the process's memory or thread "
                      "limit is too small for ",
                      ranks, " ranks (ulimit -v, ulimit -u)"));
    }
    for (auto& t : threads) t.join();
  }
  if (first_error) std::rethrow_exception(first_error);
  // Nobody noticed (no rank was waiting for it): the run still failed.
  if (exited_rank.load() >= 0) {
    throw CommError(str("rank ", exited_rank.load(), " exited before finishing its work"));
  }
}

}  // namespace dtrain::comm::threads
