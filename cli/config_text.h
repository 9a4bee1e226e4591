// The text of a --config file, checked before CLI11 reads it: CLI11's reader skips what it cannot
// parse, splits a value at spaces and merges a repeated key, so a typo reaches the flags as
// "--steps: At Most 1 required but received 2". These checks name the file and the line.
#pragma once

#include <map>
#include <string>

namespace dtrain::cli {

// Key (its full name: "section.key", or "key" outside a section; '_' written '-') -> the line
// (1-based) that set it.
using ConfigLines = std::map<std::string, int>;

// Throws Error naming --config, `path` and the line for: a path that is not a regular file (a
// directory, a device), a binary file (a NUL or other control byte), a line that is no
// `key = value`, `[section]`, `key` (a switch) or comment, a value that is several words, a key
// set twice, and a whole number outside the 64-bit range. Returns where each key was set.
ConfigLines check_config_text(const std::string& path);

}  // namespace dtrain::cli
