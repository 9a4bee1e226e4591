// File identity by stat(2) (it follows symbolic links, so a link is its target) and, for a
// path that does not exist yet, by std::filesystem::weakly_canonical (it resolves `.`, `..` and
// the links in the folders that do exist).
#include "file_roles.h"

#include <sys/stat.h>

#include <filesystem>
#include <optional>

#include "dtrain/core/check.h"

namespace dtrain::cli {
namespace {

// Where a path leads: a file or folder by its device and inode, or a file still to be made by
// its canonical name. Devices and pipes have no identity here: writing /dev/null twice, or
// reading and writing a terminal, destroys nothing.
struct FileIdentity {
  bool exists = false;
  dev_t device = 0;
  ino_t inode = 0;
  std::string canonical;  // for a path that does not exist
};

std::optional<FileIdentity> identity_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return std::nullopt;
    return FileIdentity{.exists = true, .device = st.st_dev, .inode = st.st_ino};
  }
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) return std::nullopt;
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(absolute, ec);
  return FileIdentity{.canonical = (ec ? absolute : canonical).lexically_normal().string()};
}

bool same_file(const FileIdentity& a, const FileIdentity& b) {
  if (a.exists != b.exists) return false;
  if (a.exists) return a.device == b.device && a.inode == b.inode;
  return a.canonical == b.canonical;
}

struct Identified {
  const NamedPath* named;
  FileIdentity identity;
};

std::vector<Identified> identify(const std::vector<NamedPath>& paths) {
  std::vector<Identified> out;
  for (const NamedPath& p : paths) {
    if (p.path.empty()) continue;
    if (std::optional<FileIdentity> id = identity_of(p.path)) out.push_back({&p, *id});
  }
  return out;
}

}  // namespace

void refuse_outputs_that_are_inputs(const CLI::App& cmd, std::vector<NamedPath> inputs,
                                    const std::vector<NamedPath>& outputs) {
  if (const CLI::Option* config = cmd.get_option_no_throw("--config");
      config != nullptr && config->count() > 0) {
    inputs.push_back({"--config", config->results().front()});
  }
  const std::vector<Identified> in = identify(inputs);
  const std::vector<Identified> out = identify(outputs);
  for (size_t o = 0; o < out.size(); ++o) {
    const NamedPath& output = *out[o].named;
    for (const Identified& i : in) {
      DTRAIN_CHECK(!same_file(out[o].identity, i.identity), output.flag, " ", output.path,
                   " is the same file as ", i.named->flag, " ", i.named->path,
                   ": refusing to overwrite an input (give the output another name)");
    }
    for (size_t earlier = 0; earlier < o; ++earlier) {
      DTRAIN_CHECK(!same_file(out[o].identity, out[earlier].identity), output.flag, " ",
                   output.path, " is the same file as ", out[earlier].named->flag, " ",
                   out[earlier].named->path,
                   ": each output needs a file of its own (one would overwrite the other)");
    }
  }
}

}  // namespace dtrain::cli
