// `dtrain plot`: draws series of a --metrics file (train/metrics.h) as an SVG line chart
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
#include "dtrain/trace/line_plot.h"
#include "dtrain/trace/write_file.h"
#include "dtrain/train/metrics.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct PlotFlags {
  std::string metrics, output;
  std::vector<std::string> series = {"loss+val_loss"};
};

void add_plot(CLI::App& app) {
  auto f = std::make_shared<PlotFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plot",
      "Draw a --metrics FILE.jsonl of dtrain train as an SVG chart: one line per series over the "
      "steps (default: loss and val_loss)");
  cmd->add_option("metrics", f->metrics, "The FILE.jsonl that dtrain train --metrics wrote")
      ->required()
      ->check(kNotEmpty);
  cmd->add_option("--output", f->output, "SVG file to write")->required()->check(kNotEmpty);
  cmd->add_option("--series", f->series,
                  "Numeric fields to draw, a panel each, comma-separated; A+B shares a panel: "
                  "loss, val_loss, lr, grad_norm, step_ms, tokens_per_s, memory_peak_bytes")
      ->delimiter(',')
      ->capture_default_str();
  cmd->callback([f] {
    check_input_file(f->metrics, "metrics file");
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
    std::vector<train::MetricsSeries> read = train::read_metrics_series(f->metrics, names);
    std::vector<trace::PlotPanel> panels;
    size_t next = 0;
    for (const auto& panel : panel_names) {
      panels.emplace_back();
      for (size_t i = 0; i < panel.size(); ++i, ++next) {
        panels.back().push_back(
            {read[next].name, std::move(read[next].steps), std::move(read[next].values)});
      }
    }
    trace::write_file(f->output, trace::line_plot_svg(panels, f->metrics, "step"));
    std::cout << "plot: " << names.size() << " series of " << f->metrics << " in " << panels.size()
              << " panel(s) to " << f->output << "\n";
  });
}

const CommandRegistration kRegistration("", add_plot);

}  // namespace
}  // namespace dtrain::cli
