// `dtrain pipeline`: builds a pipeline schedule, proves it with the checker, and prints the
// per-rank table, the bubble (simulated beside the closed form of plan/) and a timeline; --svg,
// --trace and --json write the same figures elsewhere. Parsing and printing only.
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "build_info.h"
#include "command_registry.h"
#include "dtrain/core/check.h"
#include "dtrain/core/files.h"
#include "dtrain/cost/pipeline_model.h"
#include "dtrain/parallel/pipeline_checker.h"
#include "dtrain/parallel/pipeline_stages.h"
#include "dtrain/schedule/pipeline_schedule.h"
#include "dtrain/trace/chrome_trace.h"
#include "dtrain/trace/timeline_ascii.h"
#include "dtrain/trace/timeline_svg.h"
#include "file_roles.h"
#include "renamed_flags.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

using parallel::SendMode;
using plan::ScheduleKind;

struct PipelineOptions {
  int stages = 0;        // P
  int microbatches = 0;  // M
  std::string schedule = "1f1b";
  std::optional<int> chunks;  // v; 2 for interleaved when not given, else 1
  std::optional<int> layers;  // L; defaults to the sum of --stage-layers, else P*v
  std::string stage_layers;
  double forward_time = 1, backward_time = 1, weight_time = 1, comm_latency = 0;
  std::string send_mode = "eager";
  std::optional<long long> global_batch;
  std::string svg_path, trace_path;
  bool svg_given = false, trace_given = false;  // "" given is a mistake, not "no file"
  bool json = false, actions = false;
  int width = 120;
};

const parallel::PartitionFlags kFlags{"--stages", "--layers", "--stage-layers", "--vp"};

// The schedule is built and simulated action by action: P x M x v = 1e6 slots take about 15 s
// and 1.6 GiB here, so more is refused rather than left to run for minutes.
constexpr int64_t kMaxScheduleSlots = 1000000;
// Times are in any unit; this bound keeps every sum of them over a schedule finite (an
// infinite time never ends the simulation).
constexpr double kMaxTime = 1e12;
// Sequences per step: a billion is far past any published run.
constexpr int64_t kMaxGlobalBatch = 1000000000;
// Far more transformer blocks than any model has; keeps a --stage-layers sum inside int.
constexpr int64_t kMaxLayers = 1000000;

std::string fmt(double v) {
  std::ostringstream out;
  out << std::setprecision(6) << (std::abs(v) < 1e-12 ? 0.0 : v);
  return out.str();
}

std::string percent(double fraction) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << 100 * fraction << "%";
  return out.str();
}

// The closed forms, as the formula with this run's numbers.
std::pair<std::string, std::string> closed_form_text(ScheduleKind kind, int p, int m, int v) {
  switch (kind) {
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b:
      return {str("(P-1)/(M+P-1) = ", p - 1, "/", m + p - 1), str("(P-1)/M = ", p - 1, "/", m)};
    case ScheduleKind::interleaved:
      return {str("(P-1)/(v*M+P-1) = ", p - 1, "/", v * m + p - 1),
              str("(P-1)/(v*M) = ", p - 1, "/", v * m)};
    case ScheduleKind::zero_bubble_h1:
      return {"(P-1)(F+B-W) / (M(F+B+W) + (P-1)(F+B-W))", "(P-1)(F+B-W) / (M(F+B+W))"};
  }
  return {};
}

// What the flags' validators cannot see alone: combinations. Each flag's own range is checked
// while parsing (add_pipeline).
void validate(const PipelineOptions& o) {
  DTRAIN_CHECK(o.forward_time + o.backward_time + o.weight_time > 0,
               "--forward-time, --backward-time and --weight-time cannot all be 0");
  if (o.global_batch) {
    DTRAIN_CHECK(*o.global_batch % o.microbatches == 0, "--global-batch ", *o.global_batch,
                 " is not divisible into --microbatches ", o.microbatches,
                 " micro-batches of equal size");
  }
  DTRAIN_CHECK(o.send_mode == "eager" || o.send_mode == "rendezvous", "--send-mode \"", o.send_mode,
               "\" is not one of eager, rendezvous");
}

