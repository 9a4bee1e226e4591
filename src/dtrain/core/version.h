// What build this is: the project version (semantic), the git commit it was configured from
// and the CMake build type. Printed by `dtrain --version`, recorded in checkpoints and in the
// JSON reports so a number can always be traced to the code that produced it.
#pragma once

#include <string_view>

namespace dtrain {

std::string_view version();     // "0.4.0"
std::string_view git_commit();  // "690a990" (+ "-dirty" with uncommitted changes), or "unknown"
std::string_view build_type();  // "Release", "Debug", ...
// The absolute source tree this binary was configured from (not __FILE__: a compiler launcher
// such as ccache with base_dir rewrites source paths to relative ones, which would make the
// default corpus depend on the working directory).
std::string_view source_dir();

}  // namespace dtrain
