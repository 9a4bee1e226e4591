// largest_model_report, largest_shape_report and offload_report: the tables and JSON of
// `dtrain plan --largest-model` and `--offload`, moved here from the command so that every
// report printer of the planner lives in plan/.
#include "dtrain/plan/sizing_report.h"

#include "dtrain/core/check.h"
#include "dtrain/cost/offload.h"
#include "dtrain/machine/format.h"
#include "dtrain/plan/largest_model.h"

namespace dtrain::plan {

SizingReport largest_model_report(const Cluster& c, int dp, int mp, StateBytes bytes) {
  nlohmann::json rows = nlohmann::json::array();
  std::string table;
  const char* names[] = {"0 (plain DP)", "1 (P_os)", "2 (P_os+g)", "3 (P_os+g+p)"};
  for (int zero = 0; zero <= 3; ++zero) {
    const int64_t psi = largest_model_params(c.gpu.memory_bytes, dp, mp, zero, bytes);
    const double per_param =
        psi > 0 ? static_cast<double>(model_state_bytes(psi / mp, dp, zero, bytes).total()) /
                      static_cast<double>(psi / mp)
                : 0.0;
    rows.push_back({{"zero_stage", zero}, {"params", psi}, {"bytes_per_param_per_gpu", per_param}});
    table += str("  ", pad_right(names[zero], 16), pad_right(format_fixed(per_param, 3), 28),
                 format_params(static_cast<double>(psi)), "\n");
  }
  SizingReport r;
  r.json = {{"memory_bytes", c.gpu.memory_bytes},
            {"dp", dp},
            {"model_parallel", mp},
            {"state_bytes", bytes.total()},
            {"largest_model", rows}};
  r.text = str("largest model whose states fit ", format_gb(c.gpu.memory_bytes),
               " per GPU (GB = 10^9 bytes; model states only: activations, buffers and "
               "fragmentation not counted)\n",
               "  dp=", dp, ", model parallel tp x pp = ", mp, ", ", bytes.param, "+", bytes.grad,
               "+", bytes.optimizer, " = ", bytes.total(),
               " B/param of model states (Rajbhandari et al. 2020, Table 2)\n\n", "  ",
               pad_right("ZeRO stage", 16), pad_right("bytes per parameter per GPU", 28),
               "largest model\n", table);
  return r;
}

SizingReport largest_shape_report(const PlanInput& in, const Layout& base,
                                  const std::vector<int>& zero_stages, bool zero_given) {
  std::string layout_text = describe(base);
  if (!zero_given) layout_text.replace(layout_text.find(" zero=0"), 7, " zero=(each row)");
  nlohmann::json rows = nlohmann::json::array();
  std::string table;
  for (int zero : zero_stages) {
    Layout l = base;
    l.zero_stage = zero;
    const LargestShape r = largest_model_shape(in, l);
    const MemoryBreakdown& mem = r.memory;
    rows.push_back({{"zero_stage", zero},
                    {"hidden", r.model.hidden},
                    {"heads", r.model.hidden > 0 ? r.model.heads : 0},
                    {"params", r.params},
                    {"total_bytes", mem.total()},
                    {"activations_bytes", mem.activations},
                    {"states_bytes", mem.params + mem.grads + mem.optimizer},
                    {"next_width_total_bytes", r.too_wide.total()}});
    table += str("  ", pad_right(std::to_string(zero), 6),
                 pad_right(r.model.hidden > 0 ? std::to_string(r.model.hidden) : "-", 9),
                 pad_right(r.model.hidden > 0 ? std::to_string(r.model.heads) : "-", 7),
                 pad_right(format_params(static_cast<double>(r.params)), 10),
                 pad_right(format_gb(mem.params + mem.grads + mem.optimizer), 12),
                 pad_right(format_gb(mem.activations), 13), pad_right(format_gb(mem.total()), 11),
                 r.too_wide.total() > 0 ? format_gb(r.too_wide.total()) : "-", "\n");
  }
  SizingReport r;
  r.json = {{"family", in.model.name},
            {"layers", in.model.layers},
            {"seq", in.model.seq},
            {"vocab", in.model.vocab},
            {"head_size", in.model.hidden / in.model.heads},
            {"layout", layout_text},
            {"global_batch", in.training.global_batch},
            {"memory_bytes", in.cluster.gpu.memory_bytes},
            {"largest_model", rows}};
  r.text = str("widest ", in.model.name, "-shaped model that fits ",
               format_gb(in.cluster.gpu.memory_bytes), " per GPU with activations (",
               in.model.layers, " layers, s=", in.model.seq, ", V=", in.model.vocab, ", head size ",
               in.model.hidden / in.model.heads,
               "; heads in steps of tp x "
               "the KV group)\n  layout ",
               describe(base), ", global batch ", in.training.global_batch,
               "; memory is the busiest stage's, as `dtrain plan` reports it (GB = 10^9 "
               "bytes)\n\n  ",
               pad_right("ZeRO", 6), pad_right("hidden", 9), pad_right("heads", 7),
               pad_right("params", 10), pad_right("states", 12), pad_right("activations", 13),
               pad_right("total", 11), "next width up\n", table);
  return r;
}

SizingReport offload_report(int64_t params, int64_t largest, const std::string& what,
                            const Cluster& c, OffloadConvention convention,
                            const std::string& convention_name) {
  const bool zero2_code = convention == OffloadConvention::deepspeed_zero2_code;
  const bool deepspeed = convention != OffloadConvention::zero_offload;
  const std::vector<OffloadEstimate> rows =
      zero2_code  ? deepspeed_zero2_code_estimates(params, c.gpus_per_node, c.nodes)
      : deepspeed ? deepspeed_offload_estimates(params, largest, c.gpus_per_node, c.nodes)
                  : std::vector<OffloadEstimate>{
                        zero_offload_paper_estimate(params, c.gpus_per_node, c.nodes)};
  // DeepSpeed's estimators print GiB (as "GB"); the ZeRO-Offload paper's GB are 10^9 bytes.
  const double gib = deepspeed ? 1024.0 * 1024 * 1024 : 1e9;
  const char* unit = deepspeed ? " GiB" : " GB";
  SizingReport r;
  nlohmann::json out = nlohmann::json::array();
  for (const OffloadEstimate& e : rows) {
    out.push_back({{"zero_stage", e.zero_stage},
                   {"options", e.options},
                   {"cpu_bytes_per_node", e.cpu_bytes},
                   {"gpu_bytes_per_gpu", e.gpu_bytes}});
  }
  r.json = {{"params", params},
            {"largest_layer_params", largest},
            {"nodes", c.nodes},
            {"gpus_per_node", c.gpus_per_node},
            {"buffer_factor", deepspeed ? kDeepSpeedBufferFactor : 1.0},
            {"convention", convention_name},
            {"estimates", out}};
  r.text = str(
      "offload estimates for ", what, ": ", format_params(params), " parameters, largest layer ",
      format_params(largest), ", on ", c.nodes, " node(s) x ", c.gpus_per_node, " GPUs\n",
      zero2_code  ? "  convention: DeepSpeed's ZeRO-2 estimator as its current code computes "
                    "it (deepspeed/runtime/zero/stage_1_and_2.py, "
                    "estimate_zero2_model_states_mem_needs: `gpu_mem = 2 * total_params + "
                    "int(18 * total_params / total_gpus)` without offload), beside the form "
                    "its docs give (memory.rst: `4 * params + 16 * params / (total number of "
                    "gpus)`); CPU x additional_buffer_factor 1.5; GiB = 2^30 bytes (DeepSpeed "
                    "prints them as GB)\n\n"
      : deepspeed ? "  convention: DeepSpeed's estimate_zero2/3_model_states_mem_needs (model "
                    "states only; CPU bytes per parameter as its code has them, 18, 16 or 4 "
                    "x GPUs, times additional_buffer_factor 1.5); GiB = 2^30 bytes "
                    "(DeepSpeed prints them as GB)\n\n"
                  : "  convention: ZeRO-Offload (Ren et al. 2021): of mixed-precision Adam's "
                    "16 bytes per parameter, 2 (fp16 weights) per GPU and 14 (fp16 "
                    "gradients, fp32 weights, two moments) on CPU split over the GPUs; model "
                    "states only; GB = 10^9 bytes\n\n",
      "  ZeRO  per CPU (node)  per GPU     options\n");
  for (const OffloadEstimate& e : rows) {
    r.text += str("  ", pad_right(std::to_string(e.zero_stage), 6),
                  pad_right(format_fixed(e.cpu_bytes / gib, 2) + unit, 16),
                  pad_right(format_fixed(e.gpu_bytes / gib, 2) + unit, 12), e.options, "\n");
  }
  if (c.gpu.memory_bytes > 0) {
    r.text += str("  (a GPU here has ", format_fixed(c.gpu.memory_bytes / gib, 2), unit,
                  "; activations and buffers come on top)\n");
  }
  return r;
}

}  // namespace dtrain::plan
