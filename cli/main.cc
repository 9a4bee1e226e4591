// dtrain's entry point: builds the command tree from the registered commands and maps every
// failure to a message on stderr and a non-zero exit. No engine logic lives in cli/.
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <streambuf>

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
// Those arenas still purge freed pages as they age (dirty_decay_ms, 10 s by default), so buffers
// freed and taken again every unit of every step were faulted in afresh: bf16's fp32 working
// copies of each unit's weights and gradients spent 70% of the wide model's step in page faults
// and zero-filling (bf16 at 0.74x fp32's tokens/s; 2.52x with no purging, AMD EPYC Zen 5).
// Decay -1 keeps freed pages for reuse, as PyTorch's caching allocator does: the process holds
// its peak, which the first step reaches.
extern "C" {
const char* malloc_conf = "oversize_threshold:0,dirty_decay_ms:-1,muzzy_decay_ms:-1";
}

namespace {

// std::cout's buffer (C's stdout underneath, as std::cout is synchronised with stdio) passed
// through unchanged, keeping the reason of the first write that failed: a full disk fails a write
// in the middle of a long output, and errno is long overwritten when the command returns.
class ReasonKeepingBuffer : public std::streambuf {
 public:
  explicit ReasonKeepingBuffer(std::streambuf* inner) : inner_(inner) {}
  // std::cout outlives it (its last flush runs at exit): it gets its own buffer back.
  ~ReasonKeepingBuffer() override {
    if (std::cout.rdbuf() == this) std::cout.rdbuf(inner_);
  }
  int first_error() const { return first_error_.load(); }

 private:
  // Runs `write`; when `ok` says it failed, the errno it left is the reason kept (the first one).
  template <typename Write, typename Ok>
  auto kept(Write write, Ok ok) {
    const int before = errno;
    errno = 0;
    const auto result = write();
    if (ok(result)) {
      errno = before;
    } else {
      int none = 0;
      first_error_.compare_exchange_strong(none, errno);
    }
    return result;
  }

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) {
      return sync() == 0 ? traits_type::not_eof(c) : traits_type::eof();
    }
    return kept([&] { return inner_->sputc(traits_type::to_char_type(c)); },
                [](int_type r) { return !traits_type::eq_int_type(r, traits_type::eof()); });
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    return kept([&] { return inner_->sputn(s, n); }, [n](std::streamsize r) { return r == n; });
  }
  int sync() override {
    return kept([&] { return inner_->pubsync(); }, [](int r) { return r == 0; });
  }

 private:
  std::streambuf* inner_;
  std::atomic<int> first_error_{0};
};

// What the command printed on stdout reached it: flushed and checked here, once for every
// command, so that `dtrain plan --json > /dev/full` (a full disk, a closed descriptor) fails
// with the reason instead of exiting 0. False, after saying so on stderr, when it did not.
bool stdout_written(const ReasonKeepingBuffer& buffer) {
  errno = 0;
  std::cout.flush();
  const bool flushed = std::fflush(stdout) == 0;  // what C's printf left there too
  const int why = buffer.first_error() != 0 ? buffer.first_error() : errno;
  if (flushed && std::ferror(stdout) == 0 && std::cout.good()) return true;
  std::cerr << "error: stdout: cannot be written ("
            << (why != 0 ? std::strerror(why) : "a write failed")
            << "): the command's output is incomplete" << std::endl;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  static ReasonKeepingBuffer stdout_buffer(std::cout.rdbuf());
  std::cout.rdbuf(&stdout_buffer);
  CLI::App app;
  dtrain::cli::build_app(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and a stopped run (128 + the signal) print too.
    const int rc = app.exit(e);
    return stdout_written(stdout_buffer) || rc != 0 ? rc : 1;
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
  return stdout_written(stdout_buffer) ? 0 : 1;
}
