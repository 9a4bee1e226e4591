// The threads backend: N ranks are N threads of one process, exchanging messages through
// shared memory with one copy (the receiver's buffer is filled straight from the sender's).
// run_ranks starts the ranks and rethrows the failure that started any cascade; a rank that
// throws or finishes early makes every other rank's pending or later operation on it fail
// at once, and an operation that waits longer than the timeout fails, naming the peer.
#pragma once

#include <functional>

#include "dtrain/comm/communicator.h"

namespace dtrain::comm::threads {

struct WorldOptions {
  // How long one send/recv may wait for its peer before failing (seconds).
  double timeout_s = 120;
};

// Runs fn(world communicator) on `ranks` threads and returns when all have finished.
// If any rank throws, the others' communication fails fast, and run_ranks rethrows the
// first rank's original exception (not the consequences seen by the others).
void run_ranks(int ranks, const std::function<void(Communicator&)>& fn, WorldOptions options = {});

}  // namespace dtrain::comm::threads
