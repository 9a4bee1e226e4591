// The MPI library this build links, for `dtrain --version` and the reports.
#pragma once

#include <string>

namespace dtrain::comm {

// MPI_Get_library_version's first line ("Open MPI v4.1.4, ..."), or "none (built without MPI)".
// Callable before MPI is initialised.
std::string mpi_library_version();

}  // namespace dtrain::comm
