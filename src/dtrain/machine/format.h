// Formatting shared by the planner's reports: GB as 10^9 bytes (the ZeRO paper's and the GPU
// datasheets' convention), times with a unit that fits, counts with thousands separators, and
// the two string helpers the tables and preset lookups need.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtrain::plan {

std::string format_gb(double bytes);          // "62.14 GB", "0.026 GB", "1.10 TB"
std::string format_seconds(double seconds);   // "1.23 s", "45.6 ms", "12.0 us"
std::string format_percent(double fraction);  // "12.3%"
std::string format_count(double n);           // "1,234,567"
std::string format_params(double params);     // "68.98B", "355.0M"
std::string format_rate(double bytes_per_s);  // "450 GB/s"
std::string format_fixed(double v, int decimals);
std::string format_sci(double v);  // "3.14e+23"
// FLOP/s with the SI prefix that fits: "989 TFLOP/s" for an H100, "52.3 GFLOP/s" for a CPU core.
std::string format_flops(double flops_per_s);

std::string pad_right(std::string s, size_t width);  // s, then spaces up to `width`
std::string lowercase(std::string_view s);

// A text table whose columns follow their content: each column is as wide as its widest cell
// plus one space, and at least its `min_widths` entry (the layout a report has for usual
// figures); the last column is not padded. A long value (a huge model's bytes, a link that spans
// thousands of nodes) widens its column instead of running into the next one.
class TextTable {
 public:
  explicit TextTable(std::vector<size_t> min_widths, std::string indent = "  ")
      : min_widths_(std::move(min_widths)), indent_(std::move(indent)) {}
  void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string render() const;

 private:
  std::vector<size_t> min_widths_;
  std::string indent_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace dtrain::plan
