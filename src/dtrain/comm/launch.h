// Choosing a backend at run time: `--backend threads` starts N rank threads in this process;
// `--backend mpi` uses the processes mpirun started (the first N of them form the group when
// mpirun started more). Everything above comm/ launches ranks through run_on_backend.
#pragma once

#include <functional>
#include <optional>
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
};

// Runs fn on `ranks` ranks of `backend`. Threads: rethrows the first rank's failure. MPI: a
// rank whose fn throws prints the error with its rank and aborts the job (the others would
// wait for it forever otherwise); processes beyond `ranks` wait at a barrier. Returns on every
// process; `is_reporter` (if given) is set true on the process that holds group rank 0.
// MPI with `ranks` 0: every process mpirun started takes part.
void run_on_backend(Backend backend, int ranks, const std::function<void(Communicator&)>& fn,
                    LaunchOptions options = {}, bool* is_reporter = nullptr);

}  // namespace dtrain::comm
