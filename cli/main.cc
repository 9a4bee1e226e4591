// dtrain's entry point: builds the command tree from the registered commands and maps every
// failure to a message on stderr and a non-zero exit. No engine logic lives in cli/.
#include <cstdio>
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "build_info.h"
#include "command_registry.h"
#include "dtrain/core/check.h"

int main(int argc, char** argv) {
  CLI::App app{
      "dtrain: distributed transformer training on CPU ranks (data, tensor, pipeline and "
      "sharded parallelism) and a planner that sizes real cluster runs."};
  app.set_version_flag(
      "--version", [] { return dtrain::cli::build_info_text(); },
      "Print the version, commit, build type, BLAS and MPI libraries and exit");
  app.require_subcommand(1);
  app.fallthrough(false);
  dtrain::cli::add_registered_commands("", app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const dtrain::Error& e) {
    std::fflush(stdout);
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
