// An SVG drawing of a Timeline: one row per rank, a box per compute span coloured by kind
// (forward, backward, input gradient, weight gradient) with its micro-batch number inside, a
// thin lane under each row for sends and receives, a time axis and a legend. Simulated
// schedules (`dtrain pipeline --svg`) and measured runs use the same renderer.
#pragma once

#include <string>

#include "dtrain/trace/timeline.h"

namespace dtrain::trace {

struct SvgOptions {
  int plot_width_px = 1000;   // width of the time area
  int row_height_px = 26;     // height of a compute box
  bool communication = true;  // draw the send/receive lane under each row
};

std::string render_timeline_svg(const Timeline& timeline, const SvgOptions& options = {});

// Renders and writes the file; throws dtrain::Error naming the path if it cannot.
void write_timeline_svg(const Timeline& timeline, const std::string& path,
                        const SvgOptions& options = {});

}  // namespace dtrain::trace
