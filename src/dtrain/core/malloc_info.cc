// malloc_library through jemalloc's mallctl("version") looked up by name (present only when
// jemalloc is in the process), else glibc's version; minor_page_faults through getrusage.
#include "dtrain/core/malloc_info.h"

#include <dlfcn.h>
#include <sys/resource.h>

#include <cstddef>

#if defined(__GLIBC__)
#include <gnu/libc-version.h>
#endif

namespace dtrain {

std::string malloc_library() {
  using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
  if (void* symbol = dlsym(RTLD_DEFAULT, "mallctl")) {
    const auto mallctl = reinterpret_cast<Mallctl>(symbol);
    const char* version = nullptr;
    size_t size = sizeof(version);
    if (mallctl("version", static_cast<void*>(&version), &size, nullptr, 0) == 0 &&
        version != nullptr) {
      return std::string("jemalloc ") + version;
    }
    return "jemalloc";
  }
#if defined(__GLIBC__)
  return std::string("glibc ") + gnu_get_libc_version() + " malloc";
#else
  return "system malloc";
#endif
}

int64_t minor_page_faults() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_minflt);
}

}  // namespace dtrain