parallel::StagePartition partition(const PipelineOptions& o, int chunks) {
  if (o.stage_layers.empty()) {
    return parallel::balanced_partition(o.layers.value_or(o.stages * chunks), o.stages, chunks,
                                        kFlags);
  }
  const std::vector<int> list = parallel::parse_stage_layers(o.stage_layers, "--stage-layers");
  // The count first: with --layers left to the sum, a short list would otherwise be reported
  // as too few layers for the stages.
  const int64_t entries = static_cast<int64_t>(list.size());
  if (chunks == 1) {
    DTRAIN_CHECK(entries == o.stages, "--stage-layers ", o.stage_layers, " has ", entries,
                 " entries, but --stages is ", o.stages, " (one entry per stage)");
  } else {
    DTRAIN_CHECK(entries == int64_t{o.stages} * chunks, "--stage-layers ", o.stage_layers, " has ",
                 entries, " entries; with --vp ", chunks,
                 " it lists each model chunk, --stages * --vp = ", o.stages * chunks);
  }
  int64_t sum = 0;
  for (int x : list) sum += x;
  DTRAIN_CHECK(o.layers || sum <= kMaxLayers, "--stage-layers ", o.stage_layers, " sums to ", sum,
               " layers; at most ", kMaxLayers, " are supported");
  return parallel::explicit_partition(o.layers.value_or(static_cast<int>(sum)), o.stages, chunks,
                                      list, kFlags);
}

nlohmann::json to_json(const PipelineOptions& o, ScheduleKind kind,
                       const parallel::StagePartition& part, const plan::PipelineSchedule& schedule,
                       const parallel::ScheduleReport& rep, const plan::BubbleEstimate& est,
                       bool rendezvous_ok) {
  const int p = o.stages, m = o.microbatches, v = part.chunks();
  nlohmann::json j;
  j["schedule"] = plan::name(kind);
  j["stages"] = p;
  j["microbatches"] = m;
  j["chunks"] = v;
  j["layers"] = part.layers();
  j["stage_layers"] = part.stage_layers();
  j["chunk_layers"] = part.chunk_layers();
  j["global_batch"] = o.global_batch ? nlohmann::json(*o.global_batch) : nlohmann::json();
  j["microbatch_size"] = o.global_batch ? nlohmann::json(*o.global_batch / m) : nlohmann::json();
  j["times"] = {{"forward", o.forward_time},
                {"backward_input", o.backward_time},
                {"backward_weight", o.weight_time},
                {"comm_latency", o.comm_latency}};
  j["send_mode"] = o.send_mode;
  j["valid"] = true;
  j["deadlock_free_rendezvous"] = rendezvous_ok;
  j["makespan"] = rep.makespan;
  j["ideal_time"] = rep.ideal_time;
  j["bubble_time"] = rep.bubble_time;
  j["bubble_fraction_of_total"] = rep.bubble_fraction_of_total;
  j["bubble_fraction_of_ideal"] = rep.bubble_fraction_of_ideal;
  j["plan"] = {{"bubble_time", est.bubble_time},
               {"total_time", est.total_time},
               {"bubble_fraction_of_total", est.fraction_of_total},
               {"bubble_fraction_of_ideal", est.fraction_of_ideal}};
  j["ranks"] = nlohmann::json::array();
  for (int r = 0; r < p; ++r) {
    const parallel::RankReport& rr = rep.ranks[static_cast<size_t>(r)];
    j["ranks"].push_back(
        {{"rank", r},
         {"layers", parallel::layer_ranges(part, r)},
         {"actions", rr.actions},
         {"compute_actions", rr.compute_actions},
         {"busy", rr.busy},
         {"idle", rr.idle},
         {"peak_inflight", rr.peak_inflight},
         {"plan_peak_inflight", plan::peak_inflight_microbatches(kind, p, m, v, r)},
         {"peak_weight_stash", rr.peak_weight_stash}});
    if (o.actions) {  // the table's "actions per rank" lines, one label per action
      nlohmann::json labels = nlohmann::json::array();
      for (const plan::Action& a : schedule.per_rank[static_cast<size_t>(r)]) {
        labels.push_back(plan::short_label(a, v));
      }
      j["ranks"].back()["action_list"] = std::move(labels);
    }
  }
  if (o.actions) {
    j["action_legend"] =
        ">a send activation, <a receive activation, >g / <g gradients; the rest are computes";
  }
  return j;
}

