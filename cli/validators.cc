// at_least and kNotEmpty: the value is checked as text, before CLI11 converts it.
#include "validators.h"

#include <charconv>

namespace dtrain::cli {

CLI::Validator at_least(int64_t min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (ec != std::errc() || ptr != end) return "\"" + text + "\" is not an integer";
        if (value < min) {
          return "must be at least " + std::to_string(min) + " (got " + text + ")";
        }
        return "";
      },
      ">=" + std::to_string(min));
}

const CLI::Validator kNotEmpty(
    [](std::string& value) {
      return value.empty() ? std::string("is empty: give a path") : std::string();
    },
    "PATH");

}  // namespace dtrain::cli
