// What a pipeline-parallel run is asked for (PipelineSetup, from `dtrain train --pp
// --microbatches --schedule --chunks --stage-layers --trace --timeline`) and what it reports:
// per stage its blocks, model-state memory and peak in-flight activations beside the checker's
// count, and the measured bubble of the last step beside the predicted one.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dtrain::train {

struct PipelineSetup {
  int pp = 1;                     // P: pipeline stages (rank threads)
  int microbatches = 1;           // M: the global batch splits into M equal micro-batches
  std::string schedule = "1f1b";  // gpipe, 1f1b, interleaved, zb-h1
  int chunks = 0;                 // v; 0: 2 for interleaved, 1 otherwise
  std::string stage_layers;       // explicit split "3,3,2"; empty: balanced
  std::string trace_path;         // Chrome / Perfetto trace of the last step
  std::string timeline_path;      // SVG timeline of the last step
  // Whether the run needs the pipeline engine (any pipeline flag away from its default).
  bool enabled() const {
    return pp != 1 || microbatches != 1 || schedule != "1f1b" || chunks != 0 ||
           !stage_layers.empty() || !trace_path.empty() || !timeline_path.empty();
  }
};

struct PipelineStageRow {
  int rank = 0;
  std::string layers;        // "0-3", or per chunk "0-1,4-5"
  int64_t param_count = 0;   // elements this stage holds (wte on both ends when P > 1)
  int64_t params_bytes = 0;  // current bytes per tag after the last step
  int64_t grads_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t activations_peak_bytes = 0;       // the tracker's peak: workspace + in flight
  int64_t microbatch_activation_bytes = 0;  // one micro-batch's activations, all chunks
  int64_t peak_inflight_bytes = 0;          // measured, the last step
  double measured_inflight = 0;             // peak_inflight_bytes / microbatch_activation_bytes
  double checker_inflight = 0;     // the checker's peak in-flight micro-batches (program order;
                                   // ZB-H1: its weight stash, F until W)
  double busy_ms = 0;              // compute time in the last step
  int64_t bytes_sent = 0;          // activations and gradients sent in the last step
  int64_t formula_bytes_sent = 0;  // sends in the schedule x plan::pp_bytes_per_microbatch
};

struct PipelineReport {
  PipelineSetup setup;
  int chunks = 1;                        // v as run
  int64_t micro_batch = 0;               // b: rows per micro-batch
  std::vector<PipelineStageRow> stages;  // (P)
  // The last training step (measured), and the bubble's mean over every step but the first.
  double makespan_ms = 0;
  double measured_bubble = 0;       // fraction of the makespan, defined as the checker's
  double mean_measured_bubble = 0;  // over steps 2..K (step 1 when K = 1)
  double forward_ms = 0, backward_ms = 0, weight_ms = 0;  // per micro-batch and stage (F, B, W)
  // Predicted with the measured F, B, W: plan::pipeline_bubble's closed form, and the
  // checker's simulation of this very schedule.
  double predicted_bubble = 0;
  double simulated_bubble = 0;
  bool weight_gradient_split = false;  // ZB-H1: B ran the input gradients, W the linears' weights
};

// The pipeline section of `dtrain train`'s summary, and the same figures as JSON.
void print_pipeline_report(std::ostream& out, const PipelineReport& report);
nlohmann::json pipeline_report_to_json(const PipelineReport& report);

}  // namespace dtrain::train
