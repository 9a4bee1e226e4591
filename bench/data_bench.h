// Batch assembly from a token file: `dtrain bench data` maps a token file (--data, or an llm.c
// file of random GPT-2 tokens it writes to a temporary folder), times the open-time scan, then
// the sampler's (B, T) batches read from the mapping, beside the same batches from the same
// tokens held as int32 in memory (the byte path's storage) when they fit in 1 GiB.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace dtrain::bench {

struct DataBenchOptions {
  std::string data;              // empty: write a temporary llm.c file of `tokens` tokens
  std::optional<int64_t> vocab;  // --vocab for a raw .bin
  int64_t tokens = 32 << 20;     // of the temporary file (64 MiB of uint16)
  int64_t batch = 8;             // B
  int64_t seq = 1024;            // T
  int64_t batches = 500;         // per timed round
  int rounds = 5;                // the median round is reported
};

struct DataBenchReport {
  DataBenchOptions options;
  std::string file;    // what was read
  std::string format;  // "llm.c", "raw uint16", "text"
  int64_t file_bytes = 0;
  int64_t tokens = 0;
  double open_s = 0;           // map and scan
  double mapped_mb_per_s = 0;  // batch bytes (int32 inputs + targets) per second, from the file
  double memory_mb_per_s = 0;  // the same from int32 tokens in memory; 0 when not run
  double batch_mb = 0;         // bytes of one batch, MB
};

DataBenchReport run_data_bench(const DataBenchOptions& options);
void print_report(const DataBenchReport& report, std::ostream& out);
nlohmann::json to_json(const DataBenchReport& report);

}  // namespace dtrain::bench
