// The validators check the value as text, before CLI11 converts it (std::from_chars,
// std::strtod); check_fits_in_memory compares with core/system_memory.
#include "validators.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/core/recompute.h"
#include "dtrain/core/system_memory.h"
#include "dtrain/core/units.h"
#include "dtrain/model/precision.h"

namespace dtrain::cli {

const CLI::Validator kNotEmpty(
    [](std::string& value) {
      return value.empty() ? std::string("is empty: give a path") : std::string();
    },
    "PATH");

namespace {

// The value as the user typed it; an empty one shows as "".
std::string shown(const std::string& text) {
  return text.empty() ? std::string("\"\"") : text;
}

// 1e+12 rather than 1000000000000.000000, 0.5 rather than 0.500000.
std::string number(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

}  // namespace

CLI::Validator whole_number(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        const char* first = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
        const char* last = text.data() + text.size();
        int64_t value = 0;
        const auto [end, ec] = std::from_chars(first, last, value);
        if (ec == std::errc::result_out_of_range) {
          return text[0] == '-' ? str("must be at least ", min, " (got ", text, ")")
                                : str("must be at most ", max, " (got ", text, ")");
        }
        if (ec != std::errc() || end != last || first == last) {
          return str("must be a whole number (got ", shown(text), ")");
        }
        if (value < min) return str("must be at least ", min, " (got ", text, ")");
        if (value > max) return str("must be at most ", max, " (got ", text, ")");
        return "";
      },
      str("in [", min, ", ", max, "]"));
}

CLI::Validator integer_in_type_range(bool is_unsigned) {
  return CLI::Validator(
      [is_unsigned](std::string& text) -> std::string {
        const char* first = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
        const char* last = text.data() + text.size();
        std::errc ec{};
        if (is_unsigned) {
          uint64_t value = 0;
          ec = std::from_chars(first, last, value).ec;
        } else {
          int64_t value = 0;
          ec = std::from_chars(first, last, value).ec;
        }
        if (ec != std::errc::result_out_of_range) return "";
        return is_unsigned ? str("is out of range: a whole number must lie within 0 to ",
                                 std::numeric_limits<uint64_t>::max(), " (got ", text, ")")
                           : str("is out of range: a whole number must lie within +-",
                                 std::numeric_limits<int64_t>::max(), " (got ", text, ")");
      },
      "");
}

void refuse_out_of_range_integers(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    if (type == "INT" || type == "UINT") opt->check(integer_in_type_range(type == "UINT"));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    refuse_out_of_range_integers(*sub);
  }
}

CLI::Validator recompute_names() {
  std::vector<std::pair<std::string, Recompute>> names;
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    names.emplace_back(name(r), r);
  }
  const CLI::CheckedTransformer to_enum(names);
  return CLI::Validator(
      [names, to_enum](std::string& text) -> std::string {
        for (const auto& [known, value] : names) {
          if (text == known) return to_enum(text);  // the name becomes the enum's number
        }
        return str("must be none, selective or full (got ", shown(text), ")");
      },
      "none|selective|full");
}

CLI::Validator precision_names() {
  const std::vector<std::pair<std::string, model::Precision>> names = {
      {"fp32", model::Precision::fp32}, {"bf16", model::Precision::bf16}};
  const CLI::CheckedTransformer to_enum(names);
  return CLI::Validator(
      [names, to_enum](std::string& text) -> std::string {
        for (const auto& [known, value] : names) {
          if (text == known) return to_enum(text);
        }
        return str("must be fp32 or bf16 (got ", shown(text), ")");
      },
      "fp32|bf16");
}

CLI::Validator real_number(double min, double max, bool above_min) {
  return CLI::Validator(
      [min, max, above_min](std::string& text) -> std::string {
        const char* first = text.c_str();
        char* end = nullptr;
        const double value = std::strtod(first, &end);
        if (text.empty() || end != first + text.size()) {
          return str("must be a number (got ", shown(text), ")");
        }
        // strtod reads "inf", "nan" and 1e999 (as inf with ERANGE); none is a length or a rate.
        if (!std::isfinite(value)) return str("must be a finite number (got ", text, ")");
        if (above_min && value <= min) {
          return str("must be greater than ", number(min), " (got ", text, ")");
        }
        if (value < min) return str("must be at least ", number(min), " (got ", text, ")");
        if (value > max) return str("must be at most ", number(max), " (got ", text, ")");
        return "";
      },
      str(above_min ? "in (" : "in [", number(min), ", ", number(max), "]"));
}

void check_fits_in_memory(double bytes, std::string_view what) {
  const std::optional<AvailableMemory> available = available_memory();
  if (!available) return;
  DTRAIN_CHECK(bytes <= static_cast<double>(available->bytes), what, " needs ", format_bytes(bytes),
               " of memory, more than the ", format_bytes(static_cast<double>(available->bytes)),
               " available (", available->source, ")");
}

}  // namespace dtrain::cli
