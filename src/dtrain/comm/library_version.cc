// mpi_library_version(): MPI_Get_library_version (MPI-3 allows it before MPI_Init).
#include "dtrain/comm/library_version.h"

#include "dtrain/config.h"

#if DTRAIN_HAVE_MPI
#include <mpi.h>
#endif

namespace dtrain::comm {

std::string mpi_library_version() {
#if DTRAIN_HAVE_MPI
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown";
  std::string s(text, static_cast<size_t>(length));
  const size_t end = s.find_first_of("\r\n,");
  return end == std::string::npos ? s : s.substr(0, end);
#else
  return "none (built without MPI)";
#endif
}

}  // namespace dtrain::comm
