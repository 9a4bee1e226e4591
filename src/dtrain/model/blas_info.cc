// blas_library_version(): OpenBLAS's own description of itself.
#include "dtrain/model/blas_info.h"

#include <cblas.h>

namespace dtrain::model {

std::string blas_library_version() {
  const char* config = openblas_get_config();
  return config != nullptr ? config : "unknown";
}

}  // namespace dtrain::model
