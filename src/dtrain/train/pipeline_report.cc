// print_pipeline_report / pipeline_report_to_json: per stage memory, in-flight activations and
// traffic beside their formulas, and the measured bubble beside the predicted one.
#include "dtrain/train/pipeline_report.h"

#include <cstdio>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "dtrain/core/units.h"
#include "dtrain/train/text_table.h"

namespace dtrain::train {
namespace {

std::string bytes(int64_t b) {
  return format_bytes(static_cast<double>(b));
}

}  // namespace

void print_pipeline_report(std::ostream& out, const PipelineReport& p) {
  const PipelineSetup& s = p.setup;
  out << "\n  pipeline: " << s.schedule << " on " << s.pp << " stages, " << s.microbatches
      << " micro-batches of " << p.micro_batch << ", " << p.chunks
      << (p.chunks == 1 ? " model chunk" : " model chunks") << " per stage\n";
  out << "  stage  blocks      params      grads  optimizer  act. peak  1 micro-b.  in flight"
         " (checker)  busy ms  sent (formula)\n";
  for (const PipelineStageRow& r : p.stages) {
    char line[256];
    std::snprintf(
        line, sizeof(line), "  %-6d %-8s %10s %10s %10s %10s %11s %10s (%.2f) %8s  ", r.rank,
        r.layers.c_str(), bytes(r.params_bytes).c_str(), bytes(r.grads_bytes).c_str(),
        bytes(r.optimizer_bytes).c_str(), bytes(r.activations_peak_bytes).c_str(),
        bytes(r.microbatch_activation_bytes).c_str(), fixed(r.measured_inflight, 2).c_str(),
        r.checker_inflight, fixed(r.busy_ms, 3).c_str());
    out << line << bytes(r.bytes_sent) << " (" << bytes(r.formula_bytes_sent) << ")\n";
  }
  out << "  (act. peak: workspace + in-flight micro-batches; in flight: measured peak bytes / one\n"
         "   micro-batch, beside the checker's count; sent: activations + gradients, beside the\n"
         "   schedule's sends x plan::pp_bytes_per_microbatch)\n";
  out << "  bubble, measured: " << fixed(100 * p.measured_bubble, 1) << " % of the last step's "
      << fixed(p.makespan_ms, 3) << " ms (mean over the steps after the first "
      << fixed(100 * p.mean_measured_bubble, 1) << " %)\n";
  out << "  bubble, predicted: " << fixed(100 * p.predicted_bubble, 1)
      << " % plan::pipeline_bubble, " << fixed(100 * p.simulated_bubble, 1)
      << " % checker simulation (with the measured F " << fixed(p.forward_ms, 3) << ", B "
      << fixed(p.backward_ms, 3) << ", W " << fixed(p.weight_ms, 3)
      << " ms per micro-batch and stage)\n";
  if (p.weight_gradient_split) {
    out << "  zb-h1: each B ran the input gradients only and each W the four linears' weight "
           "gradients, from the output gradients kept per micro-batch until W (counted in "
           "the activations)\n";
  }
  if (!s.trace_path.empty()) out << "  wrote " << s.trace_path << " (Chrome / Perfetto trace)\n";
  if (!s.timeline_path.empty()) out << "  wrote " << s.timeline_path << " (SVG timeline)\n";
}

nlohmann::json pipeline_report_to_json(const PipelineReport& p) {
  nlohmann::json stages = nlohmann::json::array();
  for (const PipelineStageRow& r : p.stages) {
    stages.push_back({{"rank", r.rank},
                      {"layers", r.layers},
                      {"param_count", r.param_count},
                      {"params_bytes", r.params_bytes},
                      {"grads_bytes", r.grads_bytes},
                      {"optimizer_bytes", r.optimizer_bytes},
                      {"activations_peak_bytes", r.activations_peak_bytes},
                      {"microbatch_activation_bytes", r.microbatch_activation_bytes},
                      {"peak_inflight_bytes", r.peak_inflight_bytes},
                      {"measured_inflight", r.measured_inflight},
                      {"checker_inflight", r.checker_inflight},
                      {"busy_ms", r.busy_ms},
                      {"bytes_sent", r.bytes_sent},
                      {"formula_bytes_sent", r.formula_bytes_sent}});
  }
  return {{"pp", p.setup.pp},
          {"microbatches", p.setup.microbatches},
          {"schedule", p.setup.schedule},
          {"chunks", p.chunks},
          {"micro_batch", p.micro_batch},
          {"stages", stages},
          {"makespan_ms", p.makespan_ms},
          {"measured_bubble", p.measured_bubble},
          {"mean_measured_bubble", p.mean_measured_bubble},
          {"predicted_bubble", p.predicted_bubble},
          {"simulated_bubble", p.simulated_bubble},
          {"forward_ms", p.forward_ms},
          {"backward_ms", p.backward_ms},
          {"weight_ms", p.weight_ms},
          {"weight_gradient_split", p.weight_gradient_split},
          {"trace", p.setup.trace_path},
          {"timeline", p.setup.timeline_path}};
}

}  // namespace dtrain::train
