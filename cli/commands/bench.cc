// `dtrain bench <name>`: the benchmarks register under the "bench" group; this adds the parent.
#include "command_registry.h"

namespace dtrain::cli {
namespace {

void add_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench",
                                       "Benchmarks that print ratios measured in one run (dtrain's "
                                       "figures vs this machine's limits)");
  bench->require_subcommand(1);
  add_registered_commands("bench", *bench);
}

const CommandRegistration kRegistration("", add_bench);

}  // namespace
}  // namespace dtrain::cli
