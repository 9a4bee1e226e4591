// The registry behind CommandRegistration: a function-local static, so registration order
// across translation units does not matter.
#include "command_registry.h"

#include <string>
#include <vector>

namespace dtrain::cli {
namespace {

struct Entry {
  std::string group;
  AddCommand add;
};

std::vector<Entry>& registry() {
  static std::vector<Entry> entries;
  return entries;
}

}  // namespace

CommandRegistration::CommandRegistration(std::string_view group, AddCommand add) {
  registry().push_back({std::string(group), add});
}

void add_registered_commands(std::string_view group, CLI::App& parent) {
  for (const Entry& e : registry()) {
    if (e.group == group) e.add(parent);
  }
}

}  // namespace dtrain::cli
