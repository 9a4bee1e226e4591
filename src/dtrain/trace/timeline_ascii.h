// A fixed-width text rendering of a Timeline, one line per rank, for terminals and logs:
// `rank 0 |F0F1F2F3......B0  F4B1  ` with '.' for idle time and a time axis underneath.
#pragma once

#include <string>

#include "dtrain/trace/timeline.h"

namespace dtrain::trace {

struct AsciiOptions {
  int max_width = 120;  // columns for the time area, row names not included
};

// Draws only compute spans. When every compute span's label fits at a scale within
// max_width, each box shows its label ("F3", "B3", "F3b" for chunk 1), padded with spaces.
// Otherwise one column is the smallest of 1, 2, 2.5, 5 x 10^k time units that fits max_width,
// and each column shows the letter of the span covering its middle (F, B, W; lower case for odd
// model chunks). The last lines are the time axis and a legend with the scale.
std::string render_timeline_ascii(const Timeline& timeline, const AsciiOptions& options = {});

}  // namespace dtrain::trace
