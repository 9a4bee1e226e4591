// The data benchmark: a token file written if none is given, the open timed, then rounds of
// batches from the mapping and from memory, the median round of each.
#include "bench/data_bench.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <ostream>
#include <vector>

#include "bench/bench_util.h"
#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/core/timer.h"
#include "dtrain/data/data.h"
#include "dtrain/data/token_file.h"

namespace dtrain::bench {
namespace {

namespace fs = std::filesystem;

// An llm.c token file of `count` random tokens below GPT-2's vocabulary.
void write_llmc_file(const fs::path& path, int64_t count) {
  std::vector<int32_t> header(256, 0);
  header[0] = data::kLlmcMagic;
  header[1] = data::kLlmcVersionUint16;
  header[2] = static_cast<int32_t>(count);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  Rng rng(1);
  std::vector<uint16_t> chunk(1 << 16);
  for (int64_t done = 0; done < count;) {
    const auto n = static_cast<size_t>(std::min<int64_t>(count - done, 1 << 16));
    for (size_t i = 0; i < n; ++i) {
      chunk[i] = static_cast<uint16_t>(rng.uniform_int(data::kGpt2Vocab));
    }
    out.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(2 * n));
    done += static_cast<int64_t>(n);
  }
  DTRAIN_CHECK(out.good(), "bench data: cannot write the temporary token file ", path.string());
}

// The median over rounds of batch bytes per second, MB/s.
double batch_mb_per_s(const data::TokenSource& tokens, const DataBenchOptions& o) {
  data::BatchSampler sampler(tokens, o.batch, o.seq, 7);
  data::Batch batch;
  sampler.next(batch);  // allocation outside the timing
  std::vector<double> rates;
  for (int r = 0; r < o.rounds; ++r) {
    const Stopwatch watch;
    for (int64_t k = 0; k < o.batches; ++k) sampler.next(batch);
    const double bytes = 2.0 * 4.0 * static_cast<double>(o.batch * o.seq * o.batches);
    rates.push_back(bytes / watch.elapsed_s() / 1e6);
  }
  return median(rates);
}

}  // namespace

DataBenchReport run_data_bench(const DataBenchOptions& o) {
  DTRAIN_CHECK(o.batch > 0 && o.seq > 0 && o.batches > 0 && o.rounds > 0,
               "bench data: --global-batch, --seq-length, --batches and --rounds must be positive");
  DTRAIN_CHECK(!o.data.empty() || o.tokens > o.seq, "--tokens ", o.tokens,
               " must exceed --seq-length ", o.seq);
  DataBenchReport report;
  report.options = o;
  fs::path temp;
  if (o.data.empty()) {
    temp = fs::temp_directory_path() / ("dtrain-bench-data-" + std::to_string(::getpid()));
    fs::create_directories(temp);
    report.file = (temp / "tokens.bin").string();
    write_llmc_file(report.file, o.tokens);
  } else {
    report.file = o.data;
  }
  try {
    const Stopwatch watch;
    const data::TokenData data = data::load_token_data(report.file, o.vocab);
    report.open_s = watch.elapsed_s();
    report.format = data::format_name(data.format);
    report.file_bytes = static_cast<int64_t>(fs::file_size(report.file));
    report.tokens = static_cast<int64_t>(data.tokens.size());
    DTRAIN_CHECK(report.tokens > o.seq, "--data ", report.file, " has ", report.tokens,
                 " tokens, not more than --seq-length ", o.seq);
    report.batch_mb = 2.0 * 4.0 * static_cast<double>(o.batch * o.seq) / 1e6;
    report.mapped_mb_per_s = batch_mb_per_s(data.tokens, o);
    if (report.tokens * 4 <= (int64_t{1} << 30)) {
      std::vector<int32_t> wide(data.tokens.size());
      data.tokens.copy(0, report.tokens, wide.data());
      report.memory_mb_per_s = batch_mb_per_s(data::TokenSource(wide), o);
    }
  } catch (...) {
    if (!temp.empty()) fs::remove_all(temp);
    throw;
  }
  if (!temp.empty()) fs::remove_all(temp);
  return report;
}

void print_report(const DataBenchReport& r, std::ostream& out) {
  const DataBenchOptions& o = r.options;
  out << "bench data: " << r.file << " (" << r.format << ", " << fixed(r.file_bytes / 1e6, 1)
      << " MB, " << r.tokens << " tokens)\n";
  out << "  open (map + range scan): " << fixed(r.open_s * 1e3, 1) << " ms, "
      << fixed(r.file_bytes / 1e6 / r.open_s, 0) << " MB/s of file\n";
  out << "  batches of " << o.batch << " x " << o.seq << " (" << fixed(r.batch_mb, 3)
      << " MB of int32 inputs + targets), median of " << o.rounds << " rounds of " << o.batches
      << ":\n";
  out << "    from the mapped file:  " << lpad(fixed(r.mapped_mb_per_s, 0), 8) << " MB/s\n";
  if (r.memory_mb_per_s > 0) {
    out << "    from int32 in memory:  " << lpad(fixed(r.memory_mb_per_s, 0), 8) << " MB/s\n";
    out << "    mapped / memory:       " << lpad(fixed(r.mapped_mb_per_s / r.memory_mb_per_s, 2), 8)
        << "\n";
  }
}

nlohmann::json to_json(const DataBenchReport& r) {
  return {{"file", r.file},
          {"format", r.format},
          {"file_bytes", r.file_bytes},
          {"tokens", r.tokens},
          {"batch", r.options.batch},
          {"seq", r.options.seq},
          {"batches", r.options.batches},
          {"rounds", r.options.rounds},
          {"open_s", r.open_s},
          {"mapped_mb_per_s", r.mapped_mb_per_s},
          {"memory_mb_per_s", r.memory_mb_per_s}};
}

}  // namespace dtrain::bench
