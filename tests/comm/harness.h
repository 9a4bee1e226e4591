// Runs a test body on N ranks of the backend under test. The same test sources build twice:
// test_comm runs them on the threads backend; test_comm_mpi (built when OpenMPI is present)
// runs them under `mpirun -np 8`, where the first N processes form a group for each body and
// the rest wait. Checks therefore run inside the body, on each rank's own results.
#pragma once

#include <functional>
#include <numeric>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#if DTRAIN_TEST_MPI
#include "dtrain/comm/mpi/backend.h"
#endif

namespace dtrain::comm::testing {

inline void run_group(int ranks, const std::function<void(Communicator&)>& body,
                      double timeout_s = 60) {
#if DTRAIN_TEST_MPI
  Communicator& world = mpi::world(mpi::WorldOptions{timeout_s});
  DTRAIN_CHECK(ranks <= world.size(), "the test needs ", ranks, " ranks; run mpirun -np ", ranks,
               " or more");
  if (world.rank() < ranks) {
    std::vector<int> members(static_cast<size_t>(ranks));
    std::iota(members.begin(), members.end(), 0);
    auto group = world.subgroup(members, "test");
    body(*group);
  }
  world.barrier();
#else
  threads::run_ranks(ranks, body, threads::WorldOptions{timeout_s});
#endif
}

}  // namespace dtrain::comm::testing
