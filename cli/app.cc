// build_app: the top level of `dtrain` (its description, --version, the commands).
#include "app.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/core/check.h"

#include "build_info.h"
#include "command_registry.h"
#include "config_text.h"
#include "help_command.h"
#include "renamed_flags.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

// The values of `--config FILE` for `cmd`, applied as CLI11 applies a main app's config file
// (which it reads for the main app only): each key is a long flag name ('_' or '-'), a flag
// given on the command line keeps its value, validators run, and a key that is no flag of the
// command is an error naming it.
void apply_config_file(CLI::App& cmd, const std::string& path) {
  const ConfigLines lines = check_config_text(path);  // what CLI11's reader would misread
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::FileError&) {
    throw Error(str("--config ", path, ": cannot be read (no such file, or not a file)"));
  } catch (const CLI::ParseError& e) {
    throw Error(str("--config ", path, ": ", e.what()));
  }
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section open / close marks
    std::string name = item.name;
    std::replace(name.begin(), name.end(), '_', '-');
    std::string full = item.fullname();
    std::replace(full.begin(), full.end(), '_', '-');
    const auto line = lines.find(full);
    const std::string where =
        str("--config ", path, line == lines.end() ? std::string() : str(" line ", line->second));
    CLI::Option* op = cmd.get_option_no_throw("--" + name);
    if (CLI::Option* now = renamed_to(cmd, op)) {
      std::cerr << "note: " << where << ": '" << item.fullname() << "' is now '"
                << now->get_lnames().front()
                << "' (the old key is accepted until the next release)\n";
      op = now;
      name = now->get_lnames().front();
    }
    DTRAIN_CHECK(op != nullptr && op->get_configurable(), where, ": '", item.fullname(),
                 "' is not a flag of `", cmd.get_name(),
                 "` (keys are its long flag names, see --help)");
    if (!op->empty()) continue;  // the command line wins
    DTRAIN_CHECK(item.inputs.size() <= 1 || op->get_expected_max() > 1, where, ": ", name,
                 " takes one value, the file gives ", item.inputs.size(), " (",
                 CLI::detail::join(item.inputs, ", "), ")");
    try {
      if (op->get_expected_min() == 0) {
        const std::string value = item.inputs.empty() ? "true" : item.inputs.front();
        op->add_result(op->get_flag_value(name, value));
      } else {
        op->add_result(item.inputs);
      }
      op->run_callback();
    } catch (const CLI::ParseError& e) {
      throw Error(str(where, ": ", e.what()));  // the flag's own words, and where it was set
    }
  }
}

// A TOML value: numbers and true/false as they are, anything else quoted.
std::string toml_value(const std::string& v) {
  if (v == "true" || v == "false") return v;
  char* end = nullptr;
  if (!v.empty()) {
    std::strtod(v.c_str(), &end);
    if (end != nullptr && *end == '\0') return v;
  }
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// `cmd`'s effective flags as TOML, one key a line: every flag given (command line or file) and
// every flag with a default; flags without a value (an unset optional) and unset switches are
// left out, so the text reads back as the same run.
std::string dump_config(const CLI::App& cmd) {
  std::string out;
  for (const CLI::Option* op : cmd.get_options()) {
    if (!op->nonpositional() || !op->get_configurable() || op->get_lnames().empty()) continue;
    const std::string& name = op->get_lnames().front();
    if (name == "help") continue;
    std::vector<std::string> values = op->results();
    if (op->count() == 0) {
      if (op->get_default_str().empty() || op->get_expected_min() == 0) continue;
      values = {op->get_default_str()};
    }
    if (op->get_expected_min() == 0) {  // a switch: present means on
      out += name + " = " + (values.empty() || values.back() != "false" ? "true" : "false") + "\n";
      continue;
    }
    if (values.size() == 1) {
      out += name + " = " + toml_value(values.front()) + "\n";
      continue;
    }
    out += name + " = [";
    for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + toml_value(values[i]);
    out += "]\n";
  }
  return out;
}

// --config FILE and --dump-config on every command that runs something (a group such as `bench`
// passes them to its commands). A flag given on the command line wins over the file.
// --dump-config prints the command's effective flags in the file's format, so a run's settings
// can be saved and replayed.
void add_config_options(CLI::App& cmd) {
  const std::vector<CLI::App*> commands = cmd.get_subcommands([](CLI::App*) { return true; });
  if (!commands.empty()) {
    for (CLI::App* c : commands) add_config_options(*c);
    return;
  }
  auto path = std::make_shared<std::string>();
  CLI::Option* config =
      cmd.add_option("--config", *path,
                     "Read flags from a TOML file (key = value, keys: the long flag names, e.g. "
                     "steps = 300); a flag on the command line wins over the file")
          ->configurable(false);
  CLI::Option* dump = cmd.add_flag("--dump-config")
                          ->description(
                              "Print the effective flags (file, command line and defaults) as "
                              "TOML for --config, and exit without running")
                          ->configurable(false);
  CLI::App* self = &cmd;
  cmd.parse_complete_callback([self, config, dump, path] {
    if (config->count() > 0) apply_config_file(*self, *path);
    if (dump->count() == 0) return;
    std::cout << dump_config(*self);
    throw CLI::Success();
  });
}

}  // namespace

void build_app(CLI::App& app) {
  app.description(
      "dtrain: distributed transformer training on CPU ranks (data, tensor, pipeline and "
      "sharded parallelism) and a planner that sizes real cluster runs.");
  app.set_version_flag(
      "--version", [] { return build_info_text(); },
      "Print the version, commit, build type, BLAS and MPI libraries and exit");
  app.require_subcommand(1);
  app.fallthrough(false);
  add_registered_commands("", app);
  add_config_options(app);
  add_help_command(app);
  refuse_out_of_range_integers(app);
}

}  // namespace dtrain::cli
