// render_timeline_ascii: choose a scale, paint each rank's compute spans into a row of
// characters, then add the time axis and the legend.
#include "dtrain/trace/timeline_ascii.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "dtrain/core/check.h"

namespace dtrain::trace {
namespace {

constexpr char kIdle = '.';

int column_of(double time, double columns_per_unit) {
  return static_cast<int>(std::lround(time * columns_per_unit));
}

// The smallest of 1, 2, 5, 10, 20, 50, ... time units whose ticks land at least `min_gap`
// columns apart.
double tick_step(double columns_per_unit, int min_gap) {
  for (double decade = 1e-3;; decade *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * decade * columns_per_unit >= min_gap) return m * decade;
    }
  }
}

// The smallest of 1, 2, 2.5, 5 times a power of ten that is >= x (x > 0).
double nice_at_least(double x) {
  double decade = std::pow(10.0, std::floor(std::log10(x)));
  for (;; decade *= 10) {
    for (double m : {1.0, 2.0, 2.5, 5.0}) {
      if (m * decade >= x * (1 - 1e-12)) return m * decade;
    }
  }
}

std::string format_time(double t) {
  std::ostringstream out;
  out << std::setprecision(4) << t;
  return out.str();
}

// Labels: each compute span's label, left-aligned in its box and padded with spaces.
void paint_labels(const TimelineRow& row, double columns_per_unit, std::string& line) {
  for (const Span& s : row.spans) {
    if (!is_compute(s.kind)) continue;
    const int x0 = column_of(s.start, columns_per_unit);
    const int x1 = std::min<int>(column_of(s.end, columns_per_unit), static_cast<int>(line.size()));
    for (int x = x0; x < x1; ++x) {
      const size_t i = static_cast<size_t>(x - x0);
      line[static_cast<size_t>(x)] = i < s.label.size() ? s.label[i] : ' ';
    }
  }
}

// Letters: each column shows the compute span covering its middle, if any.
void paint_letters(const TimelineRow& row, double columns_per_unit, std::string& line) {
  for (const Span& s : row.spans) {
    if (!is_compute(s.kind) || s.end <= s.start) continue;
    char c = letter(s.kind);
    if (s.chunk > 0 && s.chunk % 2 == 1) c = static_cast<char>(std::tolower(c));
    // Columns whose middle (x + 0.5) / columns_per_unit lies in [start, end).
    const int x0 = static_cast<int>(std::ceil(s.start * columns_per_unit - 0.5));
    const int x1 = static_cast<int>(std::ceil(s.end * columns_per_unit - 0.5));
    for (int x = std::max(x0, 0); x < std::min<int>(x1, static_cast<int>(line.size())); ++x) {
      line[static_cast<size_t>(x)] = c;
    }
  }
}

}  // namespace

std::string render_timeline_ascii(const Timeline& timeline, const AsciiOptions& options) {
  DTRAIN_CHECK(options.max_width >= 10, "ASCII timeline width must be >= 10, got ",
               options.max_width);
  const double end = timeline.end_time();
  double min_duration = 0;
  size_t max_label = 1;
  for (const TimelineRow& row : timeline.rows) {
    for (const Span& s : row.spans) {
      if (!is_compute(s.kind) || s.end <= s.start) continue;
      const double d = s.end - s.start;
      min_duration = min_duration == 0 ? d : std::min(min_duration, d);
      max_label = std::max(max_label, s.label.size());
    }
  }
  // Scale: labels fit when the shortest box is as wide as the longest label.
  double columns_per_unit = 1;
  bool labels = false;
  if (end > 0 && min_duration > 0) {
    columns_per_unit = static_cast<double>(max_label) / min_duration;
    labels = std::ceil(end * columns_per_unit - 1e-9) <= options.max_width;
    if (!labels) columns_per_unit = 1 / nice_at_least(end / options.max_width);
  }
  const int width =
      end > 0 ? std::max(1, static_cast<int>(std::ceil(end * columns_per_unit - 1e-9))) : 1;

  size_t name_width = 4;  // "time"
  for (const TimelineRow& row : timeline.rows) name_width = std::max(name_width, row.name.size());
  auto pad = [&](const std::string& s) { return s + std::string(name_width - s.size(), ' '); };

  std::ostringstream out;
  for (const TimelineRow& row : timeline.rows) {
    std::string line(static_cast<size_t>(width), kIdle);
    if (labels) {
      paint_labels(row, columns_per_unit, line);
    } else {
      paint_letters(row, columns_per_unit, line);
    }
    out << pad(row.name) << " |" << line << "|\n";
  }

  // Time axis: a '+' at each tick, the tick's time written under it when there is room.
  const double step = tick_step(columns_per_unit, 8);
  std::string ticks(static_cast<size_t>(width) + 1, '-');
  std::string values(static_cast<size_t>(width) + 8, ' ');
  int free_from = 0;
  for (int k = 0; column_of(k * step, columns_per_unit) <= width; ++k) {
    const double t = k * step;
    const int x = column_of(t, columns_per_unit);
    ticks[static_cast<size_t>(x)] = '+';
    const std::string v = format_time(t);
    if (x < free_from || x + v.size() > values.size()) continue;
    values.replace(static_cast<size_t>(x), v.size(), v);
    free_from = x + static_cast<int>(v.size()) + 1;
  }
  while (!values.empty() && values.back() == ' ') values.pop_back();
  out << pad("") << " " << ticks << "\n";
  out << pad("time") << " " << values << "\n";
  out << pad("") << " 1 column = " << format_time(1 / columns_per_unit) << " " << timeline.time_unit
      << "; "
      << (labels ? "F forward, B backward, W weight gradient + micro-batch (a, b, c: chunk)"
                 : "F forward, B backward, W weight gradient (lower case: odd chunk)")
      << "; . idle\n";
  return out.str();
}

}  // namespace dtrain::trace
