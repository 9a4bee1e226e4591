// `dtrain help [COMMAND [SUBCOMMAND]]`: the same text as `dtrain COMMAND --help`, for users who
// type the word first (as with git or go); a name that is no command is refused with the list.
#pragma once

#include <CLI/CLI.hpp>

namespace dtrain::cli {

// Adds `help` to `app`, after every other command (it describes them, it has no --config).
void add_help_command(CLI::App& app);

}  // namespace dtrain::cli
