// How the checkpoint fuzz targets and their seed writer pack a checkpoint into one input: the
// manifest's text, then each shard file, each preceded by kFileSeparator (NUL bytes never
// occur in a manifest, so the fuzzer can grow, cut and splice files freely).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::fuzz {

inline constexpr std::string_view kFileSeparator{"\0--shard-file--\0", 16};

struct Bundle {
  std::string_view manifest;
  std::vector<std::span<const std::byte>> files;
};

inline Bundle split_bundle(std::string_view input) {
  Bundle b;
  size_t at = input.find(kFileSeparator);
  b.manifest = input.substr(0, at);
  while (at != std::string_view::npos) {
    const size_t start = at + kFileSeparator.size();
    at = input.find(kFileSeparator, start);
    const std::string_view file =
        input.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start);
    b.files.push_back(std::as_bytes(std::span<const char>(file.data(), file.size())));
  }
  return b;
}

inline std::string join_bundle(std::string_view manifest, const std::vector<std::string>& files) {
  std::string out(manifest);
  for (const std::string& f : files) {
    out += kFileSeparator;
    out += f;
  }
  return out;
}

}  // namespace dtrain::fuzz
