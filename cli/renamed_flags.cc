// accept_old_spelling: a hidden option per old name that forwards its values to the new one;
// renamed_to lets apply_config_file map a renamed key.
#include "renamed_flags.h"

#include <iostream>
#include <string_view>

#include "dtrain/core/check.h"

namespace dtrain::cli {
namespace {

// An old spelling is a hidden option whose description names the new one: the mapping lives in
// the app itself (embedded runs build an app per run), not in a registry that could outlive it.
constexpr std::string_view kRenamedTo = "renamed to ";

}  // namespace

void accept_old_spelling(CLI::App& cmd, CLI::Option* option, const std::string& old_name) {
  const std::string new_name = option->get_name();
  CLI::Option* old = cmd.add_option(
      old_name,
      [option, old_name, new_name](const CLI::results_t& values) {
        if (option->count() > 0) {
          throw CLI::ValidationError(
              old_name, str("is the old spelling of ", new_name, ": give ", new_name, " once"));
        }
        std::cerr << "note: " << old_name << " is now " << new_name
                  << " (the old spelling is accepted until the next release)\n";
        option->add_result(values);
        option->run_callback();
        return true;
      },
      str(kRenamedTo, new_name));
  old->group("")->configurable(false);
  old->expected(option->get_expected_min(), option->get_expected_max());
}

CLI::Option* renamed_to(const CLI::App& cmd, const CLI::Option* op) {
  if (op == nullptr || !op->get_group().empty()) return nullptr;
  const std::string& what = op->get_description();
  if (what.rfind(kRenamedTo, 0) != 0) return nullptr;
  return const_cast<CLI::App&>(cmd).get_option_no_throw(what.substr(kRenamedTo.size()));
}

}  // namespace dtrain::cli
