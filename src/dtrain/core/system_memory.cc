// available_memory(): /proc/meminfo and the cgroup files, read as text.
#include "dtrain/core/system_memory.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace dtrain {
namespace {

std::optional<int64_t> read_number(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    return std::stoll(text);
  } catch (...) {
    return std::nullopt;
  }
}

std::optional<int64_t> mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t value = 0;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return value * 1024;  // the file counts kB (KiB)
  }
  return std::nullopt;
}

// Room under this process's cgroup limit, when the process sits under one.
std::optional<int64_t> cgroup_room() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.rfind(':');
    if (colon == std::string::npos) continue;
    const std::string path = line.substr(colon + 1);
    if (line.starts_with("0::")) {  // cgroup v2
      const std::string dir = "/sys/fs/cgroup" + path;
      const auto limit = read_number(dir + "/memory.max");
      const auto used = read_number(dir + "/memory.current");
      if (limit && used) return *limit - *used;
    } else if (line.find(":memory:") != std::string::npos) {  // cgroup v1
      const std::string dir = "/sys/fs/cgroup/memory" + path;
      const auto limit = read_number(dir + "/memory.limit_in_bytes");
      const auto used = read_number(dir + "/memory.usage_in_bytes");
      // v1 reports "no limit" as a page-rounded 2^63.
      if (limit && used && *limit < (int64_t{1} << 62)) return *limit - *used;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<AvailableMemory> available_memory() {
  std::optional<AvailableMemory> best;
  if (const auto a = mem_available()) best = AvailableMemory{*a, "MemAvailable in /proc/meminfo"};
  if (const auto c = cgroup_room(); c && (!best || *c < best->bytes)) {
    best = AvailableMemory{*c, "room under this process's cgroup memory limit"};
  }
  return best;
}

std::string format_gib(double bytes) {
  char buf[64];
  if (bytes >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024));
  }
  return buf;
}

}  // namespace dtrain
