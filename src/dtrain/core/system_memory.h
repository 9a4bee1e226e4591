// How much memory this process may still take: what a run's planned bytes are compared with
// before anything is allocated, so a run too big for the machine is refused with the figures
// instead of dying in std::bad_alloc (or the kernel's OOM killer) halfway through.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtrain {

struct AvailableMemory {
  int64_t bytes = 0;
  std::string source;  // "MemAvailable in /proc/meminfo", "room under the cgroup memory limit ..."
  // The binding limit counts address space (ulimit -v), where every thread's stack and every
  // reserved buffer counts in full, touched or not.
  bool address_space = false;
};

// The smallest of the kernel's MemAvailable, the room left under this process's cgroup
// (v2 memory.max - memory.current, or v1 limit_in_bytes - usage_in_bytes), and the room under
// its resource limits (RLIMIT_AS - VmSize, RLIMIT_DATA - VmData); nullopt when none can be read
// (then no check is possible).
std::optional<AvailableMemory> available_memory();

// The room under this process's cgroup memory limits: for each hierarchy of `proc_self_cgroup`
// (the text of /proc/self/cgroup) with a memory limit under the cgroup file system mounted at
// `root` (/sys/fs/cgroup), v2's memory.max - memory.current ("0::/path") or v1's
// memory/path/memory.limit_in_bytes - memory.usage_in_bytes ("N:memory:/path"), the smallest;
// nullopt when no limit is set or none can be read. `source` names the limit's file and figures.
// The two arguments let a test point it at a fake hierarchy.
std::optional<AvailableMemory> cgroup_memory_room(std::string_view proc_self_cgroup,
                                                  const std::string& root);

// What a std::bad_alloc means to the user: the job outgrew this process's memory, with the
// room and the limit that binds now, and what to change.
std::string out_of_memory_message();

// "37.2 GiB", "512.0 MiB": the binary units people compare with `free -h`.
std::string format_gib(double bytes);

}  // namespace dtrain
