// Text inside the SVG files trace/ writes: XML-escaped strings and numbers at 6 significant
// digits (enough for pixel positions and axis labels, short in the file).
#pragma once

#include <iomanip>
#include <sstream>
#include <string>
#include <string_view>

namespace dtrain::trace {

// `text` with &, <, > and " escaped, for element text and attribute values.
inline std::string xml_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

inline std::string svg_number(double v) {
  std::ostringstream out;
  out << std::setprecision(6) << v;
  return out.str();
}

}  // namespace dtrain::trace
