// `dtrain plan` as one function: its flags as a JSON object in, its checks and its report out.
// The command line (cli/commands/plan.cc) and the web page (web/, the same sources compiled to
// WebAssembly) both read their flags through here, so a plan asked for either way is checked by
// the same code, fails with the same message and prints the same figures.
//
// The request names each flag given, without its dashes, with the value typed: numbers for the
// numeric flags, strings for the named ones, true for --search and --sequence-parallel, an array
// for --tokens-per-expert. A flag left out takes the command's default:
//   {"model": "llama2-7b", "cluster": "1x8xH100", "tp": 2, "zero": 1}
//   {"layers": 32, "hidden": 4096, "heads": 32, "vocab": 32000, "seq-length": 4096,
//    "global-batch": 512, "cluster": "2x8xA100", "search": true, "top": 10}
// "cluster" is a NODESxGPUSxTYPE spec, or a cluster file's JSON inline (what --print-cluster and
// `dtrain calibrate` write). --largest-model, --offload and --print-cluster stay the command's.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "dtrain/plan/planner.h"

namespace dtrain::plan {

// Each reader throws Error with the message `dtrain plan` prints for the flag at fault.
ModelShape model_from_flags(const nlohmann::json& flags);
Cluster cluster_from_flags(const nlohmann::json& flags);
Training training_from_flags(const nlohmann::json& flags, const ModelShape& model);
Layout layout_from_flags(const nlohmann::json& flags, const PlanInput& input);
SearchConstraints search_constraints_from_flags(const nlohmann::json& flags);

// The checks on the flags' combination that come before any other (--top without --search, a
// measured rate with --search).
void check_plan_flags(const nlohmann::json& flags);

// What `dtrain plan` answers (no --largest-model, --offload or --print-cluster): one layout's
// plan, or with "search" the search's result.
struct PlanAnswer {
  nlohmann::json request;  // the flags as given (the report echoes them as "request")
  PlanInput input;
  std::optional<Plan> plan;
  std::optional<SearchResult> search;
};
PlanAnswer answer_plan(const nlohmann::json& flags);
// The flags of a request, or of the "request" a report echoes: a report answers itself again.
const nlohmann::json& request_of(const nlohmann::json& request_or_report);
// The report `dtrain plan --json` prints, less its "build" object; its "request" is the flags.
nlohmann::json answer_json(const PlanAnswer& answer);
// The table `dtrain plan` prints.
std::string answer_text(const PlanAnswer& answer);

// The whole request as text, for callers without exceptions across their boundary (the
// WebAssembly module): the report as JSON text, or {"error": "<the message>"}. A report
// (`dtrain plan --json`'s output, or this function's) is a request too: its "request" is read.
std::string plan_request(std::string_view request_json);

}  // namespace dtrain::plan
