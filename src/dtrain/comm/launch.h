// Choosing a backend at run time: `--backend threads` starts N rank threads in this process;
// `--backend mpi` uses the processes mpirun started (the first N of them form the group when
// mpirun started more). Everything above comm/ launches ranks through run_on_backend, after
// check_launch has refused a launcher and backend that do not fit together.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "dtrain/comm/communicator.h"

namespace dtrain::comm {

enum class Backend { threads, mpi };
std::string_view name(Backend backend);
std::optional<Backend> parse_backend(std::string_view text);
// True when this build has the MPI backend (OpenMPI was found at configure time).
bool mpi_available();

struct LaunchOptions {
  double timeout_s = 120;  // how long one send/recv may wait for its peer
  // Thread ranks that one process of an MPI job starts on purpose, apart from the job (calibrate
  // timing collectives on thread ranks in its reporting process): no launcher check.
  bool threads_inside_a_job = false;
};
// Throws unless `timeout_s` is a positive, finite number of seconds; `flag` names the option.
void check_timeout(double timeout_s, std::string_view flag = "--timeout");

// The processes a launcher started, read from the variables it gives each one before MPI
// starts (OpenMPI's mpirun: OMPI_COMM_WORLD_SIZE/RANK; MPICH, Intel MPI, PMI-2 srun:
// PMI_SIZE/RANK, MPI_LOCALNRANKS/LOCALRANKID; PMIx: PMIX_RANK). A process started on its own:
// launched false, size 1, rank 0.
struct LauncherWorld {
  bool launched = false;
  int size = 1;  // processes started (1 when the launcher does not say)
  int rank = 0;  // this process among them
};
LauncherWorld launcher_world();

// Refuses, before any rank starts, a launch that would run something else than asked: the
// threads backend in one of several processes a launcher started (each process would run the
// whole job on its own), and with `ranks` > 0 and the MPI backend, a process count other than
// the ranks the job needs (`layout` names them, e.g. "--dp 2 x --tp 1 x --pp 1").
// Under a launcher only its first process throws the Error (so the message is printed once);
// the others end with status 1 without a word, a moment later.
void check_launch(Backend backend, int64_t ranks = 0, std::string_view layout = {});
// The same for a command that runs only on the threads backend (`command` names it).
void check_single_process(std::string_view command);

// Runs fn on `ranks` ranks of `backend`. Threads: rethrows the first rank's failure. MPI: a
// rank whose fn throws prints the error with its rank and aborts the job (the others would
// wait for it forever otherwise); processes beyond `ranks` wait at a barrier. Returns on every
// process; `is_reporter` (if given) is set true on the process that holds group rank 0.
// MPI with `ranks` 0: every process mpirun started takes part.
void run_on_backend(Backend backend, int ranks, const std::function<void(Communicator&)>& fn,
                    LaunchOptions options = {}, bool* is_reporter = nullptr);

}  // namespace dtrain::comm
