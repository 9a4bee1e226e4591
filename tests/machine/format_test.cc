// The planner's number formatting over every magnitude a report can meet: each figure reads
// back as the value it stands for (to its printed precision), stays short enough for its
// table column, and never runs into the next column.
#include "dtrain/machine/format.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace dtrain::plan {
namespace {

// The value a "<number> <unit>" string stands for, with the unit's power of ten.
double read_back(const std::string& s, const std::string& base_unit) {
  const size_t space = s.find(' ');
  EXPECT_NE(space, std::string::npos) << s;
  const double number = std::strtod(s.substr(0, space).c_str(), nullptr);
  const std::string unit = s.substr(space + 1);
  static const char kPrefixes[] = "GTPEZY";
  if (unit == "B") return number;
  if (unit.size() == base_unit.size() + 1 && unit.substr(1) == base_unit) {
    const char* p = std::strchr(kPrefixes, unit[0]);
    EXPECT_NE(p, nullptr) << s;
    return number * std::pow(10.0, 9 + 3 * (p - kPrefixes));
  }
  ADD_FAILURE() << "unexpected unit in " << s;
  return 0;
}

TEST(Format, BytesAtEveryMagnitudeReadBackAndFitTheColumn) {
  // 1 B .. 1e40 B in steps of a third of a decade, both signs: up to yotta the value is
  // scaled, past it the bytes are in scientific notation; either way 11 characters at most
  // (the report's column is 12 wide, so a space always separates it from the note).
  for (int tenth = 0; tenth <= 400; tenth += 3) {
    for (double sign : {1.0, -1.0}) {
      const double bytes = sign * std::pow(10.0, tenth / 10.0);
      const std::string s = format_gb(bytes);
      EXPECT_LE(s.size(), 11u) << bytes << " -> " << s;
      EXPECT_EQ(s.find("e+") != std::string::npos, std::fabs(bytes) >= 1e27) << s;
      const double back = read_back(s, "B");
      // 3 or 4 significant digits (0.5%), and below 1 GB three decimals of a GB (0.5 MB).
      EXPECT_NEAR(back, bytes, std::fabs(bytes) * 5e-3 + 5e5) << bytes << " -> " << s;
    }
  }
}

TEST(Format, BytesPickTheUnitAfterRounding) {
  EXPECT_EQ(format_gb(0), "0.00 GB");
  EXPECT_EQ(format_gb(26e6), "0.026 GB");
  EXPECT_EQ(format_gb(62.14e9), "62.14 GB");
  EXPECT_EQ(format_gb(999.96e9), "1.00 TB");  // not "1000.0 GB"
  EXPECT_EQ(format_gb(1.1e12), "1.10 TB");
  EXPECT_EQ(format_gb(192022.21e12), "192.0 PB");  // was "192022.21 TB", 12 characters
  EXPECT_EQ(format_gb(3.5e24), "3.50 YB");
  EXPECT_EQ(format_gb(999.4e24), "999.4 YB");
  EXPECT_EQ(format_gb(1e30), "1.00e+30 B");
  EXPECT_EQ(format_gb(-2.5e15), "-2.50 PB");
  EXPECT_EQ(format_gb(INFINITY), "inf GB");
  EXPECT_EQ(format_gb(NAN), "nan GB");
}

TEST(Format, OtherFiguresStayShortAtHugeMagnitudes) {
  for (int decade = 0; decade <= 40; ++decade) {
    const double v = std::pow(10.0, decade);
    EXPECT_LE(format_seconds(v).size(), 12u) << format_seconds(v);
    EXPECT_LE(format_params(v).size(), 12u) << format_params(v);
    EXPECT_LE(format_rate(v).size(), 16u) << format_rate(v);
    EXPECT_LE(format_count(v).size(), 25u) << format_count(v);
    EXPECT_NEAR(std::strtod(format_seconds(v).c_str(), nullptr), v, v * 5e-3);
    if (v >= 1e9) {
      EXPECT_NEAR(std::strtod(format_rate(v).c_str(), nullptr) * 1e9, v, v * 0.06);
    }
  }
  EXPECT_EQ(format_seconds(2.5e7), "2.50e+07 s");
  EXPECT_EQ(format_params(174.6e9), "174.60B");
  EXPECT_EQ(format_params(3e20), "3.00e+20");
  EXPECT_EQ(format_rate(450e9), "450 GB/s");
  EXPECT_EQ(format_rate(1.9e24), "1.90e+15 GB/s");
  EXPECT_EQ(format_count(1234567), "1,234,567");
  EXPECT_EQ(format_count(1e30), "1.00e+30");
}

}  // namespace
}  // namespace dtrain::plan
