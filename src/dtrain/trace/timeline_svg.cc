// render_timeline_svg: a fixed layout (name column, rows, axis, legend) written as plain SVG
// elements, with every text escaped. Colours follow the kind; model chunks fade with the chunk.
#include "dtrain/trace/timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <string_view>

#include "dtrain/core/check.h"
#include "dtrain/trace/svg_text.h"
#include "dtrain/trace/write_file.h"

namespace dtrain::trace {
namespace {

constexpr int kNameWidth = 80;  // left column with "rank 0"
constexpr int kTop = 34;        // title
constexpr int kCommHeight = 6;  // send/receive lane under a row
constexpr int kRowGap = 8;
constexpr int kAxisHeight = 30;
constexpr int kLegendHeight = 24;
constexpr int kRightMargin = 20;
constexpr int kKinds = static_cast<int>(SpanKind::other) + 1;

std::string_view colour(SpanKind kind) {
  switch (kind) {
    case SpanKind::forward:
      return "#4e79a7";
    case SpanKind::backward:
      return "#f28e2b";
    case SpanKind::backward_input:
      return "#59a14f";
    case SpanKind::backward_weight:
      return "#b07aa1";
    case SpanKind::send:
      return "#9c755f";
    case SpanKind::recv:
      return "#bab0ac";
    case SpanKind::collective:
      return "#e15759";
    case SpanKind::async_collective:
      return "#76b7b2";
    case SpanKind::context_parallel:
      return "#edc948";
    case SpanKind::other:
      return "#79706e";
  }
  return "#000000";
}

std::string_view legend_text(SpanKind kind) {
  switch (kind) {
    case SpanKind::forward:
      return "F forward";
    case SpanKind::backward:
      return "B backward (B+W)";
    case SpanKind::backward_input:
      return "B input gradient";
    case SpanKind::backward_weight:
      return "W weight gradient";
    case SpanKind::send:
      return "send";
    case SpanKind::recv:
      return "receive (waiting)";
    case SpanKind::collective:
      return "collective (TP)";
    case SpanKind::async_collective:
      return "DP / ZeRO (comm thread)";
    case SpanKind::context_parallel:
      return "CP attention exchange";
    case SpanKind::other:
      return "other";
  }
  return "?";
}

// Later model chunks are drawn lighter: chunk 0 solid, then 70%, 50%, ... (never below 35%).
double opacity(int chunk) {
  return chunk <= 0 ? 1.0 : std::max(0.35, 1.0 - 0.3 * chunk);
}

// The smallest of 1, 2, 5, 10, 20, ... time units whose ticks are at least 60 px apart.
double tick_step(double px_per_unit) {
  for (double decade = 1e-3;; decade *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * decade * px_per_unit >= 60) return m * decade;
    }
  }
}

}  // namespace

