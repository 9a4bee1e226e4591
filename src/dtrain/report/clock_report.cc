// ClockReport: the engine clock's inputs read off the run's layout, the measured phases'
// medians, and the predicted-beside-measured table and JSON.
#include "dtrain/report/clock_report.h"

#include <algorithm>
#include <cstdio>

#include "dtrain/core/cpu_usage.h"
#include "dtrain/cost/moe.h"
#include "dtrain/report/layout_report.h"

namespace dtrain::train {

plan::EngineClockInput engine_clock_input(const EngineConfig& c, int64_t buckets,
                                          comm::Algorithm dp_algorithm) {
  plan::EngineClockInput in;
  const model::GptConfig& g = c.step.model;
  in.model.name = "run";
  in.model.layers = g.layers;
  in.model.hidden = g.channels;
  in.model.heads = g.heads;
  in.model.vocab = g.vocab;
  in.model.seq = c.step.seq;
  in.dp = c.dp;
  in.tp = c.tp;
  in.pp = c.pp;
  in.chunks = c.partition.chunks();
  in.zero_stage = c.zero_stage;
  in.sequence_parallel = c.sequence_parallel && c.tp > 1;
  in.recompute = c.step.recompute;
  in.schedule = c.schedule;
  in.micro_batch = c.micro_batch();
  in.microbatches = c.microbatches;
  in.precision =
      c.step.precision == model::Precision::bf16 ? plan::Precision::bf16 : plan::Precision::fp32;
  in.threads = c.step.threads;
  in.cp = c.cp;
  in.cp_algorithm = c.cp_algorithm;
  in.cp_split = c.cp_split == model::CpTokenSplit::contiguous ? plan::CpSplit::contiguous
                                                              : plan::CpSplit::balanced;
  // The engine's routed blocks (model::is_moe_layer: blocks every-1, 2 every-1, ...) are the
  // plan's with the first every-1 blocks dense. The clock assumes uniform routing: the run's
  // measured routing is reported beside it, never fed into its own prediction.
  const model::MoeConfig& moe = g.moe;
  if (moe.enabled()) {
    in.model.moe.experts = moe.experts;
    in.model.moe.top_k = moe.top_k;
    in.model.moe.every = moe.every;
    in.model.moe.first_dense = moe.every - 1;
  }
  in.ep = c.ep;
  // stage_param_counts counts each block as the engine holds it (a routed one: its router and
  // E / ep experts, TP-local).
  int64_t largest = -1;
  for (int stage = 0; stage < c.pp; ++stage) {
    const int64_t params = stage_param_counts(c, stage).params;
    if (params <= in.stage_params) continue;
    in.stage_params = params;
    largest = stage;
  }
  if (c.ep > 1 && largest >= 0) {
    const int64_t layers = g.layers / c.pp;
    in.stage_expert_params = plan::moe_layers_in(in.model, largest * layers, layers) *
                             plan::engine_moe_expert_param_count(in.model, c.ep);
  }
  in.dp_pieces = std::max<int64_t>(1, buckets);
  in.dp_algorithm = dp_algorithm;
  in.dp_hierarchical = c.hierarchical;
  for (const GroupCrossing& g2 : node_crossings(c)) {
    if (g2.axis == "dp" && !g2.nodes.empty()) {
      // Every node holds as many of the group's ranks (the hierarchical all-reduce requires it;
      // a flat ring's one flow per node link needs only the count).
      in.dp_ranks_per_node = static_cast<int>(g2.ranks.size() / g2.nodes.size());
    }
    in.inter_node_dp |= g2.axis == "dp";
    in.inter_node_tp |= g2.axis == "tp";
    in.inter_node_pp |= g2.axis == "pp";
  }
  return in;
}

plan::EnginePhases median_phases(const std::vector<StepPhases>& steps) {
  plan::EnginePhases p;
  if (steps.empty()) return p;
  const size_t first = steps.size() > 1 ? 1 : 0;
  auto median = [&](double StepPhases::*field) {
    std::vector<double> v;
    for (size_t i = first; i < steps.size(); ++i) v.push_back(steps[i].*field);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2] * 1e-6;
  };
  p.forward_s = median(&StepPhases::forward_us);
  p.backward_s = median(&StepPhases::backward_us);
  p.tp_comm_s = median(&StepPhases::tp_comm_us);
  p.pipeline_wait_s = median(&StepPhases::pipeline_wait_us);
  p.exposed_dp_s = median(&StepPhases::exposed_dp_us);
  p.optimizer_s = median(&StepPhases::optimizer_us);
  return p;
}

