// Writes a rendered trace or timeline to a file, with an error that names the path when the
// file cannot be written.
#pragma once

#include <string>
#include <string_view>

namespace dtrain::trace {

// Replaces the file at `path` with `contents`; throws dtrain::Error naming the path on failure.
void write_file(const std::string& path, std::string_view contents);

}  // namespace dtrain::trace
