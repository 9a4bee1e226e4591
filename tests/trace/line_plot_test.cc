// The SVG line chart: one polyline per series with one point per value, larger values drawn
// higher inside their panel, the x axis shared; bad series refused naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/trace/line_plot.h"

namespace dtrain::trace {
namespace {

// The (x, y) points of the polyline of `name`: the `points` attribute of the element that
// carries data-series="name", read as "x,y x,y ...". A plain scan, not <regex>: libstdc++'s
// regex automaton trips GCC 12's -Wmaybe-uninitialized under ASan + UBSan at -O1, and the
// sanitized build has warnings as errors.
std::vector<std::pair<double, double>> points_of(const std::string& svg, const std::string& name) {
  std::vector<std::pair<double, double>> out;
  const size_t series = svg.find("data-series=\"" + name + "\"");
  EXPECT_NE(series, std::string::npos) << name;
  if (series == std::string::npos) return out;
  const size_t element_end = svg.find('>', series);
  const size_t attr = svg.find("points=\"", series);
  EXPECT_LT(attr, element_end) << "no points attribute in the element of " << name;
  if (attr >= element_end) return out;
  const size_t begin = attr + std::strlen("points=\"");
  std::istringstream pts(svg.substr(begin, svg.find('"', begin) - begin));
  for (std::string pair; pts >> pair;) {
    const size_t comma = pair.find(',');
    EXPECT_NE(comma, std::string::npos) << "point '" << pair << "' of " << name;
    if (comma == std::string::npos) continue;
    out.emplace_back(std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1)));
  }
  return out;
}

// How often `needle` occurs in `haystack`.
size_t count_of(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

TEST(LinePlot, PanelsSeriesAndPoints) {
  const std::vector<PlotPanel> panels = {
      {{"loss", {1, 2, 3, 4}, {5.0, 4.0, 4.5, 3.0}}, {"val_loss", {0, 4}, {5.5, 3.5}}},
      {{"lr", {1, 2, 3, 4}, {1e-3, 3e-3, 2e-3, 1e-4}}}};
  const std::string svg = line_plot_svg(panels, "a <title> & more", "step");
  EXPECT_NE(svg.find("a &lt;title&gt; &amp; more"), std::string::npos);
  EXPECT_EQ(count_of(svg, "<polyline"), 3u);
  for (const PlotPanel& panel : panels) {
    for (const PlotSeries& s : panel) {
      const auto pts = points_of(svg, s.name);
      ASSERT_EQ(pts.size(), s.y.size()) << s.name;
      for (size_t i = 0; i + 1 < pts.size(); ++i) {
        EXPECT_LT(pts[i].first, pts[i + 1].first) << s.name;
        // Larger value, smaller SVG y (higher), and the reverse.
        EXPECT_EQ(s.y[i]<s.y[i + 1], pts[i].second> pts[i + 1].second) << s.name << " " << i;
      }
    }
  }
  // The shared x axis: step 4 is at the right edge in both panels, step 0 at the left.
  EXPECT_DOUBLE_EQ(points_of(svg, "loss").back().first, points_of(svg, "lr").back().first);
  EXPECT_LT(points_of(svg, "val_loss").front().first, points_of(svg, "loss").front().first);
  // lr's panel lies below the losses' panel.
  EXPECT_GT(points_of(svg, "lr").front().second, points_of(svg, "loss").front().second);
}

TEST(LinePlot, BadSeriesAreNamed) {
  const auto error_of = [](const std::vector<PlotPanel>& panels) {
    try {
      line_plot_svg(panels, "t", "step");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of({}).find("no series"), std::string::npos);
  EXPECT_NE(error_of({{{"a", {1, 2}, {1}}}}).find("series 'a' has 2 x and 1 y"), std::string::npos);
  EXPECT_NE(error_of({{{"b", {1}, {std::nan("")}}}}).find("series 'b'"), std::string::npos);
  EXPECT_EQ(error_of({{{"one point", {3}, {7}}}}), "");  // a single point still draws
}

}  // namespace
}  // namespace dtrain::trace
