// available_memory(): /proc/meminfo, the cgroup files and /proc/self/status read as text, and
// the process's resource limits.
#include "dtrain/core/system_memory.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "dtrain/core/check.h"

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

// A field of /proc/self/status in bytes ("VmSize:  123456 kB").
std::optional<int64_t> self_status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string key, unit;
  int64_t value = 0;
  while (in >> key) {
    if (key == field + ":" && in >> value) return value * 1024;
    std::getline(in, unit);
  }
  return std::nullopt;
}

// Room under a per-process resource limit: the soft limit less what the process holds of that
// resource now (`used_field` of /proc/self/status); nullopt when the limit is unlimited.
std::optional<AvailableMemory> rlimit_room(int resource, const std::string& used_field,
                                           const char* name) {
  rlimit limit{};
  if (::getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  const auto cap = static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, INT64_MAX));
  const int64_t used = self_status_bytes(used_field).value_or(0);
  return AvailableMemory{
      std::max<int64_t>(0, cap - used),
      str("room under ", name, " ", format_gib(static_cast<double>(cap)),
          ", of which this process has ", format_gib(static_cast<double>(used)), " mapped"),
      resource == RLIMIT_AS};
}

}  // namespace

std::optional<AvailableMemory> cgroup_memory_room(std::string_view proc_self_cgroup,
                                                  const std::string& root) {
  std::optional<AvailableMemory> best;
  std::istringstream in{std::string(proc_self_cgroup)};
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.rfind(':');
    if (colon == std::string::npos) continue;
    const std::string path = line.substr(colon + 1);
    std::string limit_file, used_file;
    if (line.starts_with("0::")) {  // cgroup v2
      limit_file = root + path + "/memory.max";
      used_file = root + path + "/memory.current";
    } else if (line.find(":memory:") != std::string::npos) {  // cgroup v1
      limit_file = root + "/memory" + path + "/memory.limit_in_bytes";
      used_file = root + "/memory" + path + "/memory.usage_in_bytes";
    } else {
      continue;
    }
    const auto limit = read_number(limit_file);
    const auto used = read_number(used_file);
    // v1 reports "no limit" as a page-rounded 2^63 (v2 as "max", which reads as none).
    if (!limit || !used || *limit >= (int64_t{1} << 62)) continue;
    AvailableMemory room{std::max<int64_t>(0, *limit - *used),
                         str("room under the cgroup memory limit ", limit_file, " ",
                             format_gib(static_cast<double>(*limit)), ", of which ",
                             format_gib(static_cast<double>(*used)), " is used")};
    if (!best || room.bytes < best->bytes) best = std::move(room);
  }
  return best;
}

std::optional<AvailableMemory> available_memory() {
  std::optional<AvailableMemory> best;
  const auto take = [&](std::optional<AvailableMemory> candidate) {
    if (candidate && (!best || candidate->bytes < best->bytes)) best = std::move(candidate);
  };
  if (const auto a = mem_available()) best = AvailableMemory{*a, "MemAvailable in /proc/meminfo"};
  {
    std::ifstream in("/proc/self/cgroup");
    std::stringstream text;
    text << in.rdbuf();
    take(cgroup_memory_room(text.str(), "/sys/fs/cgroup"));
  }
  // ulimit -v caps the address space (every mapping: thread stacks and reservations count),
  // ulimit -d the data segment and private anonymous mappings (Linux >= 4.7): malloc fails at
  // either long before the machine runs out.
  take(rlimit_room(RLIMIT_AS, "VmSize", "the address-space limit (ulimit -v, RLIMIT_AS)"));
  take(rlimit_room(RLIMIT_DATA, "VmData", "the data limit (ulimit -d, RLIMIT_DATA)"));
  return best;
}

std::string out_of_memory_message() {
  std::string text =
      "out of memory: an allocation failed (std::bad_alloc); the job is larger than this "
      "process may take";
  if (const std::optional<AvailableMemory> room = available_memory()) {
    text +=
        str(" (now ", format_gib(static_cast<double>(room->bytes)), " left: ", room->source, ")");
  }
  return text +
         "; use a smaller --global-batch or model, shard it with --zero, --pp or --tp, or raise "
         "the "
         "limit";
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
