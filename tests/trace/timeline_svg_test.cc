// The SVG timeline: one box per compute span with its kind as class, micro-batch numbers,
// escaped text, the communication lane on request, and files written or a clear error.
#include "dtrain/trace/timeline_svg.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "dtrain/core/check.h"

namespace dtrain::trace {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

Timeline sample() {
  Timeline t;
  t.title = "a < b & c";
  t.rows.push_back({"rank 0",
                    {{"F7", SpanKind::forward, 7, 0, 0, 1},
                     {"send", SpanKind::send, 7, 0, 1, 1},  // zero length: not drawn
                     {"recv", SpanKind::recv, 7, 0, 1, 2},
                     {"B7", SpanKind::backward_input, 7, 0, 2, 3},
                     {"W7", SpanKind::backward_weight, 7, 0, 3, 4}}});
  t.rows.push_back({"rank 1", {{"F7b", SpanKind::forward, 7, 1, 1, 2}}});
  return t;
}

TEST(TimelineSvg, DrawsEveryComputeSpan) {
  const std::string svg = render_timeline_svg(sample());
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(count(svg, "<rect class=\"forward\""), 2u);
  EXPECT_EQ(count(svg, "<rect class=\"backward_input\""), 1u);
  EXPECT_EQ(count(svg, "<rect class=\"backward_weight\""), 1u);
  EXPECT_EQ(count(svg, "<rect class=\"recv\""), 1u);
  EXPECT_EQ(count(svg, "<rect class=\"send\""), 0u);
  EXPECT_EQ(count(svg, "\">7</text>"), 4u);  // the micro-batch inside each compute box
  EXPECT_EQ(count(svg, "<g"), count(svg, "</g>"));
  EXPECT_NE(svg.find("a &lt; b &amp; c"), std::string::npos);
  EXPECT_EQ(svg.find("a < b"), std::string::npos);
  EXPECT_NE(svg.find("W weight gradient"), std::string::npos);
  EXPECT_NE(svg.find("lighter: later model chunk"), std::string::npos);
  EXPECT_NE(svg.find("time (units)"), std::string::npos);
}

TEST(TimelineSvg, CommunicationLaneIsOptional) {
  SvgOptions o;
  o.communication = false;
  EXPECT_EQ(count(render_timeline_svg(sample(), o), "<rect class=\"recv\""), 0u);
}

TEST(TimelineSvg, WritesTheFile) {
  const std::string path = testing::TempDir() + "timeline_svg_test.svg";
  write_timeline_svg(sample(), path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), render_timeline_svg(sample()));
  std::remove(path.c_str());
  try {
    write_timeline_svg(sample(), "/nonexistent-dir/x.svg");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write /nonexistent-dir/x.svg"), std::string::npos);
  }
}

}  // namespace
}  // namespace dtrain::trace
