// CLI11 validators with readable messages: CLI11's own Range/PositiveNumber print their bound
// as a 300-digit double; these say "--log-every: must be at least 0 (got -3)".
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace dtrain::cli {

// An integer flag's value must be >= `min` (and parse as an integer at all).
CLI::Validator at_least(int64_t min);

// A path flag given as "" is a mistake (an unset shell variable), not "use the default".
extern const CLI::Validator kNotEmpty;

}  // namespace dtrain::cli
