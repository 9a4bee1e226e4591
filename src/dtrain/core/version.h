// What build this is: the project version (semantic), the git commit it was configured from
// and the CMake build type. Printed by `dtrain --version`, recorded in checkpoints and in the
// JSON reports so a number can always be traced to the code that produced it.
#pragma once

#include <string_view>

namespace dtrain {

std::string_view version();     // "0.4.0"
std::string_view git_commit();  // "690a990" (+ "-dirty" with uncommitted changes), or "unknown"
std::string_view build_type();  // "Release", "Debug", ...

}  // namespace dtrain
