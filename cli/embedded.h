// `dtrain ARGS...` run inside this process, for the Python module: the same parser, checks,
// messages and JSON as the command line, with stdout captured and errors returned instead of
// printed. One run at a time (stdout is the process's).
#pragma once

#include <string>
#include <vector>

#include "dtrain/run/trainer.h"

namespace dtrain::cli {

struct EmbeddedHooks {
  // `dtrain train`: rank 0's steps and evaluations go here instead of the progress printer.
  train::TrainObserver* observer = nullptr;
};

struct EmbeddedResult {
  int exit_code = 0;   // what the command line would exit with
  std::string output;  // what the command printed on stdout
  std::string error;   // the message the command line prints on stderr ("error: " removed)
};

// `args` are the words after `dtrain` ({"plan", "--model", "gpt3-175b", "--json"}).
EmbeddedResult run_embedded(const std::vector<std::string>& args, const EmbeddedHooks& hooks = {});

// The hooks of the run in progress, or nullptr outside run_embedded (the command line).
const EmbeddedHooks* embedded_hooks();

}  // namespace dtrain::cli