void print_text(const PipelineOptions& o, ScheduleKind kind, const parallel::StagePartition& part,
                const plan::PipelineSchedule& schedule, const parallel::ScheduleReport& rep,
                const plan::BubbleEstimate& est, bool rendezvous_ok) {
  const int p = o.stages, m = o.microbatches, v = part.chunks();
  std::ostringstream out;
  out << "pipeline: " << plan::name(kind) << ", " << p << (p == 1 ? " stage, " : " stages, ") << m
      << (m == 1 ? " micro-batch" : " micro-batches");
  if (o.global_batch)
    out << " of " << *o.global_batch / m << " (global batch " << *o.global_batch << ")";
  out << ", " << v << (v == 1 ? " model chunk" : " model chunks") << " per stage\n";
  out << "layers: " << part.layers() << " blocks (embedding on rank 0; final LayerNorm, head and "
      << "loss on rank " << p - 1 << ")\n";
  out << "times per micro-batch and stage: F " << fmt(o.forward_time) << ", B "
      << fmt(o.backward_time) << ", W " << fmt(o.weight_time);
  if (kind == ScheduleKind::zero_bubble_h1) {
    out << " (B and W separate)";
  } else {
    out << " (backward runs B+W fused: " << fmt(o.backward_time + o.weight_time) << ")";
  }
  if (v > 1) out << ", each chunk 1/" << v;
  out << "; communication latency " << fmt(o.comm_latency) << ", " << o.send_mode << " sends\n";
  out << "checker: valid (dependencies hold, every send matched in order, no deadlock with "
      << o.send_mode << " sends";
  if (o.send_mode == "eager") {
    out << (rendezvous_ok ? "; with rendezvous sends too"
                          : "; rendezvous sends would deadlock: an executor must not wait for "
                            "its sends before its next compute");
  }
  out << ")\n\n";

  const bool split = kind == ScheduleKind::zero_bubble_h1;
  out << "rank  layers          actions  compute  busy      idle      peak in-flight (plan)"
      << (split ? "  W pending" : "") << "\n";
  for (int r = 0; r < p; ++r) {
    const parallel::RankReport& rr = rep.ranks[static_cast<size_t>(r)];
    const std::string peak = str(fmt(rr.peak_inflight), " (",
                                 fmt(plan::peak_inflight_microbatches(kind, p, m, v, r)), ")");
    out << std::left << std::setw(6) << r << std::setw(16) << parallel::layer_ranges(part, r)
        << std::right << std::setw(7) << rr.actions << std::setw(9) << rr.compute_actions << "  "
        << std::left << std::setw(10) << fmt(rr.busy) << std::setw(10) << fmt(rr.idle);
    if (split) {
      out << std::setw(21) << peak << "  " << fmt(rr.peak_weight_stash);
    } else {
      out << peak;
    }
    out << std::right << "\n";
  }
  const auto [total_text, ideal_text] = closed_form_text(kind, p, m, v);
  out << "\nmakespan " << fmt(rep.makespan) << ", ideal " << fmt(rep.ideal_time)
      << " per rank, bubble " << fmt(rep.bubble_time) << " per rank\n";
  out << "bubble of total (bubble / makespan):       " << std::setw(6)
      << percent(rep.bubble_fraction_of_total) << "   plan " << percent(est.fraction_of_total)
      << "  " << total_text << "\n";
  out << "bubble of ideal (Megatron, bubble / ideal): " << std::setw(6)
      << percent(rep.bubble_fraction_of_ideal) << "   plan " << percent(est.fraction_of_ideal)
      << "  " << ideal_text << "\n";
  if (o.actions) {
    out << "\nactions per rank (>a send activation, <a receive activation, >g / <g gradients):\n";
    for (int r = 0; r < p; ++r) {
      out << "rank " << r << ":";
      for (const plan::Action& a : schedule.per_rank[static_cast<size_t>(r)]) {
        out << " " << plan::short_label(a, v);
      }
      out << "\n";
    }
  }
  trace::Timeline timeline = parallel::to_timeline(schedule, rep);
  out << "\n" << trace::render_timeline_ascii(timeline, {o.width});
  std::cout << out.str();
}

