// error_of(fn): the message of the dtrain::Error that fn throws, or "" when it throws none;
// tests then look for the flag and the reason in it.
#pragma once

#include <functional>
#include <string>

#include "dtrain/core/check.h"

namespace dtrain::test_support {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace dtrain::test_support
