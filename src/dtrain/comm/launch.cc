// run_on_backend: dispatch to the threads backend or to the MPI world (when built with MPI).
#include "dtrain/comm/launch.h"

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/config.h"
#if DTRAIN_HAVE_MPI
#include <mpi.h>

#include "dtrain/comm/mpi/backend.h"
#endif

namespace dtrain::comm {

std::string_view name(Backend backend) {
  return backend == Backend::mpi ? "mpi" : "threads";
}

std::optional<Backend> parse_backend(std::string_view text) {
  if (text == "threads") return Backend::threads;
  if (text == "mpi") return Backend::mpi;
  return std::nullopt;
}

bool mpi_available() {
  return DTRAIN_HAVE_MPI != 0;
}

void run_on_backend(Backend backend, int ranks, const std::function<void(Communicator&)>& fn,
                    LaunchOptions options, bool* is_reporter) {
  if (backend == Backend::threads) {
    if (is_reporter != nullptr) *is_reporter = true;
    threads::run_ranks(ranks, fn, threads::WorldOptions{options.timeout_s});
    return;
  }
#if DTRAIN_HAVE_MPI
  Communicator& world = mpi::world(mpi::WorldOptions{options.timeout_s});
  if (ranks == 0) ranks = world.size();  // every process mpirun started
  DTRAIN_CHECK(ranks <= world.size(), "the run needs ", ranks, " ranks but mpirun started only ",
               world.size(), " processes (-np)");
  if (is_reporter != nullptr) *is_reporter = world.rank() == 0;
  if (world.rank() < ranks) {
    std::vector<int> members(static_cast<size_t>(ranks));
    std::iota(members.begin(), members.end(), 0);
    try {
      if (ranks == world.size()) {
        fn(world);
      } else {
        auto group = world.subgroup(members, "run");
        fn(*group);
      }
    } catch (const RankExited&) {
      std::_Exit(1);  // die without a word, as a crashed process would; mpirun ends the job
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: rank %d failed: %s\n", world.rank(), e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  world.barrier();
#else
  (void)fn;
  throw Error(
      "--backend mpi: this build has no MPI backend (install libopenmpi-dev and openmpi-bin, "
      "then reconfigure)");
#endif
}

}  // namespace dtrain::comm
