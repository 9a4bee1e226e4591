// The backend contract: a Communicator is a group of ranks that can send and receive bytes
// point to point (blocking or not), wait at a barrier, and form subgroups. Everything else,
// every collective included, is written once over this contract (comm/collectives.h), and
// backends (threads/, mpi/) plug in underneath with the same file names.
//
// Accounting lives here, not in the backends: every byte that leaves or reaches this rank
// through isend/irecv is counted, per peer, so the collectives' traffic is measured, not
// computed. Collectives add the number of communication rounds (steps) they ran.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/comm/collective_kind.h"
#include "dtrain/comm/shared_memory.h"
#include "dtrain/core/buffer.h"
#include "dtrain/core/check.h"
#include "dtrain/core/memory.h"

namespace dtrain::comm {

// A peer failed, exited early, or an operation timed out. The text names the rank at fault
// and the operation this rank was in.
class CommError : public Error {
 public:
  using Error::Error;
};

// Thrown by a rank's code to stop that rank silently, as if its process had died (fault
// injection): the threads backend marks the rank exited without recording an error, so the
// other ranks' operations on it fail and name it; the MPI launcher ends the process.
class RankExited : public Error {
 public:
  using Error::Error;
};

// What one rank sent and received: cumulative on a communicator, or for one collective call.
// Through shared memory (the direct algorithm) a write into a peer's memory counts as sent and
// a read from it as received, and the read is also counted in bytes_read.
//
// The bytes a rank moves across ranks (what every report gives, docs/algorithms.md "Bytes
// moved"): those it sends, as messages or written into a peer's memory, plus those it reads in
// place from a peer's memory. Each byte that passes between two ranks counts once, on the rank
// that moves it; message-passing algorithms move what they send.
struct Traffic {
  int64_t steps = 0;  // communication rounds run by collectives
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t messages_sent = 0;
  int64_t bytes_read = 0;  // of bytes_received: read in place from peers' memory

  int64_t bytes_moved() const { return bytes_sent + bytes_read; }