std::string render_timeline_svg(const Timeline& timeline, const SvgOptions& options) {
  DTRAIN_CHECK(options.plot_width_px >= 100, "SVG plot width must be >= 100 px, got ",
               options.plot_width_px);
  DTRAIN_CHECK(options.row_height_px >= 8, "SVG row height must be >= 8 px, got ",
               options.row_height_px);
  const double end = std::max(timeline.end_time(), 1e-9);
  const double px_per_unit = options.plot_width_px / end;
  const int lane = options.communication ? kCommHeight : 0;
  const int row_pitch = options.row_height_px + lane + kRowGap;
  const int rows = static_cast<int>(timeline.rows.size());
  const int plot_bottom = kTop + rows * row_pitch;
  const int width = kNameWidth + options.plot_width_px + kRightMargin;
  const int height = plot_bottom + kAxisHeight + kLegendHeight;
  auto x_of = [&](double t) { return kNameWidth + t * px_per_unit; };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << kNameWidth << "\" y=\"20\" font-size=\"14\">" << xml_escape(timeline.title)
      << "</text>\n";

  bool used[kKinds] = {};
  bool chunks = false;
  for (int r = 0; r < rows; ++r) {
    const TimelineRow& row = timeline.rows[static_cast<size_t>(r)];
    const int y = kTop + r * row_pitch;
    svg << "<g class=\"row\">\n";
    svg << "<text x=\"6\" y=\"" << y + options.row_height_px / 2 + 4 << "\">"
        << xml_escape(row.name) << "</text>\n";
    svg << "<rect class=\"idle\" x=\"" << kNameWidth << "\" y=\"" << y << "\" width=\""
        << options.plot_width_px << "\" height=\"" << options.row_height_px
        << "\" fill=\"#f3f3f3\"/>\n";
    for (const Span& s : row.spans) {
      const bool compute = is_compute(s.kind);
      if (!compute && (!options.communication || s.end <= s.start)) continue;
      used[static_cast<int>(s.kind)] = true;
      chunks = chunks || s.chunk > 0;
      const double x = x_of(s.start);
      const double w = std::max(0.5, (s.end - s.start) * px_per_unit);
      const int box_y = compute ? y : y + options.row_height_px + 1;
      const int box_h = compute ? options.row_height_px : lane - 1;
      svg << "<rect class=\"" << name(s.kind) << "\" x=\"" << svg_number(x) << "\" y=\"" << box_y
          << "\" width=\"" << svg_number(w) << "\" height=\"" << box_h << "\" fill=\""
          << colour(s.kind) << "\" fill-opacity=\"" << svg_number(opacity(s.chunk))
          << "\" stroke=\"white\""
          << " stroke-width=\"0.5\"><title>" << xml_escape(row.name) << ": " << xml_escape(s.label)
          << " [" << svg_number(s.start) << ", " << svg_number(s.end) << "] "
          << xml_escape(timeline.time_unit) << "</title></rect>\n";
      // The micro-batch number, when the box is wide enough for it.
      if (compute && s.microbatch >= 0) {
        const std::string text = std::to_string(s.microbatch);
        if (w >= 7.0 * static_cast<double>(text.size()) + 4) {
          svg << "<text x=\"" << svg_number(x + w / 2) << "\" y=\""
              << y + options.row_height_px / 2 + 4 << "\" text-anchor=\"middle\" fill=\"white\">"
              << text << "</text>\n";
        }
      }
    }
    svg << "</g>\n";
  }

  // Time axis.
  svg << "<g class=\"axis\">\n";
  svg << "<line x1=\"" << kNameWidth << "\" y1=\"" << plot_bottom << "\" x2=\""
      << kNameWidth + options.plot_width_px << "\" y2=\"" << plot_bottom
      << "\" stroke=\"black\"/>\n";
  const double step = tick_step(px_per_unit);
  for (int k = 0; k * step <= end * (1 + 1e-9); ++k) {
    const double x = x_of(k * step);
    svg << "<line x1=\"" << svg_number(x) << "\" y1=\"" << plot_bottom << "\" x2=\""
        << svg_number(x) << "\" y2=\"" << plot_bottom + 5 << "\" stroke=\"black\"/>";
    svg << "<text x=\"" << svg_number(x) << "\" y=\"" << plot_bottom + 17
        << "\" text-anchor=\"middle\">" << svg_number(k * step) << "</text>\n";
  }
  svg << "<text x=\"" << kNameWidth + options.plot_width_px << "\" y=\"" << plot_bottom + 28
      << "\" text-anchor=\"end\">time (" << xml_escape(timeline.time_unit) << ")</text>\n";
  svg << "</g>\n";

  // Legend: the kinds that appear.
  svg << "<g class=\"legend\">\n";
  int lx = kNameWidth;
  const int ly = plot_bottom + kAxisHeight + 6;
  for (int k = 0; k < kKinds; ++k) {
    if (!used[k]) continue;
    const auto kind = static_cast<SpanKind>(k);
    svg << "<rect x=\"" << lx << "\" y=\"" << ly << "\" width=\"12\" height=\"12\" fill=\""
        << colour(kind) << "\"/><text x=\"" << lx + 16 << "\" y=\"" << ly + 10 << "\">"
        << legend_text(kind) << "</text>\n";
    lx += 26 + 7 * static_cast<int>(legend_text(kind).size());
  }
  if (chunks) {
    svg << "<text x=\"" << lx << "\" y=\"" << ly + 10 << "\">lighter: later model chunk</text>\n";
  }
  svg << "</g>\n</svg>\n";
  return svg.str();
}

void write_timeline_svg(const Timeline& timeline, const std::string& path,
                        const SvgOptions& options) {
  write_file(path, render_timeline_svg(timeline, options));
}

}  // namespace dtrain::trace
