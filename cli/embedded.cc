// run_embedded: builds the command tree, parses `args` as main() would, and captures stdout.
#include "embedded.h"

#include <iostream>
#include <mutex>
#include <sstream>

#include "app.h"
#include "dtrain/core/check.h"

namespace dtrain::cli {
namespace {

std::mutex g_run_mutex;
const EmbeddedHooks* g_hooks = nullptr;

// Sends std::cout to `target` for its lifetime.
class CaptureStdout {
 public:
  explicit CaptureStdout(std::ostream& target) : old_(std::cout.rdbuf(target.rdbuf())) {}
  ~CaptureStdout() {
    std::cout.flush();
    std::cout.rdbuf(old_);
  }
  CaptureStdout(const CaptureStdout&) = delete;
  CaptureStdout& operator=(const CaptureStdout&) = delete;

 private:
  std::streambuf* old_;
};

std::string trim_newlines(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace

const EmbeddedHooks* embedded_hooks() {
  return g_hooks;
}

EmbeddedResult run_embedded(const std::vector<std::string>& args, const EmbeddedHooks& hooks) {
  const std::lock_guard<std::mutex> lock(g_run_mutex);
  std::vector<std::string> words = {"dtrain"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  EmbeddedResult result;
  std::ostringstream out, err;
  CLI::App app;
  build_app(app);
  g_hooks = &hooks;
  {
    CaptureStdout capture(out);
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      // --help and --version exit 0 with their text on stdout; the others print their message.
      result.exit_code = app.exit(e, std::cout, err);
    } catch (const std::exception& e) {
      result.exit_code = 1;
      err << e.what();
    }
  }
  g_hooks = nullptr;
  result.output = out.str();
  result.error = trim_newlines(err.str());
  return result;
}

}  // namespace dtrain::cli
