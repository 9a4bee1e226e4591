// What a backend offers when every rank of a group can reach the others' memory: the contract
// the direct algorithm (algorithms/direct.cc) is written over. Two forms:
// - shared address space (threads backend): each rank publishes the buffers of the call, and
//   after a barrier every rank reads (and writes) its peers' buffers in place: zero copies;
// - shared window (MPI ranks on one node, MPI_Win_allocate_shared): a fixed-size slot per rank
//   that every rank maps; callers stage their data through their own slot, segment by segment.
// The barrier is a flag barrier in shared memory (no messages), so a small collective costs two
// cache-line hand-offs; it fails like a receive would when a member died or the timeout passed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dtrain::comm {

class SharedMemoryGroup {
 public:
  virtual ~SharedMemoryGroup() = default;

  // Returns once every rank of the group has called it; memory written before it by any rank is
  // visible to all after it. Throws CommError naming the member at fault on failure or timeout;
  // a barrier that one rank gave up on never completes for the others (they fail too), so no
  // rank goes on to touch the buffers of one that left.
  virtual void barrier() = 0;
  // The barrier that ends a call, after which the ranks' buffers are their own again. A rank
  // that fails here first waits (a bounded time) for the peers still writing into its buffers
  // to arrive or leave, so its buffers are not freed under them.
  virtual void closing_barrier() { barrier(); }

  // Shared address space: publish() this rank's buffers for the call (nullptr where it has
  // none); after the next barrier(), input_of(q) / output_of(q) are rank q's.
  virtual bool shares_address_space() const = 0;
  virtual void publish(const void* input, void* output) = 0;
  virtual const void* input_of(int rank) const = 0;
  virtual void* output_of(int rank) const = 0;

  // Shared window: rank q's slot of slot_bytes() (a multiple of 64), mapped by every rank.
  virtual int64_t slot_bytes() const = 0;
  virtual std::byte* slot(int rank) const = 0;

  // The latency path (both forms): rank q's two small slots of small_slot_bytes() each, used by
  // alternate exchanges, and a flag per rank. post(e) says this rank's data for exchange e is in
  // small_slot(rank, e % 2); wait_posted(e) returns once every rank has posted e. A rank posts
  // e + 1 only after it has read everyone's data of e, so by the time anyone writes exchange
  // e + 2 into the slot of e, nobody reads it any more: one synchronisation per call.
  virtual int64_t small_slot_bytes() const = 0;
  virtual std::byte* small_slot(int rank, int parity) = 0;
  virtual void post(uint64_t exchange) = 0;
  virtual void wait_posted(uint64_t exchange) = 0;
  // The number of this rank's next exchange (1, 2, ...; the same on every rank, as the ranks
  // run the same sequence of collectives).
  uint64_t next_exchange() { return ++exchanges_; }

 private:
  uint64_t exchanges_ = 0;
};

}  // namespace dtrain::comm