  Traffic operator-(const Traffic& o) const {
    return {steps - o.steps, bytes_sent - o.bytes_sent, bytes_received - o.bytes_received,
            messages_sent - o.messages_sent, bytes_read - o.bytes_read};
  }
  Traffic& operator+=(const Traffic& o) {
    steps += o.steps;
    bytes_sent += o.bytes_sent;
    bytes_received += o.bytes_received;
    messages_sent += o.messages_sent;
    bytes_read += o.bytes_read;
    return *this;
  }
};

enum class ElementType { f32, i64, bf16 };

// One collective handed to a backend's own implementation (Algorithm::native). Buffers and
// counts follow collectives.h; `avg` arrives as `sum` (the caller scales).
struct NativeCollective {
  CollectiveOp op = CollectiveOp::all_reduce;
  ElementType type = ElementType::f32;
  ReduceOp reduce = ReduceOp::sum;
  const void* input = nullptr;  // == output for in-place all_reduce and broadcast
  void* output = nullptr;
  int64_t count = 0;
  int root = 0;
};

// Handle to a nonblocking send or receive. wait() blocks until it completes (or throws
// CommError); the buffer must stay valid until then. Destroying an unfinished request waits.
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
  virtual bool done() = 0;
};
using RequestPtr = std::unique_ptr<Request>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  // --- the backend contract -----------------------------------------------------------
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The world rank of `rank` in this group (for per-link accounting and error messages).
  virtual int global_rank_of(int rank) const = 0;
  virtual int world_size() const = 0;
  virtual void barrier() = 0;
  // A communicator over `ranks` (ranks of this group, ascending, including this rank); only
  // the members call it. Messages in the subgroup never match those of any other group; `name`
  // keeps two subgroups with the same members apart ("dp", "tp", ...).
  virtual std::unique_ptr<Communicator> subgroup(std::span<const int> ranks,
                                                 std::string_view name) = 0;
  // Runs `c` with the backend's own collective; false if the backend has none (the default).
  virtual bool run_native(const NativeCollective& /*c*/) { return false; }
  // The group's shared memory, when all its ranks can reach each other's memory (the threads
  // backend; MPI ranks all on one node); nullptr otherwise (the default). The first call may be
  // collective (MPI creates its window then): every member makes it, in the same order.
  virtual SharedMemoryGroup* shared_memory() { return nullptr; }
  // Messages with the same (peer, tag) are received in the order they were sent.
  RequestPtr isend(const void* data, int64_t bytes, int peer, int tag);
  RequestPtr irecv(void* data, int64_t bytes, int peer, int tag);

  // --- conveniences over the contract -------------------------------------------------
  void send(const void* data, int64_t bytes, int peer, int tag) {
    isend(data, bytes, peer, tag)->wait();
  }
  void recv(void* data, int64_t bytes, int peer, int tag) { irecv(data, bytes, peer, tag)->wait(); }
  // Sends to `to` and receives from `from` at once (the step of every ring).
  void send_recv(const void* send_data, int64_t send_bytes, int to, void* recv_data,
                 int64_t recv_bytes, int from, int tag);

  int global_rank() const { return global_rank_of(rank()); }

  // --- accounting -----------------------------------------------------------------------
  Traffic traffic() const;
  // Bytes this rank moved with each world rank through this communicator (index: world rank):
  // sent to it, written into its memory, or read in place from its memory (Traffic's
  // bytes_moved, split by peer).
  std::vector<int64_t> bytes_sent_per_peer() const;
  void add_steps(int64_t steps) { steps_.fetch_add(steps, std::memory_order_relaxed); }
  // Traffic through shared memory (the direct algorithm): `read` bytes this rank read from
  // group rank `peer`'s memory count as received (and read), `written` bytes it wrote into that
  // memory as sent; both are moved with that peer, for the per-link figures. No message is
  // counted.
  void add_shared_memory_traffic(int peer, int64_t read, int64_t written);

  // The operation this rank is in, for error messages: "all_reduce #12 (ring)". Set by the
  // collectives through OperationScope.
  const std::string& current_operation() const { return current_operation_; }
  // Sequence number of the next collective on this communicator (same on every member).
  int64_t next_sequence() { return sequence_++; }

  // Reusable scratch space for the collectives (kScratchSlots independent slots), grown on
  // demand and never shrunk; charged to the memory tracker, if any, as `communication`.
  static constexpr int kScratchSlots = 3;
  void* scratch(int slot, int64_t bytes);
  void set_memory_tracker(MemoryTracker* tracker) { tracker_ = tracker; }

 protected:
  // Backends implement these; the byte accounting above wraps them.
  virtual RequestPtr start_send(const void* data, int64_t bytes, int peer, int tag) = 0;
  virtual RequestPtr start_recv(void* data, int64_t bytes, int peer, int tag) = 0;

  void init_accounting(int world_size);
  std::string describe(std::string_view what, int peer, int tag) const;

 private:
  friend class OperationScope;
  std::atomic<int64_t> steps_{0}, bytes_sent_{0}, bytes_received_{0}, messages_sent_{0},
      bytes_read_{0};
  std::unique_ptr<std::atomic<int64_t>[]> bytes_to_peer_;
  int accounted_world_ = 0;
  std::string current_operation_;
  int64_t sequence_ = 0;
  MemoryTracker* tracker_ = nullptr;
  Buffer<std::byte> scratch_[kScratchSlots];
};

// Names the operation a rank is in for the duration of a scope, and measures its traffic.
class OperationScope {
 public:
  OperationScope(Communicator& comm, std::string name);
  ~OperationScope();
  OperationScope(const OperationScope&) = delete;
  OperationScope& operator=(const OperationScope&) = delete;
  void step(int64_t n = 1) { comm_.add_steps(n); }
  // Traffic since the scope began.
  Traffic traffic() const { return comm_.traffic() - start_; }

 private:
  Communicator& comm_;
  std::string previous_;
  Traffic start_;
};

}  // namespace dtrain::comm
