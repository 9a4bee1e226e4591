// build_app: the top level of `dtrain` (its description, --version, the commands).
#include "app.h"

#include "build_info.h"
#include "command_registry.h"

namespace dtrain::cli {

void build_app(CLI::App& app) {
  app.description(
      "dtrain: distributed transformer training on CPU ranks (data, tensor, pipeline and "
      "sharded parallelism) and a planner that sizes real cluster runs.");
  app.set_version_flag(
      "--version", [] { return build_info_text(); },
      "Print the version, commit, build type, BLAS and MPI libraries and exit");
  app.require_subcommand(1);
  app.fallthrough(false);
  add_registered_commands("", app);
}

}  // namespace dtrain::cli
