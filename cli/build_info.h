// What `dtrain --version` prints, and the "build" object every --json report carries: the
// version, commit and build type, the BLAS and MPI libraries with the kernel in use, and the
// malloc serving this process.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dtrain::cli {

std::string build_info_text();
nlohmann::json build_info_json();
// `report` with "build" added: every --json report says which build produced its figures.
nlohmann::json with_build(nlohmann::json report);

}  // namespace dtrain::cli
