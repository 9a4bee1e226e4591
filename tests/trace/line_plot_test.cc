// The SVG line chart: one polyline per series with one point per value, larger values drawn
// higher inside their panel, the x axis shared; bad series refused naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/trace/line_plot.h"

namespace dtrain::trace {
namespace {

// The (x, y) points of the polyline of `name`.
std::vector<std::pair<double, double>> points_of(const std::string& svg, const std::string& name) {
  const std::regex re("data-series=\"" + name + "\"[^>]*points=\"([^\"]*)\"");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(svg, m, re)) << name;
  std::vector<std::pair<double, double>> out;
  std::string pts = m[1];
  const std::regex pair_re("([-0-9.]+),([-0-9.]+)");
  for (auto it = std::sregex_iterator(pts.begin(), pts.end(), pair_re);
       it != std::sregex_iterator(); ++it) {
    out.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  }
  return out;
}

TEST(LinePlot, PanelsSeriesAndPoints) {
  const std::vector<PlotPanel> panels = {
      {{"loss", {1, 2, 3, 4}, {5.0, 4.0, 4.5, 3.0}}, {"val_loss", {0, 4}, {5.5, 3.5}}},
      {{"lr", {1, 2, 3, 4}, {1e-3, 3e-3, 2e-3, 1e-4}}}};
  const std::string svg = line_plot_svg(panels, "a <title> & more", "step");
  EXPECT_NE(svg.find("a &lt;title&gt; &amp; more"), std::string::npos);
  const std::regex polyline("<polyline");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(svg.begin(), svg.end(), polyline), std::sregex_iterator()),
      3);
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
