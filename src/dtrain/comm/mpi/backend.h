// The MPI backend: one rank per process, launched by mpirun (OpenMPI), across one machine or
// many. The same contract and file names as threads/backend.h, so everything above comm/ runs
// unchanged. Every wait polls with a deadline instead of blocking in MPI, so a peer that died
// or stalled turns into an error naming it (after the timeout) rather than a hang; a rank that
// fails aborts the whole job with a message naming itself and the operation it was in.
#pragma once

#include <functional>

#include "dtrain/comm/communicator.h"

namespace dtrain::comm::mpi {

struct WorldOptions {
  // How long one send/recv may wait for its peer before the job is aborted (seconds).
  double timeout_s = 120;
};

// True when this process was started by mpirun (OpenMPI's or a PMI launcher's environment).
bool launched_by_mpirun();

// This process's world communicator; initializes MPI on first use (throws a clear Error when
// the process was not started by mpirun). Lives until finalize().
Communicator& world(WorldOptions options = {});
// Finalizes MPI if world() initialized it. Safe to call more than once.
void finalize();

// Initializes MPI, runs fn(world communicator) on this process's rank and finalizes. `ranks`
// must equal the number of processes mpirun started (0: accept any). If fn throws, the error
// is printed with this rank's name and the job is aborted (MPI_Abort), so no rank hangs.
void run_ranks(int ranks, const std::function<void(Communicator&)>& fn, WorldOptions options = {});

}  // namespace dtrain::comm::mpi
