// `dtrain plot`: draws series of a --metrics file (run/metrics.h) as an SVG line chart
// (trace/line_plot.h). Parsing only.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "command_registry.h"
#include "dtrain/core/check.h"
#include "dtrain/core/files.h"
#include "dtrain/run/metrics.h"
#include "dtrain/trace/line_plot.h"
#include "dtrain/trace/write_file.h"
#include "file_roles.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct PlotFlags {
  std::vector<std::string> metrics;
  std::string output;
  std::vector<std::string> series = {"loss+val_loss"};
  std::string x = "step";
};

// A file's label in a chart of several runs: its name without the folder and ".jsonl".
std::string run_label(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (name.size() > 6 && name.ends_with(".jsonl")) name.resize(name.size() - 6);
  return name;
}

void add_plot(CLI::App& app) {
  auto f = std::make_shared<PlotFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plot",
      "Draw --metrics FILE.jsonl files of dtrain train as an SVG chart: one line per series and "
      "run over the steps or tokens (default: loss and val_loss); several files compare runs");
  cmd->add_option("metrics", f->metrics,
                  "The FILE.jsonl files that dtrain train --metrics wrote (one or more runs)")
      ->required()
      ->check(kNotEmpty);
  cmd->add_option("--x", f->x, "The x axis: step, or tokens (step x batch x seq of each run)")
      ->check(CLI::IsMember({"step", "tokens"}))
      ->capture_default_str();
  cmd->add_option("--output", f->output, "SVG file to write")->required()->check(kNotEmpty);
  cmd->add_option("--series", f->series,
                  "Numeric fields to draw, a panel each, comma-separated; A+B shares a panel: "
                  "loss, val_loss, lr, grad_norm, step_ms, tokens_per_s, memory_peak_bytes")
      ->delimiter(',')
      ->capture_default_str();
  cmd->callback([f, cmd] {
    std::vector<NamedPath> inputs;
    for (const std::string& file : f->metrics) inputs.push_back({"metrics file", file});
    refuse_outputs_that_are_inputs(*cmd, inputs, {{"--output", f->output}});
    for (const std::string& file : f->metrics) check_input_file(file, "metrics file");
    check_output_file(f->output, "--output");
    // "loss+val_loss,lr": panels of names.
    std::vector<std::vector<std::string>> panel_names;
    std::vector<std::string> names;
    for (const std::string& item : f->series) {
      panel_names.emplace_back();
      for (size_t begin = 0; begin <= item.size();) {
        const size_t end = std::min(item.find('+', begin), item.size());
        const std::string name = item.substr(begin, end - begin);
        DTRAIN_CHECK(!name.empty(), "--series ", item, ": an empty name");
        panel_names.back().push_back(name);
        names.push_back(name);
        begin = end + 1;
      }
    }
    // Each panel holds its series for every run, labelled "run: series" when there are several.
    const bool several = f->metrics.size() > 1;
    std::vector<trace::PlotPanel> panels(panel_names.size());
    for (const std::string& file : f->metrics) {
      std::vector<train::MetricsSeries> read = train::read_metrics_series(file, names);
      const double x_scale =
          f->x == "tokens" ? static_cast<double>(train::metrics_tokens_per_step(file)) : 1.0;
      size_t next = 0;
      for (size_t p = 0; p < panel_names.size(); ++p) {
        for (size_t i = 0; i < panel_names[p].size(); ++i, ++next) {
          train::MetricsSeries& s = read[next];
          for (double& x : s.steps) x *= x_scale;
          const std::string label = several ? run_label(file) + ": " + s.name : s.name;
          panels[p].push_back({label, std::move(s.steps), std::move(s.values)});
        }
      }
    }
    std::string title;
    for (const std::string& file : f->metrics) title += (title.empty() ? "" : ", ") + file;
    trace::write_file(f->output, trace::line_plot_svg(panels, title, f->x));
    std::cout << "plot: " << names.size() << " series of " << f->metrics.size() << " run(s) in "
              << panels.size() << " panel(s) to " << f->output << "\n";
  });
}

const CommandRegistration kRegistration("", add_plot);

}  // namespace
}  // namespace dtrain::cli
