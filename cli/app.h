// The `dtrain` command tree, built once for the executable (main.cc) and for each in-process
// run (embedded.h), so both parse the same flags with the same checks and messages.
#pragma once

#include <CLI/CLI.hpp>

namespace dtrain::cli {

// Adds --version and every registered command to `app`.
void build_app(CLI::App& app);

}  // namespace dtrain::cli
