// A line chart as plain SVG: panels stacked over one shared x axis (the step), each with its own
// y axis (min to max of its series' values, the end values printed), one <polyline> per series
// (class "series", data-series = its name), a title and a legend. Series in one panel share its
// y axis (a training and a validation loss); series of other units go in panels of their own.
// `dtrain plot` draws a --metrics file with it.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::trace {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;  // the same length, at least one point; finite
};
using PlotPanel = std::vector<PlotSeries>;

// The chart (800 px wide, 150 px per panel and the margins). The y axis grows upwards: a larger
// value is drawn higher (a smaller SVG y). Throws Error when there is no panel, a panel is empty,
// a series is empty, its lengths differ or a value is not finite (naming the series).
std::string line_plot_svg(std::span<const PlotPanel> panels, std::string_view title,
                          std::string_view x_label);

}  // namespace dtrain::trace
