// The help text comes from CLI11's own formatter (App::help), called with the command path the
// user would have typed, so `dtrain help train` and `dtrain train --help` print the same lines.
#include "help_command.h"

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/core/check.h"

namespace dtrain::cli {
namespace {

// The names of `parent`'s commands, comma-separated, `help` itself left out.
std::string command_names(const CLI::App& parent) {
  std::string names;
  for (const CLI::App* c : parent.get_subcommands([](const CLI::App*) { return true; })) {
    if (c->get_name() == "help") continue;
    names += (names.empty() ? "" : ", ") + c->get_name();
  }
  return names;
}

}  // namespace

void add_help_command(CLI::App& app) {
  app.failure_message([](const CLI::App* top, const CLI::Error& e) -> std::string {
    const CLI::App* group = top;  // the deepest command given, e.g. `bench`
    while (!group->get_subcommands().empty()) group = group->get_subcommands().front();
    const std::vector<std::string> rest = group->remaining();
    if (e.get_name() != "RequiredError" || group->get_require_subcommand_min() == 0 ||
        rest.empty() || rest.front().starts_with("-")) {
      return CLI::FailureMessage::simple(top, e);
    }
    const std::string where = group == top ? "" : group->get_name() + " ";
    return str("error: `", where, rest.front(), "` is not a dtrain command; ",
               group == top ? "the commands" : group->get_name() + "'s",
               " are: ", command_names(*group), " (dtrain help ", where, "describes them)\n");
  });
  auto names = std::make_shared<std::vector<std::string>>();
  CLI::App* help = app.add_subcommand(
      "help",
      "Describe dtrain, or a command and its flags: dtrain help train, dtrain help bench "
      "plan (the same text as --help)");
  help->add_option("command", *names,
                   "The command to describe, and its subcommand for a group such as bench");
  CLI::App* top = &app;
  help->callback([top, names] {
    const CLI::App* target = top;
    std::string path = top->get_name();  // the program name, as --help prints it
    std::string typed;                   // the names so far, for the error
    for (const std::string& name : *names) {
      const CLI::App* parent = target;
      const std::string parent_commands = command_names(*parent);
      DTRAIN_CHECK(!parent_commands.empty(), "help: `", typed, "` has no subcommands (`", name,
                   "` is not one); its flags: dtrain help ", typed);
      target = nullptr;
      for (const CLI::App* c : parent->get_subcommands([](const CLI::App*) { return true; })) {
        if (c->get_name() == name) target = c;
      }
      DTRAIN_CHECK(target != nullptr, "help: `", typed.empty() ? "" : typed + " ", name,
                   "` is not a dtrain command; ", typed.empty() ? "the commands" : typed + "'s",
                   " are: ", parent_commands);
      if (parent != top) path += " " + parent->get_name();
      typed += (typed.empty() ? "" : " ") + name;
    }
    // The formatter directly: App::help would follow the selected command, which is `help`.
    const std::string shown = target == top ? path : path + " " + target->get_name();
    std::cout << target->get_formatter()->make_help(target, shown, CLI::AppFormatMode::Normal);
  });
}

}  // namespace dtrain::cli
