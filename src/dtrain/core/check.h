// Errors and precondition checks. Every failure in the library is a dtrain::Error whose text
// says what was wrong, with the values involved (`--tp 3 does not divide n_head 4`).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace dtrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates its arguments with operator<<: str("rank ", 3, " failed").
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

namespace detail {
[[noreturn]] void check_failed(const char* condition, const char* file, int line,
                               const std::string& message);
}  // namespace detail

}  // namespace dtrain

// DTRAIN_CHECK(cond, parts...): throws dtrain::Error with str(parts...) when cond is false.
// Without parts the message names the condition and its source location.
#define DTRAIN_CHECK(cond, ...)                                                              \
  do {                                                                                       \
    if (!(cond)) [[unlikely]] {                                                              \
      ::dtrain::detail::check_failed(#cond, __FILE__, __LINE__, ::dtrain::str(__VA_ARGS__)); \
    }                                                                                        \
  } while (0)
