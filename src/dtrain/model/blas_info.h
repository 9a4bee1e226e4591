// The BLAS this build runs, for `dtrain --version` and the reports: which library, how it was
// built, and the kernel it picked on this CPU (OPENBLAS_CORETYPE can force another).
#pragma once

#include <string>

namespace dtrain::model {

// openblas_get_config(): "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Cooperlake MAX_THREADS=64".
std::string blas_library_version();

}  // namespace dtrain::model