void run(const PipelineOptions& o) {
  validate(o);
  const ScheduleKind kind = plan::parse_schedule(o.schedule);
  const int chunks = o.chunks.value_or(kind == ScheduleKind::interleaved ? 2 : 1);
  DTRAIN_CHECK(chunks == 1 || kind == ScheduleKind::interleaved, "--vp ", chunks,
               " applies only to --schedule interleaved, not ", plan::name(kind));
  const int64_t slots = int64_t{o.stages} * o.microbatches * chunks;
  DTRAIN_CHECK(slots <= kMaxScheduleSlots, "--stages ", o.stages, " x --microbatches ",
               o.microbatches, " x --vp ", chunks, " = ", slots, " schedule slots; at most ",
               kMaxScheduleSlots, " are supported (the schedule is built and simulated in full)");
  // Output files are checked before the schedule is built, so a typo in a path costs nothing.
  if (o.svg_given) check_output_file(o.svg_path, "--svg");
  if (o.trace_given) check_output_file(o.trace_path, "--trace");
  const parallel::StagePartition part = partition(o, chunks);
  const plan::PipelineSchedule schedule =
      plan::make_schedule(kind, o.stages, o.microbatches, chunks);

  parallel::SimulationOptions sim;
  sim.times = {o.forward_time, o.backward_time, o.weight_time};
  sim.comm_latency = o.comm_latency;
  sim.send_mode = o.send_mode == "eager" ? SendMode::eager : SendMode::rendezvous;
  const parallel::ScheduleReport rep = parallel::simulate_schedule(schedule, sim);
  parallel::SimulationOptions strict = sim;
  strict.send_mode = SendMode::rendezvous;
  const bool rendezvous_ok = parallel::check_schedule(schedule, strict).ok();
  const plan::BubbleEstimate est =
      plan::pipeline_bubble(kind, o.stages, o.microbatches, chunks, sim.times);

  trace::Timeline timeline = parallel::to_timeline(schedule, rep);
  timeline.title = str(plan::name(kind), " schedule: P = ", o.stages, ", M = ", o.microbatches,
                       chunks > 1 ? str(", v = ", chunks) : std::string(), "; bubble ",
                       percent(rep.bubble_fraction_of_total), " of the makespan");
  if (!o.svg_path.empty()) trace::write_timeline_svg(timeline, o.svg_path);
  if (!o.trace_path.empty()) trace::write_chrome_trace(timeline, o.trace_path);
  if (o.json) {
    std::cout << with_build(to_json(o, kind, part, schedule, rep, est, rendezvous_ok)).dump(2)
              << "\n";
  } else {
    print_text(o, kind, part, schedule, rep, est, rendezvous_ok);
    if (!o.svg_path.empty()) std::cout << "wrote " << o.svg_path << "\n";
    if (!o.trace_path.empty()) std::cout << "wrote " << o.trace_path << "\n";
  }
}