std::string clock_not_priced(const EngineConfig& c) {
  const model::GptConfig& g = c.step.model;
  const std::string gap = plan::engine_clock_moe_gap(
      g.moe.enabled(), c.tp, c.ep, c.zero_stage, c.step.recompute,
      c.step.precision == model::Precision::bf16 ? plan::Precision::bf16 : plan::Precision::fp32);
  return gap.empty() ? gap : str(gap, " (`dtrain plan` refuses this layout on the same file)");
}

std::optional<ClockReport> clock_report(
    const EngineConfig& config, const std::string& rates_path, int64_t buckets,
    comm::Algorithm dp_algorithm, const std::vector<plan::EnginePhases>& rank_phases,
    const std::vector<std::vector<std::vector<double>>>& block_routings) {
  if (!config.cluster || !plan::has_measured_rates(*config.cluster)) return std::nullopt;
  ClockReport r;
  r.rates = rates_path;
  r.not_priced = clock_not_priced(config);
  plan::EngineClockInput in = engine_clock_input(config, buckets, dp_algorithm);
  if (r.not_priced.empty()) {
    // The run's work is done: a layout the clock cannot price loses its predicted column, never
    // the report.
    try {
      const plan::EngineClock clock = plan::engine_clock(in, *config.cluster);
      r.predicted = clock.phases;
      r.stretch = clock.stretch;
      // The steps the measured medians cover: after the first, when there are more.
      for (size_t step = block_routings.size() > 1 ? 1 : 0; step < block_routings.size(); ++step) {
        const auto& entries = block_routings[step];
        in.block_routings.insert(in.block_routings.end(), entries.begin(), entries.end());
      }
      if (!in.block_routings.empty()) {
        r.given_routing = plan::engine_clock(in, *config.cluster).phases;
      }
    } catch (const Error& e) {
      r.not_priced = e.what();
      r.given_routing.reset();
    }
  }
  double longest = -1;
  for (size_t i = 0; i < rank_phases.size(); ++i) {
    const plan::EnginePhases& p = rank_phases[i];
    const double compute = p.forward_s + p.backward_s + p.tp_comm_s;
    if (compute > longest) {
      longest = compute;
      r.measured = p;
      r.rank = static_cast<int>(i);
    }
  }
  return r;
}

nlohmann::json phases_to_json(const plan::EnginePhases& p) {
  return {{"forward_s", p.forward_s},
          {"backward_s", p.backward_s},
          {"tp_comm_s", p.tp_comm_s},
          {"pipeline_wait_s", p.pipeline_wait_s},
          {"exposed_dp_s", p.exposed_dp_s},
          {"optimizer_s", p.optimizer_s},
          {"step_s", p.step_s}};
}

plan::EnginePhases phases_from_json(const nlohmann::json& j) {
  plan::EnginePhases p;
  p.forward_s = j.at("forward_s");
  p.backward_s = j.at("backward_s");
  p.tp_comm_s = j.at("tp_comm_s");
  p.pipeline_wait_s = j.at("pipeline_wait_s");
  p.exposed_dp_s = j.at("exposed_dp_s");
  p.optimizer_s = j.at("optimizer_s");
  p.step_s = j.at("step_s");
  return p;
}

nlohmann::json clock_to_json(const ClockReport& c) {
  nlohmann::json j = {
      {"rates", c.rates},
      {"predicted", c.not_priced.empty() ? phases_to_json(c.predicted) : nlohmann::json(nullptr)},
      {"not_priced", c.not_priced.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.not_priced)},
      {"measured", phases_to_json(c.measured)},
      {"measured_rank", c.rank},
      {"oversubscription", c.stretch}};
  if (c.given_routing) j["given_routing"] = phases_to_json(*c.given_routing);
  j["other_load_cores"] =
      c.other_load_cores >= 0 ? nlohmann::json(c.other_load_cores) : nlohmann::json(nullptr);
  if (c.other_load_cores >= 0) {
    j["other_load_window_s"] = c.other_load_window_s;
    j["other_load_grain_cores"] = other_load_grain_cores(c.cores, c.other_load_window_s);
    j["machine_was_busy"] = machine_was_busy(c);
  }
  return j;
}

bool machine_was_busy(const ClockReport& c) {
  return c.other_load_cores >= 0 &&
         c.other_load_cores >
             kBusyMachineCores + other_load_grain_cores(c.cores, c.other_load_window_s);
}

