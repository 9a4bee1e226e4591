// run_on_backend: dispatch to the threads backend or to the MPI world (when built with MPI);
// check_launch: what the launcher's environment says against the backend and layout asked for.
#include "dtrain/comm/launch.h"

#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <numeric>
#include <thread>
#include <utility>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/config.h"
#include "dtrain/core/system_memory.h"
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

void check_timeout(double timeout_s, std::string_view flag) {
  // Infinity would never time out (a stalled peer hangs the job) and NaN never compares.
  DTRAIN_CHECK(std::isfinite(timeout_s) && timeout_s > 0, flag,
               " must be a positive, finite number of seconds (got ", timeout_s, ")");
}

namespace {

// An environment variable holding a non-negative int; nullopt when unset or anything else.
std::optional<int> env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > INT_MAX) return std::nullopt;
  return static_cast<int>(value);
}

// Every process of the job refuses, but one message is enough: the first process throws (and
// cli/ prints it); the others wait, so that mpirun, which ends the whole job at the first
// non-zero exit, does not kill the first before it has printed; then they exit quietly.
[[noreturn]] void refuse(const LauncherWorld& launcher, const std::string& message) {
  if (launcher.rank == 0) throw Error(message);
  // mpirun's SIGTERM ends the wait; the caller's handlers (train's graceful stop) must not
  // turn it into a message of their own.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  std::_Exit(1);
}

}  // namespace

LauncherWorld launcher_world() {
  // Size and rank variables, one pair per launcher family, the most specific first.
  const std::pair<const char*, const char*> kVariables[] = {
      {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
      {"PMI_SIZE", "PMI_RANK"},
      {"MPI_LOCALNRANKS", "MPI_LOCALRANKID"}};
  LauncherWorld world;
  for (const auto& [size_variable, rank_variable] : kVariables) {
    const std::optional<int> size = env_int(size_variable);
    if (!size) continue;
    world.launched = true;
    world.size = std::max(*size, 1);
    world.rank = env_int(rank_variable).value_or(0);
    return world;
  }
  // PMIx alone gives the rank, not the size: rank r means at least r + 1 processes.
  if (const std::optional<int> rank = env_int("PMIX_RANK")) {
    world.launched = true;
    world.rank = *rank;
    world.size = *rank + 1;
  }
  return world;
}

void check_launch(Backend backend, int64_t ranks, std::string_view layout) {
  const LauncherWorld launcher = launcher_world();
  if (!launcher.launched) return;
  if (backend == Backend::threads) {
    if (launcher.size == 1) return;  // one process: the threads backend runs as usual
    refuse(launcher, str("started by mpirun with ", launcher.size,
                         " processes but --backend threads: add --backend mpi (with threads, "
                         "each process would run the whole job on its own)"));
  }
  if (ranks <= 0 || ranks == launcher.size) return;
  const std::string needs =
      str("--backend mpi: ", layout.empty() ? std::string_view("the job") : layout, " needs ",
          ranks, " ranks but mpirun started");
  if (ranks < launcher.size) {
    refuse(launcher, str(needs, " ", launcher.size, " processes, ", launcher.size - ranks,
                         " of which would sit idle: run mpirun -np ", ranks, " (or a layout of ",
                         launcher.size, " ranks)"));
  }
  refuse(launcher, str(needs, " only ", launcher.size, " processes: run mpirun -np ", ranks));
}

void check_single_process(std::string_view command) {
  const LauncherWorld launcher = launcher_world();
  if (launcher.size == 1) return;
  refuse(launcher, str(command, " runs its ranks as threads of one process, but mpirun started ",
                       launcher.size, " processes, each of which would run it on its own: ",
                       "start it without mpirun"));
}

void run_on_backend(Backend backend, int ranks, const std::function<void(Communicator&)>& fn,
                    LaunchOptions options, bool* is_reporter) {
  // The commands check first; this covers every other caller.
  if (!(backend == Backend::threads && options.threads_inside_a_job)) check_launch(backend);
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
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "error: rank %d failed: %s\n", world.rank(),
                   out_of_memory_message().c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
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
