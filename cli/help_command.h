// `dtrain help [COMMAND [SUBCOMMAND]]`: the same text as `dtrain COMMAND --help`, for users who
// type the word first (as with git or go); a name that is no command is refused with the list.
#pragma once

#include <CLI/CLI.hpp>

namespace dtrain::cli {

// Adds `help` to `app`, after every other command (it describes them, it has no --config), and
// makes `dtrain nosuch` (or `dtrain bench nosuch`) name the word and list the commands, where
// CLI11 alone says only "A subcommand is required".
void add_help_command(CLI::App& app);

}  // namespace dtrain::cli
