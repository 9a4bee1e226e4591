// dtrain's entry point: builds the command tree from the registered commands and maps every
// failure to a message on stderr and a non-zero exit. No engine logic lives in cli/.
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>

#include <CLI/CLI.hpp>

#include "app.h"
#include "dtrain/core/check.h"
#include "dtrain/core/system_memory.h"

int main(int argc, char** argv) {
  CLI::App app;
  dtrain::cli::build_app(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::bad_alloc&) {
    // From any rank thread too (the threads backend rethrows the first rank's error here).
    std::fflush(stdout);
    std::cerr << "error: " << dtrain::out_of_memory_message() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
