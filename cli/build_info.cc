// build_info_text / build_info_json: one list of fields, two renderings.
#include "build_info.h"

#include <utility>
#include <vector>

#include "dtrain/comm/library_version.h"
#include "dtrain/core/malloc_info.h"
#include "dtrain/core/version.h"
#include "dtrain/model/blas_info.h"
#include "dtrain/model/gemm.h"

namespace dtrain::cli {
namespace {

std::vector<std::pair<std::string, std::string>> fields() {
  return {{"version", std::string(version())},
          {"commit", std::string(git_commit())},
          {"build_type", std::string(build_type())},
          {"blas", model::blas_library_version()},
          {"blas_kernel", model::blas_corename()},
          {"mpi", comm::mpi_library_version()},
          {"allocator", malloc_library()}};
}

}  // namespace

std::string build_info_text() {
  std::string out = "dtrain " + std::string(version()) + "\n";
  for (const auto& [key, value] : fields()) {
    if (key != "version") out += "  " + key + ": " + value + "\n";
  }
  return out;
}

nlohmann::json build_info_json() {
  nlohmann::json j;
  for (const auto& [key, value] : fields()) j[key] = value;
  return j;
}

}  // namespace dtrain::cli

namespace dtrain::cli {

nlohmann::json with_build(nlohmann::json report) {
  if (report.is_object()) report["build"] = build_info_json();
  return report;
}

}  // namespace dtrain::cli
