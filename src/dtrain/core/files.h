// Up-front checks of the files a command will read or write: a run that would fail at its
// end (an unwritable --save, a --timeline that is a directory) fails before its first step,
// naming the flag, the path and the reason.
#pragma once

#include <string>
#include <string_view>

namespace dtrain {

// `path` names a readable regular file. Throws Error "FLAG PATH: <reason>" otherwise (empty,
// missing, a directory, unreadable).
void check_input_file(const std::string& path, std::string_view flag);

// A file can be created or replaced at `path`: not empty, not a directory, and its directory
// exists and accepts a new file (tried for real, then removed; an existing file is left as it is).
void check_output_file(const std::string& path, std::string_view flag);

// `path` is (or can be made) a directory that accepts new files: created if missing, then a
// probe file is created in it and removed.
void check_output_directory(const std::string& path, std::string_view flag);

}  // namespace dtrain
