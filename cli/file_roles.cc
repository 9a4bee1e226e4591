// File identity by stat(2) (it follows symbolic links, so a link is its target) and, for a
// path that does not exist yet, by std::filesystem::weakly_canonical (it resolves `.`, `..` and
// the links in the folders that do exist).
#include "file_roles.h"

#include <sys/stat.h>

#include <filesystem>
#include <iterator>
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

// `path` made absolute, with `.`, `..` and the symbolic links of its existing part resolved.
std::filesystem::path canonical_path(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) return std::filesystem::path(path).lexically_normal();
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(absolute, ec);
  return (ec ? absolute : canonical).lexically_normal();
}

// Whether `inner` is `outer` or lies below it (both canonical), compared name by name.
bool is_within(const std::filesystem::path& inner, const std::filesystem::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty() && std::next(o) == outer.end()) break;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

}  // namespace

void refuse_outputs_in_folders(const std::vector<NamedPath>& folders,
                               const std::vector<NamedPath>& outputs) {
  const std::vector<Identified> out = identify(outputs);
  for (const NamedPath& folder : folders) {
    if (folder.path.empty()) continue;
    const std::filesystem::path root = canonical_path(folder.path);
    for (const Identified& o : out) {
      const NamedPath& output = *o.named;
      DTRAIN_CHECK(!is_within(canonical_path(output.path), root), output.flag, " ", output.path,
                   " is inside ", folder.flag, " ", folder.path,
                   ": refusing to write into a folder the run reads or writes (give the output a "
                   "path outside it)");
    }
    // A file of the folder reached from outside it: a hard link (or a link the canonical name
    // did not catch) is the same inode.
    std::error_code ec;
    if (!std::filesystem::is_directory(root, ec)) continue;
    for (auto it = std::filesystem::recursive_directory_iterator(
             root, std::filesystem::directory_options::skip_permission_denied, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      const std::optional<FileIdentity> held = identity_of(it->path().string());
      if (!held) continue;
      for (const Identified& o : out) {
        const std::filesystem::path shown =
            std::filesystem::path(folder.path) / it->path().lexically_relative(root);
        DTRAIN_CHECK(!same_file(o.identity, *held), o.named->flag, " ", o.named->path,
                     " is the same file as ", shown.lexically_normal().string(), " in ",
                     folder.flag, " ", folder.path,
                     ": refusing to overwrite an input (give the output another name)");
      }
    }
  }
}

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
