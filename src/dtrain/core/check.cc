// Out-of-line part of DTRAIN_CHECK, so the macro stays small at every call site.
#include "dtrain/core/check.h"

namespace dtrain::detail {

void check_failed(const char* condition, const char* file, int line, const std::string& message) {
  if (!message.empty()) throw Error(message);
  throw Error(str("internal check failed: ", condition, " at ", file, ":", line));
}

}  // namespace dtrain::detail
