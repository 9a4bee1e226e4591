// Writes the fuzz targets' seed corpora with the real writers: `fuzz_seeds DIR` fills
// DIR/<target>/ with a few valid inputs per target (scripts/fuzz runs it before fuzzing), so
// the fuzzer starts from well-formed files and mutates them instead of guessing the format.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../checkpoint_bundle.h"
#include "dtrain/checkpoint/checkpoint.h"
#include "dtrain/comm/threads/backend.h"
#include "dtrain/data/data.h"
#include "dtrain/data/token_file.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "dtrain/formats/safetensors.h"
#include "dtrain/machine/hardware.h"

namespace fs = std::filesystem;

namespace {

void write_seed(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// cluster_fuzz: the first byte picks the parser ('j', even: JSON; 's', odd: a --cluster spec).
void cluster_seeds(const fs::path& dir) {
  const std::vector<std::string> specs = {"8x8xH100", "1xA100", "64x8xA100-80GB"};
  for (size_t i = 0; i < specs.size(); ++i) {
    write_seed(dir, "spec" + std::to_string(i), "s" + specs[i]);
    const dtrain::plan::Cluster c = dtrain::plan::parse_cluster(specs[i]);
    write_seed(dir, "json" + std::to_string(i), "j" + dtrain::plan::to_json(c).dump(1));
  }
  write_seed(dir, "json_preset", R"(j{"preset": "H100", "nodes": 4})");
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A model small enough that a whole checkpoint (params and both AdamW moments) is a few KB,
// with C = 6 over 2 heads and an odd parameter count so ZeRO pads its last shard.
dtrain::train::StepConfig tiny_config() {
  dtrain::train::StepConfig c;
  c.model = {.vocab = 11, .context = 4, .layers = 1, .heads = 2, .channels = 6};
  c.batch = 2;
  c.seq = 4;
  c.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
  c.init_seed = 5;
  return c;
}

const std::vector<int32_t>& tokens() {
  static const std::vector<int32_t> t = [] {
    std::vector<int32_t> v(64);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>((i * 7 + 3) % 11);
    return v;
  }();
  return t;
}

// One step, then save_checkpoint: the real writer, so the seeds hold real moments and ranges.
std::string train_and_save(dtrain::train::StepEngine& engine, const fs::path& root) {
  const dtrain::train::StepConfig c = tiny_config();
  dtrain::data::BatchSampler sampler(tokens(), c.batch, c.seq, 7);
  dtrain::data::Batch batch;
  sampler.next(batch);
  engine.train_step(batch, 1e-2f);
  dtrain::checkpoint::TrainerPosition position;
  position.step = 1;
  position.batch = c.batch;
  position.seq = c.seq;
  position.data_seed = 7;
  position.sampler = sampler.state();
  return dtrain::checkpoint::save_checkpoint(engine, c.model, position, root.string(), 0);
}

// Seeds for both checkpoint targets from one written checkpoint directory.
void checkpoint_seeds(const fs::path& out, const std::string& tag, const fs::path& dir) {
  const std::string manifest = read_all(dir / dtrain::checkpoint::kManifestName);
  write_seed(out / "checkpoint_manifest_fuzz", tag, manifest);
  const dtrain::checkpoint::Manifest m = dtrain::checkpoint::parse_manifest(manifest, tag);
  std::vector<std::string> files;
  for (const dtrain::checkpoint::ShardFile& f : m.files) files.push_back(read_all(dir / f.name));
  write_seed(out / "checkpoint_shard_fuzz", tag, dtrain::fuzz::join_bundle(manifest, files));
  // The raw read_shard form ('r', offset, count, crc32, file bytes) for the first piece.
  const dtrain::checkpoint::ShardEntry& e = m.entries.front();
  std::string raw(21, '\0');
  raw[0] = 'r';
  std::memcpy(raw.data() + 1, &e.byte_offset, 8);
  std::memcpy(raw.data() + 9, &e.count, 8);
  std::memcpy(raw.data() + 17, &e.crc32, 4);
  write_seed(out / "checkpoint_shard_fuzz", tag + "_piece",
             raw + files[static_cast<size_t>(e.file)]);
}

// token_file_fuzz: the first byte is the mode (bit 0: a .bin name; bit 1: --vocab given, 2^(bits
// 2.. mod 17)); an llm.c file and a raw .bin of a few tokens below 2^9 = 512.
void token_file_seeds(const fs::path& dir) {
  std::string tokens;
  for (uint16_t t = 0; t < 64; ++t) {
    const auto v = static_cast<uint16_t>((t * 37) % 512);
    tokens.append(reinterpret_cast<const char*>(&v), 2);
  }
  std::vector<int32_t> header(256, 0);
  header[0] = dtrain::data::kLlmcMagic;
  header[1] = dtrain::data::kLlmcVersionUint16;
  header[2] = 64;
  const std::string head(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  const char vocab_512 = static_cast<char>(2 | (9 << 2));
  write_seed(dir, "llmc", std::string(1, '\0') + head + tokens);
  write_seed(dir, "llmc_vocab", std::string(1, static_cast<char>(vocab_512 | 1)) + head + tokens);
  write_seed(dir, "raw", std::string(1, static_cast<char>(vocab_512 | 1)) + tokens);
  write_seed(dir, "text", std::string(1, '\0') + "some text");
}

// safetensors_fuzz: the real writer's files, F32 and BF16, with metadata and a scalar.
void safetensors_seeds(const fs::path& dir) {
  const std::vector<dtrain::formats::SafetensorsTensor> tensors = {
      {"wte.weight", {4, 2}, {0.5f, -1, 2, 3, 4, 5, 6, 7}},
      {"h.0.ln_1.bias", {2}, {1e-3f, -2}},
      {"scalar", {}, {42}}};
  write_seed(dir, "f32",
             dtrain::formats::safetensors_bytes(tensors, dtrain::formats::SafetensorsDtype::f32,
                                                {{"format", "pt"}}));
  write_seed(dir, "bf16",
             dtrain::formats::safetensors_bytes(tensors, dtrain::formats::SafetensorsDtype::bf16));
}

void all_checkpoint_seeds(const fs::path& out) {
  const fs::path tmp =
      fs::temp_directory_path() / ("dtrain-fuzz-seeds-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  // One rank; then two data-parallel ranks under ZeRO 1 and 3: two shard files, pieces that are
  // ranges.
  for (int zero : {-1, 1, 3}) {
    dtrain::train::LayoutOptions layout;
    layout.dp = zero < 0 ? 1 : 2;
    layout.zero_stage = std::max(zero, 0);
    const dtrain::train::EngineConfig config =
        dtrain::train::make_engine_config(tiny_config(), layout);
    const std::string tag = zero < 0 ? "serial" : "dp2_zero" + std::to_string(zero);
    std::string dir;
    dtrain::comm::threads::run_ranks(layout.dp, [&](dtrain::comm::Communicator& world) {
      dtrain::train::Engine engine(config, world);
      const std::string written = train_and_save(engine, tmp / tag);
      if (world.rank() == 0) dir = written;
    });
    checkpoint_seeds(out, tag, dir);
  }
  fs::remove_all(tmp);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  try {
    cluster_seeds(root / "cluster_fuzz");
    token_file_seeds(root / "token_file_fuzz");
    safetensors_seeds(root / "safetensors_fuzz");
    all_checkpoint_seeds(root);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
