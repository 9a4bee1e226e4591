// dtrain's entry point: builds the command tree from the registered commands and maps every
// failure to a message on stderr and a non-zero exit. No engine logic lives in cli/.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>

#include <CLI/CLI.hpp>

#include "app.h"
#include "dtrain/core/check.h"
#include "dtrain/core/system_memory.h"

// jemalloc's options, read from this symbol when the executable links it (cli/CMakeLists.txt;
// ignored under glibc's malloc; the MALLOC_CONF variable still adds to them). By default jemalloc
// serves each request of 8 MiB or more from an arena that hands the pages straight back to the
// kernel when freed, so a model whose micro-batch activations or pipeline stashes reach that
// size faulted them in again every step (thousands of page faults a step, a 2x slower step on a
// virtual machine). oversize_threshold 0 keeps them in the ordinary arenas, reused step after step.
extern "C" {
const char* malloc_conf = "oversize_threshold:0";
}

int main(int argc, char** argv) {
  CLI::App app;
  dtrain::cli::build_app(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::bad_alloc&) {
    // From any rank thread too (the threads backend rethrows the first rank's error here).
    std::cout.flush();
    std::cerr << "error: " << dtrain::out_of_memory_message() << std::endl;
    // Out of memory, exit() can hang: OpenBLAS's exit handler joins its worker threads, and a
    // worker whose buffer could not be mapped (ulimit -v) waits for it forever.
    std::_Exit(1);
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "error: " << e.what() << std::endl;
    std::_Exit(1);  // as above: a refused run under a tight ulimit -v must still end
  }
  return 0;
}
