// One check shared by every command that writes files: no output may be one of the command's
// inputs (or another output), compared by file identity, before any work starts, so that a
// path typed twice refuses the run instead of overwriting the user's data.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace dtrain::cli {

// A path and the flag (or positional) that gave it, as the user reads it in messages.
struct NamedPath {
  std::string flag;
  std::string path;
};

// Throws Error unless every output in `outputs` is a file other than each input in `inputs`, the
// `--config FILE` that `cmd` read (every command has one), and each other output. Files that
// exist compare by device and inode (hard links, symbolic links and `./x` against `x` are the
// same file); a path that does not exist yet compares by its canonical folder and name. Empty
// paths are skipped, and so are character devices and pipes (`--trace /dev/null` twice is fine).
// The message names both flags: "--metrics my.txt is the same file as --data my.txt: ...".
void refuse_outputs_that_are_inputs(const CLI::App& cmd, std::vector<NamedPath> inputs,
                                    const std::vector<NamedPath>& outputs);

// Throws Error if an output lies inside one of `folders` (a folder the command reads, such as
// --resume or --init-from, or one it owns, such as --save), at any depth, whether the file exists
// yet or not, or is one of the files such a folder holds under another name (a hard or symbolic
// link from outside). Paths compare canonically (`.`, `..` and symbolic links resolved); a
// folder that does not exist yet (a new --save) still counts by its name. Empty paths, devices
// and pipes are skipped. The message names both flags: "--metrics ck/run.json is inside --save
// ck: ...". Call it before anything is written.
void refuse_outputs_in_folders(const std::vector<NamedPath>& folders,
                               const std::vector<NamedPath>& outputs);

}  // namespace dtrain::cli
