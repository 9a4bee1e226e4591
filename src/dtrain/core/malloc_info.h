// Which malloc this process runs on, and how many pages it has faulted in: the `dtrain`
// executable links jemalloc (a caching allocator, as PyTorch's CPU tuning guides recommend) so
// that the engine's per-micro-batch buffers reuse memory instead of faulting fresh pages each
// step; a library user's process keeps its own allocator. Both answers are read at run time.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain {

// "jemalloc 5.3.0-0-g54eaed1d8b56b1aa528be3bdd1877e59c56fa90c" when jemalloc serves malloc in
// this process (linked or preloaded: its mallctl is found), else "glibc 2.36 malloc" (or
// "system malloc" when neither is known).
std::string malloc_library();

// Minor page faults of this process so far (getrusage: every thread, all ranks of the threads
// backend): a page touched for the first time costs one, which on a virtual machine can take
// 10 us or more.
int64_t minor_page_faults();

}  // namespace dtrain
