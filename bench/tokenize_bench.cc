// The tokenizer benchmark: training timed on the corpus, the corpus repeated into a temporary
// text file, the file read alone and encoded (read, encode, write), each timed once; each part's
// lines print as soon as it is measured.
#include "bench/tokenize_bench.h"

#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/scratch_dir.h"
#include "dtrain/core/check.h"
#include "dtrain/core/files.h"
#include "dtrain/core/timer.h"
#include "dtrain/data/data.h"

namespace dtrain::bench {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// `text` repeated until the file holds at least `bytes` bytes.
void write_repeated(const fs::path& path, const std::string& text, int64_t bytes) {
  std::ofstream out(path, std::ios::binary);
  for (int64_t written = 0; written < bytes; written += static_cast<int64_t>(text.size())) {
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  DTRAIN_CHECK(out.good(), "bench tokenize: cannot write the temporary text ", path.string());
}

// MB/s of reading `path` in 1 MiB blocks (the encoder's reads, without the encoding).
double read_mb_per_s(const fs::path& path) {
  const Stopwatch watch;
  std::ifstream in(path, std::ios::binary);
  std::vector<char> block(size_t{1} << 20);
  int64_t bytes = 0;
  while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
    bytes += in.gcount();
  }
  const double s = watch.elapsed_s();
  return static_cast<double>(bytes) / 1e6 / s;
}

}  // namespace

TokenizeBenchReport run_tokenize_bench(const TokenizeBenchOptions& o, std::ostream* rows) {
  DTRAIN_CHECK(o.text_mb > 0, "--mb must be positive (got ", o.text_mb, ")");
  TokenizeBenchReport report;
  report.options = o;
  report.corpus = o.corpus.empty() ? data::default_corpus_path() : o.corpus;
  check_input_file(report.corpus, "--corpus");
  const auto row = [&](void (*print)(const TokenizeBenchReport&, std::ostream&)) {
    if (rows == nullptr) return;
    print(report, *rows);
    rows->flush();
  };
  // Removed on return, on an error and on Ctrl-C or SIGTERM.
  const ScratchDir temp("dtrain-bench-tokenize",
                        {"tok.model", "text.txt", "tokens.bin", "tokens_parallel.bin"});
  const std::string model = temp.file("tok.model");
  report.trained = data::train_tokenizer(
      {.corpus = report.corpus, .model = model, .vocab = o.vocab, .type = o.type});
  const data::Tokenizer tokenizer(model, "--model");
  const std::string corpus = read_file(report.corpus);
  report.round_trip = tokenizer.decode(tokenizer.encode(corpus)) == corpus;
  row(print_trained);
  const std::string text = temp.file("text.txt");
  write_repeated(text, corpus, o.text_mb * 1000000);
  report.read_mb_per_s = read_mb_per_s(text);
  row(print_read);
  report.encoded = data::encode_file(tokenizer, text, temp.file("tokens.bin"), 1);
  row(print_encoded);
  if (std::thread::hardware_concurrency() > 1) {
    report.encoded_parallel = data::encode_file(tokenizer, text, temp.file("tokens_parallel.bin"));
    DTRAIN_CHECK(read_file(temp.file("tokens.bin")) == read_file(temp.file("tokens_parallel.bin")),
                 "bench tokenize: ", report.encoded_parallel.threads,
                 " threads encoded other tokens than one thread");
    row(print_encoded_parallel);
  }
  return report;
}

void print_trained(const TokenizeBenchReport& r, std::ostream& out) {
  const char* type = r.options.type == data::TokenizerType::bpe ? "bpe" : "unigram";
  const double train_mb_per_s =
      static_cast<double>(r.trained.corpus_bytes) / 1e6 / r.trained.seconds;
  out << "bench tokenize: " << type << ", " << r.trained.vocab << " pieces, trained on " << r.corpus
      << "\n";
  out << "  train:  " << fixed(static_cast<double>(r.trained.corpus_bytes) / 1e6, 2) << " MB in "
      << fixed(r.trained.seconds, 2) << " s, " << fixed(train_mb_per_s, 2)
      << " MB/s (one thread)\n";
  out << "  round trip decode(encode(corpus)) == corpus: " << (r.round_trip ? "yes" : "NO") << "\n";
}

void print_read(const TokenizeBenchReport& r, std::ostream& out) {
  out << "  read alone: " << fixed(r.read_mb_per_s, 0)
      << " MB/s (the encoded text, 1 MiB blocks)\n";
}

void print_encoded(const TokenizeBenchReport& r, std::ostream& out) {
  const double encode_mb_per_s =
      static_cast<double>(r.encoded.input_bytes) / 1e6 / r.encoded.seconds;
  out << "  encode: " << fixed(static_cast<double>(r.encoded.input_bytes) / 1e6, 1)
      << " MB (the corpus repeated) into " << r.encoded.tokens << " tokens ("
      << fixed(static_cast<double>(r.encoded.input_bytes) / static_cast<double>(r.encoded.tokens),
               2)
      << " bytes/token) in " << fixed(r.encoded.seconds, 2) << " s: " << fixed(encode_mb_per_s, 1)
      << " MB/s; encode / read " << fixed(encode_mb_per_s / r.read_mb_per_s, 4) << "\n";
}

void print_encoded_parallel(const TokenizeBenchReport& r, std::ostream& out) {
  if (r.encoded_parallel.threads <= 1) return;
  const double encode_mb_per_s =
      static_cast<double>(r.encoded.input_bytes) / 1e6 / r.encoded.seconds;
  const double parallel_mb_per_s =
      static_cast<double>(r.encoded_parallel.input_bytes) / 1e6 / r.encoded_parallel.seconds;
  out << "  encode on " << r.encoded_parallel.threads << " threads: " << fixed(parallel_mb_per_s, 1)
      << " MB/s (" << fixed(parallel_mb_per_s / encode_mb_per_s, 2)
      << "x one thread), the same file\n";
}

void print_report(const TokenizeBenchReport& r, std::ostream& out) {
  print_trained(r, out);
  print_read(r, out);
  print_encoded(r, out);
  print_encoded_parallel(r, out);
}

nlohmann::json to_json(const TokenizeBenchReport& r) {
  return {{"corpus", r.corpus},
          {"type", r.options.type == data::TokenizerType::bpe ? "bpe" : "unigram"},
          {"vocab", r.trained.vocab},
          {"train_bytes", r.trained.corpus_bytes},
          {"train_s", r.trained.seconds},
          {"encode_bytes", r.encoded.input_bytes},
          {"encode_tokens", r.encoded.tokens},
          {"encode_s", r.encoded.seconds},
          {"encode_mb_per_s", static_cast<double>(r.encoded.input_bytes) / 1e6 / r.encoded.seconds},
          {"encode_threads", r.encoded_parallel.threads},
          {"encode_parallel_s", r.encoded_parallel.seconds},
          {"read_mb_per_s", r.read_mb_per_s},
          {"round_trip", r.round_trip}};
}

}  // namespace dtrain::bench
