// line_plot_svg: the x range of every series and the y range of each panel, the linear maps
// into the panels, and the SVG elements (every text escaped).
#include "dtrain/trace/line_plot.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "dtrain/core/check.h"
#include "dtrain/trace/svg_text.h"

namespace dtrain::trace {
namespace {

constexpr double kWidth = 800;
constexpr double kLeft = 70, kRight = 20, kTop = 40, kBottom = 60;  // margins around the panels
constexpr double kPanel = 150, kGap = 20;                           // a panel's height, between two
constexpr const char* kColours[] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2b",
                                    "#76b7b2", "#b07aa1", "#edc948", "#9c755f"};

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  // A single value still spans a range, so the maps never divide by zero.
  double span() const { return hi > lo ? hi - lo : 1.0; }
};

}  // namespace

std::string line_plot_svg(std::span<const PlotPanel> panels, std::string_view title,
                          std::string_view x_label) {
  DTRAIN_CHECK(!panels.empty(), "line plot: no series to draw");
  Range xr;
  std::vector<Range> yr(panels.size());
  for (size_t k = 0; k < panels.size(); ++k) {
    DTRAIN_CHECK(!panels[k].empty(), "line plot: panel ", k, " has no series");
    for (const PlotSeries& s : panels[k]) {
      DTRAIN_CHECK(!s.x.empty() && s.x.size() == s.y.size(), "line plot: series '", s.name,
                   "' has ", s.x.size(), " x and ", s.y.size(), " y values");
      for (size_t i = 0; i < s.x.size(); ++i) {
        DTRAIN_CHECK(std::isfinite(s.x[i]) && std::isfinite(s.y[i]), "line plot: series '", s.name,
                     "' has a value that is not finite at point ", i);
        xr.add(s.x[i]);
        yr[k].add(s.y[i]);
      }
    }
  }
  const double w = kWidth - kLeft - kRight;
  const double height = kTop + static_cast<double>(panels.size()) * (kPanel + kGap) + kBottom;
  const auto px = [&](double x) { return kLeft + (x - xr.lo) / xr.span() * w; };

  std::ostringstream out;
  out << std::fixed << std::setprecision(2);
  out << R"(<svg xmlns="http://www.w3.org/2000/svg" width=")" << kWidth << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << kWidth << " " << height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out << "<text x=\"" << kLeft << "\" y=\"24\" font-size=\"15\">" << xml_escape(title)
      << "</text>\n";
  size_t colour_index = 0;
  double legend_x = kLeft;
  const double legend_y = height - 20;
  for (size_t k = 0; k < panels.size(); ++k) {
    const double top = kTop + static_cast<double>(k) * (kPanel + kGap), bottom = top + kPanel;
    const Range& r = yr[k];
    const auto py = [&](double y) { return top + (r.lo + r.span() - y) / r.span() * kPanel; };
    out << "<g class=\"panel\">\n";
    out << "<line x1=\"" << kLeft << "\" y1=\"" << bottom << "\" x2=\"" << kLeft + w << "\" y2=\""
        << bottom << "\" stroke=\"#333\"/>\n";
    out << "<line x1=\"" << kLeft << "\" y1=\"" << top << "\" x2=\"" << kLeft << "\" y2=\""
        << bottom << "\" stroke=\"#333\"/>\n";
    out << "<text class=\"y-max\" x=\"" << kLeft - 6 << "\" y=\"" << top + 4
        << "\" text-anchor=\"end\">" << svg_number(r.lo + r.span()) << "</text>\n";
    out << "<text class=\"y-min\" x=\"" << kLeft - 6 << "\" y=\"" << bottom
        << "\" text-anchor=\"end\">" << svg_number(r.lo) << "</text>\n";
    for (const PlotSeries& s : panels[k]) {
      const char* colour = kColours[colour_index++ % std::size(kColours)];
      out << "<polyline class=\"series\" data-series=\"" << xml_escape(s.name)
          << "\" fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"1.5\" points=\"";
      for (size_t i = 0; i < s.x.size(); ++i) {
        out << (i ? " " : "") << px(s.x[i]) << "," << py(s.y[i]);
      }
      out << "\"/>\n";
      out << "<line x1=\"" << legend_x << "\" y1=\"" << legend_y << "\" x2=\"" << legend_x + 20
          << "\" y2=\"" << legend_y << "\" stroke=\"" << colour << "\" stroke-width=\"3\"/>\n";
      out << "<text class=\"legend\" x=\"" << legend_x + 26 << "\" y=\"" << legend_y + 4 << "\">"
          << xml_escape(s.name) << "</text>\n";
      legend_x += 150;
    }
    out << "</g>\n";
  }
  const double axis_y = kTop + static_cast<double>(panels.size()) * (kPanel + kGap) - kGap + 16;
  out << "<text class=\"x-min\" x=\"" << kLeft << "\" y=\"" << axis_y << "\">" << svg_number(xr.lo)
      << "</text>\n";
  out << "<text class=\"x-max\" x=\"" << kLeft + w << "\" y=\"" << axis_y
      << "\" text-anchor=\"end\">" << svg_number(xr.lo + xr.span()) << "</text>\n";
  out << "<text x=\"" << kLeft + w / 2 << "\" y=\"" << axis_y << "\" text-anchor=\"middle\">"
      << xml_escape(x_label) << "</text>\n";
  out << "</svg>\n";
  return out.str();
}

}  // namespace dtrain::trace
