// check_config_text: one pass over a --config file's lines with the grammar CLI11's TOML/INI
// reader accepts (CLI/Config.hpp from_config), refusing what it would misread.
#include "config_text.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "dtrain/core/check.h"

namespace dtrain::cli {
namespace {

// A --config file is a few lines of flags; anything larger is not one.
constexpr std::uintmax_t kMaxConfigBytes = std::uintmax_t{1} << 20;

std::string_view trimmed(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const size_t last = s.find_last_not_of(" \t\r");
  return s.substr(first, last - first + 1);
}

std::string unquoted(std::string_view s) {
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front()) {
    return std::string(s.substr(1, s.size() - 2));
  }
  return std::string(s);
}

// A bare whole number (digits with an optional sign) that int64 cannot hold.
bool out_of_int64_range(std::string_view value) {
  std::string_view digits = value;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) digits.remove_prefix(1);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return false;
  }
  int64_t parsed = 0;
  const char* first = value.data() + (value.front() == '+' ? 1 : 0);
  const auto [end, ec] = std::from_chars(first, value.data() + value.size(), parsed);
  return ec == std::errc::result_out_of_range;
}

}  // namespace

ConfigLines check_config_text(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  DTRAIN_CHECK(fs::exists(st), "--config ", path, ": no such file");
  DTRAIN_CHECK(!fs::is_directory(st), "--config ", path,
               ": is a directory; give a TOML file (key = value lines)");
  DTRAIN_CHECK(fs::is_regular_file(st), "--config ", path,
               ": not a regular file (a device, pipe or socket); give a TOML file");
  const std::uintmax_t size = fs::file_size(path, ec);
  DTRAIN_CHECK(!ec && size <= kMaxConfigBytes, "--config ", path, ": ", size,
               " bytes; a config file is a few lines of key = value (at most ", kMaxConfigBytes,
               " bytes)");
  std::ifstream in(path, std::ios::binary);
  DTRAIN_CHECK(in.good(), "--config ", path, ": cannot be read");
  std::ostringstream whole;
  whole << in.rdbuf();
  const std::string text = whole.str();
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 && c != '\n' && c != '\r' && c != '\t') {
      throw Error(str("--config ", path, ": a binary file, not TOML text (byte ", int{c},
                      " at offset ", i, ")"));
    }
  }

  ConfigLines lines;
  std::string section;  // "" outside any [section]
  std::istringstream rows(text);
  std::string row;
  int line = 0;
  const auto where = [&](int at) { return str("--config ", path, " line ", at, ": "); };
  while (std::getline(rows, row)) {
    ++line;
    const std::string_view s = trimmed(row);
    if (s.empty() || s.front() == '#' || s.front() == ';') continue;
    if (s.front() == '[') {
      DTRAIN_CHECK(s.back() == ']' && s.size() > 2, where(line), "'", s,
                   "' opens a [section] it does not close");
      std::string name(s.substr(1, s.size() - 2));
      if (name.size() > 1 && name.front() == '[' && name.back() == ']') {
        name = name.substr(1, name.size() - 2);  // TOML's [[table]]
      }
      section = name == "default" ? "" : name;
      continue;
    }
    const size_t eq = s.find('=');
    std::string key = unquoted(trimmed(s.substr(0, eq)));
    if (eq == std::string_view::npos) {
      const size_t hash = key.find('#');
      if (hash != std::string::npos) key = std::string(trimmed(key.substr(0, hash)));
    }
    DTRAIN_CHECK(!key.empty(), where(line), "'", s, "' has no key before '='");
    DTRAIN_CHECK(key.find_first_of(" \t") == std::string::npos, where(line), "'", s,
                 "' is not `key = value` (keys are long flag names, without spaces)");
    if (eq != std::string_view::npos) {
      std::string_view value = trimmed(s.substr(eq + 1));
      const size_t hash = value.find('#');
      if (hash != std::string_view::npos) value = trimmed(value.substr(0, hash));
      DTRAIN_CHECK(!value.empty(), where(line), key, " has no value after '='");
      if (value.front() == '[') {
        // An array may run over several lines, up to its ']'.
        std::string array(value);
        const int start = line;
        while (array.back() != ']' && std::getline(rows, row)) {
          ++line;
          array += std::string(trimmed(row));
        }
        DTRAIN_CHECK(array.back() == ']', where(start), key, " = [ is not closed by a ']'");
      } else if (value.front() == '"' || value.front() == '\'') {
        DTRAIN_CHECK(value.size() >= 2 && value.back() == value.front(), where(line), key, " = ",
                     value, ": the quoted text is not closed, or text follows the quote");
      } else {
        DTRAIN_CHECK(value.find_first_of(" \t=") == std::string_view::npos, where(line), "'", s,
                     "' is not `key = value`: one value a key (quote text with spaces, write "
                     "lists as [a, b])");
        DTRAIN_CHECK(!out_of_int64_range(value), where(line), key, " = ", value,
                     " is out of range: a whole number must lie within +-9223372036854775807");
      }
    }
    std::string full = section.empty() ? key : section + "." + key;
    std::replace(full.begin(), full.end(), '_', '-');  // steps_x and steps-x are one flag
    const auto [it, inserted] = lines.emplace(full, line);
    DTRAIN_CHECK(inserted, where(line), key, " is set again (first on line ", it->second,
                 "); give each key once");
  }
  return lines;
}

}  // namespace dtrain::cli