std::string phase_error_text(double predicted_s, double measured_s, double measured_step_s) {
  // A phase below this share of the step on both sides is within the step's own repeat noise
  // on this kind of machine (tens of percent at small shapes): its relative error says nothing,
  // the two columns say enough.
  constexpr double kComparableShare = 0.02;
  const double floor_s = kComparableShare * measured_step_s;
  if (measured_s <= 0 && predicted_s <= 0) return "-";
  if (measured_s < floor_s && predicted_s < floor_s) return "-";
  // Measured near zero but predicted not (or the other way round): no percentage, a sign of
  // which side holds the time.
  if (measured_s < floor_s) return "over";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", (predicted_s / measured_s - 1) * 100);
  return buf;
}

// Other programs' load during the measured steps, when it was measured.
void print_other_load(std::ostream& out, const ClockReport& c) {
  if (c.other_load_cores < 0) return;
  {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "%.2f of the %d cores busy during the measured steps (%.2f s, counted in whole "
                  "ticks: +-%.2f)",
                  c.other_load_cores, c.cores, c.other_load_window_s,
                  other_load_grain_cores(c.cores, c.other_load_window_s));
    out << "  other programs kept " << buf
        << (machine_was_busy(c)
                ? ": the clock prices an idle machine, so measure again with nothing else running "
                  "(a reader of --json started beside the run counts too: write to a file)\n"
                : "\n");
  }
}

// The measured column alone, with the reason the clock has no prediction for the layout.
void print_unpriced_clock_report(std::ostream& out, const ClockReport& c) {
  out << "Clock: no prediction from " << c.rates << " for this layout: " << c.not_priced
      << "\n  measured on rank " << c.rank << " (median of the steps after the first):\n";
  out << "  phase                 measured ms\n";
  using Field = double plan::EnginePhases::*;
  auto row = [&](const char* what, Field f) {
    char buf[120];
    std::snprintf(buf, sizeof buf, "  %-20s %12.3f\n", what, c.measured.*f * 1e3);
    out << buf;
  };
  row("forward", &plan::EnginePhases::forward_s);
  row("backward", &plan::EnginePhases::backward_s);
  row("TP collectives", &plan::EnginePhases::tp_comm_s);
  row("pipeline waits", &plan::EnginePhases::pipeline_wait_s);
  row("exposed DP", &plan::EnginePhases::exposed_dp_s);
  row("optimizer", &plan::EnginePhases::optimizer_s);
  row("step", &plan::EnginePhases::step_s);
  print_other_load(out, c);
  out << "\n";
}

void print_clock_report(std::ostream& out, const ClockReport& c) {
  if (!c.not_priced.empty()) {
    print_unpriced_clock_report(out, c);
    return;
  }
  out << "Clock: predicted from " << c.rates << " (the engine's clock, docs/clock.md) beside "
      << "measured on rank " << c.rank << " (median of the steps after the first)";
  if (c.stretch > 1) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "; compute x%.2f for ranks x threads over the cores", c.stretch);
    out << buf;
  }
  out << "\n";
  out << "  phase                predicted ms   measured ms    error";
  if (c.given_routing) out << "   given routing ms    error";
  out << "\n";
  using Field = double plan::EnginePhases::*;
  auto row = [&](const char* what, Field f) {
    char buf[200];
    const double measured = c.measured.*f;
    std::snprintf(buf, sizeof buf, "  %-20s %12.3f %13.3f %9s", what, c.predicted.*f * 1e3,
                  measured * 1e3,
                  phase_error_text(c.predicted.*f, measured, c.measured.step_s).c_str());
    out << buf;
    if (c.given_routing) {
      const double routed = (*c.given_routing).*f;
      std::snprintf(buf, sizeof buf, " %18.3f %9s", routed * 1e3,
                    phase_error_text(routed, measured, c.measured.step_s).c_str());
      out << buf;
    }
    out << "\n";
  };
  row("forward", &plan::EnginePhases::forward_s);
  row("backward", &plan::EnginePhases::backward_s);
  row("TP collectives", &plan::EnginePhases::tp_comm_s);
  row("pipeline waits", &plan::EnginePhases::pipeline_wait_s);
  row("exposed DP", &plan::EnginePhases::exposed_dp_s);
  row("optimizer", &plan::EnginePhases::optimizer_s);
  row("step", &plan::EnginePhases::step_s);
  if (c.given_routing) {
    out << "  predicted: uniform routing, before the run; given routing: the same clock on the "
           "experts' rows this run routed per block\n";
  }
  print_other_load(out, c);
  out << "\n";
}

}  // namespace dtrain::train
