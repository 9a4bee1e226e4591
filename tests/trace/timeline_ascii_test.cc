// The ASCII timeline: labelled boxes at a scale where every label fits, letters on a compressed
// scale when they would not fit the width, idle as '.', communication not drawn.
#include "dtrain/trace/timeline_ascii.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace dtrain::trace {
namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(TimelineAscii, LabelsFitAtTwoColumnsPerUnit) {
  // Shortest box 1 unit, longest label 2 characters: 2 columns per unit, 5 units = 10 columns.
  Timeline t;
  t.rows.push_back({"rank 0",
                    {{"F0", SpanKind::forward, 0, 0, 0, 1},
                     {"recv_gradient", SpanKind::recv, 0, 0, 1, 3},  // not drawn: stays idle
                     {"B0", SpanKind::backward, 0, 0, 3, 5}}});
  t.rows.push_back(
      {"rank 1", {{"F0", SpanKind::forward, 0, 0, 1, 2}, {"B0", SpanKind::backward, 0, 0, 2, 3}}});
  const std::vector<std::string> out = lines(render_timeline_ascii(t));
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0], "rank 0 |F0....B0  |");
  EXPECT_EQ(out[1], "rank 1 |..F0B0....|");
  // Ticks every 5 units (the first of 1, 2, 5 at least 8 columns apart).
  EXPECT_EQ(out[2], "       +---------+");
  EXPECT_EQ(out[3], "time   0         5");
  EXPECT_NE(out[4].find("1 column = 0.5 units"), std::string::npos) << out[4];
}

TEST(TimelineAscii, LettersWhenLabelsWouldNotFit) {
  // 50 forwards on chunk 0, then 50 backwards on chunk 1, one unit each: labels of up to 3
  // characters would need 300 columns, so 100 units go into at most 20 columns at 5 units per
  // column, F for chunk 0 and b for chunk 1.
  Timeline t;
  t.rows.push_back({"r0", {}});
  for (int i = 0; i < 100; ++i) {
    Span s;
    s.label = std::to_string(i);  // 1 to 2 characters, then the kind letter in front
    s.label.insert(0, 1, i < 50 ? 'F' : 'B');
    s.kind = i < 50 ? SpanKind::forward : SpanKind::backward;
    s.chunk = i < 50 ? 0 : 1;
    s.start = i;
    s.end = i + 1;
    t.rows[0].spans.push_back(s);
  }
  const std::vector<std::string> out = lines(render_timeline_ascii(t, {20}));
  EXPECT_EQ(out[0], "r0   |FFFFFFFFFFbbbbbbbbbb|");
  EXPECT_NE(out.back().find("1 column = 5 units"), std::string::npos) << out.back();
  EXPECT_NE(out.back().find("lower case: odd chunk"), std::string::npos) << out.back();
}

TEST(TimelineAscii, EmptyTimeline) {
  Timeline t;
  t.rows.push_back({"rank 0", {}});
  EXPECT_EQ(lines(render_timeline_ascii(t))[0], "rank 0 |.|");
}

}  // namespace
}  // namespace dtrain::trace