void add_pipeline(CLI::App& app) {
  auto o = std::make_shared<PipelineOptions>();
  CLI::App* cmd = app.add_subcommand(
      "pipeline",
      "Build a pipeline schedule, prove it valid and deadlock-free, and show its bubble, "
      "in-flight activations and timeline");
  cmd->add_option("--stages", o->stages, "Pipeline stages P (ranks)")
      ->required()
      ->check(whole_number(1, kMaxRanks));
  cmd->add_option("--microbatches", o->microbatches, "Micro-batches M per step")
      ->required()
      ->check(whole_number(1, kMaxScheduleSlots));
  cmd->add_option("--schedule", o->schedule, "gpipe, 1f1b, interleaved or zb-h1")
      ->capture_default_str();
  cmd->add_option("--vp", o->chunks, "Model chunks v per stage (interleaved only; default 2 there)")
      ->check(whole_number(1, kMaxLayers));
  accept_old_spelling(*cmd, cmd->get_option("--vp"), "--chunks");
  cmd->add_option("--layers", o->layers,
                  "Transformer blocks L (default: the sum of --stage-layers, else P*v)")
      ->check(whole_number(1, kMaxLayers));
  CLI::Option* stage_layers =
      cmd->add_option("--stage-layers", o->stage_layers,
                      "Explicit split, e.g. 3,3,2 (one entry per stage, per chunk if interleaved)");
  cmd->add_option("--forward-time", o->forward_time, "F: forward time per micro-batch and stage")
      ->capture_default_str()
      ->check(real_number(0, kMaxTime));
  cmd->add_option("--backward-time", o->backward_time,
                  "B: input-gradient time per micro-batch and stage")
      ->capture_default_str()
      ->check(real_number(0, kMaxTime));
  cmd->add_option("--weight-time", o->weight_time,
                  "W: weight-gradient time per micro-batch and stage")
      ->capture_default_str()
      ->check(real_number(0, kMaxTime));
  cmd->add_option("--comm-latency", o->comm_latency, "Time from a send to its arrival")
      ->capture_default_str()
      ->check(real_number(0, kMaxTime));
  cmd->add_option("--send-mode", o->send_mode,
                  "eager (sends never block) or rendezvous (a send waits for its receive)")
      ->capture_default_str();
  cmd->add_option("--global-batch", o->global_batch,
                  "Global batch size; must divide into M equal micro-batches")
      ->check(whole_number(1, kMaxGlobalBatch));
  CLI::Option* svg =
      cmd->add_option("--svg", o->svg_path, "Write the timeline as SVG to this file");
  CLI::Option* trace = cmd->add_option("--trace", o->trace_path,
                                       "Write a Chrome/Perfetto trace (JSON) to this file");
  cmd->add_option("--width", o->width, "Columns of the ASCII timeline")
      ->capture_default_str()
      ->check(whole_number(20, 10000));  // wider is no longer read on a screen
  cmd->add_flag("--json", o->json, "Print the figures as JSON instead of the table");
  cmd->add_flag("--actions", o->actions, "Also print every rank's ordered action list");
  cmd->callback([o, svg, trace, stage_layers, cmd] {
    DTRAIN_CHECK(stage_layers->count() == 0 || !o->stage_layers.empty(),
                 "--stage-layers is empty (give one layer count per stage, e.g. 3,3,2)");
    o->svg_given = svg->count() > 0;
    o->trace_given = trace->count() > 0;
    refuse_outputs_that_are_inputs(*cmd, {},
                                   {{"--svg", o->svg_given ? o->svg_path : ""},
                                    {"--trace", o->trace_given ? o->trace_path : ""}});
    run(*o);
  });
}

const CommandRegistration kRegistration("", add_pipeline);

}  // namespace
}  // namespace dtrain::cli
