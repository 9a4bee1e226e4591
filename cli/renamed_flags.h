// Flags renamed so that train, plan, bench and the --config file say the same thing with the same
// name (README, "One vocabulary"): each old spelling is still accepted for one release, on the
// command line and as a --config key, with a note on stderr naming the new one.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace dtrain::cli {

// Adds `old_name` (e.g. "--channels") to `cmd` as a hidden second spelling of `option`: its
// values go to `option` (validators and all), with a note; both given is an error. --help and
// --dump-config show only the new name.
void accept_old_spelling(CLI::App& cmd, CLI::Option* option, const std::string& old_name);

// The option of `cmd` that `op` is an old spelling of, or nullptr.
CLI::Option* renamed_to(const CLI::App& cmd, const CLI::Option* op);

}  // namespace dtrain::cli
