// Commands register themselves here, so each command lives in one file under commands/ and
// main.cc never changes when one is added. A group names the parent: "" is the top level
// (`dtrain train`), "bench" holds `dtrain bench <name>`.
#pragma once

#include <string_view>

#include <CLI/CLI.hpp>

namespace dtrain::cli {

using AddCommand = void (*)(CLI::App& parent);

struct CommandRegistration {
  CommandRegistration(std::string_view group, AddCommand add);
};

// Adds every command registered under `group` to `parent`, in name order.
void add_registered_commands(std::string_view group, CLI::App& parent);

}  // namespace dtrain::cli
