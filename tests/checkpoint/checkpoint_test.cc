// Checkpoints: every layout's checkpoint loads into every other layout with parameters, AdamW
// moments and step bitwise equal (resharding); K steps + resume + N-K steps equal N steps bit
// for bit; bad files (truncated, flipped, missing, not JSON, lying) fail with the file named.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "dtrain/core/check.h"
#include "dtrain/model/precision.h"
#include "dtrain/model/tp_shard.h"
#include "run/checkpoint_harness.h"

namespace dtrain::checkpoint {
namespace {

using namespace train::testing;
namespace fs = std::filesystem;

// Trains `layout` for `steps` steps and saves under `root`; returns the checkpoint written.
std::string train_and_save(const Layout& layout, int64_t steps, const fs::path& root) {
  train::TrainerConfig t = ckpt_trainer(steps, steps);
  t.checkpoint.save_dir = root.string();
  std::string dir;
  std::mutex mu;
  on_layout(layout, [&](train::StepEngine& engine, int rank) {
    train::Trainer loop(t, engine, ckpt_data());
    const train::TrainSummary s = loop.run();
    std::lock_guard<std::mutex> lock(mu);
    if (rank == 0) dir = s.last_checkpoint;
  });
  return dir;
}

TEST(Checkpoint, EveryLayoutLoadsIntoEveryOtherBitwise) {
  const fs::path tmp = fresh_dir("matrix");
  const std::vector<Layout> layouts = matrix_layouts();
  for (const Layout& a : layouts) {
    const std::string saved = train_and_save(a, 2, tmp / a.name);
    const LoadedCheckpoint source = load_checkpoint(saved);
    EXPECT_EQ(source.manifest.layout.dp, a.dp);
    EXPECT_EQ(source.manifest.layout.pp, a.pp);
    EXPECT_EQ(source.state.adam_step, 2);
    EXPECT_EQ(source.manifest.files.size(), static_cast<size_t>(a.ranks()));
    for (const Layout& b : layouts) {
      // Load A's state into layout B, then write B's own checkpoint and read it back.
      const fs::path root = tmp / (a.name + "-to-" + b.name);
      on_layout(b, [&](train::StepEngine& engine, int) {
        engine.import_state(source.state);
        save_checkpoint(engine, source.state.model, source.manifest.position, root.string(), 0);
      });
      const LoadedCheckpoint loaded = load_checkpoint(root.string());
      expect_same_state(source.state, loaded.state, a.name + " -> " + b.name);
      EXPECT_EQ(loaded.manifest.position.step, 2);
    }
  }
  fs::remove_all(tmp);
}

// N steps straight, and K steps + save + resume + N - K steps under `root`: the same losses and
// final state, bit for bit.
void expect_resume_continues_bit_for_bit(const Layout& l, const fs::path& root) {
  const int64_t N = 4, K = 2;
  std::vector<float> straight_losses, resumed_losses;
  train::TrainerConfig straight = ckpt_trainer(N, N);
  straight.checkpoint.save_dir = (root / "straight").string();
  on_layout(l, [&](train::StepEngine& engine, int rank) {
    train::Trainer loop(straight, engine, ckpt_data());
    const train::TrainSummary s = loop.run();
    if (rank == 0) straight_losses = s.train_losses;
  });
  train::TrainerConfig first = ckpt_trainer(K, N);
  first.checkpoint.save_dir = (root / "cut").string();
  on_layout(
      l, [&](train::StepEngine& engine, int) { train::Trainer(first, engine, ckpt_data()).run(); });
  train::TrainerConfig second = ckpt_trainer(N, N);
  second.checkpoint.save_dir = (root / "cut").string();
  second.checkpoint.resume = (root / "cut").string();  // through the "latest" pointer
  on_layout(l, [&](train::StepEngine& engine, int rank) {
    train::Trainer loop(second, engine, ckpt_data());
    const train::TrainSummary s = loop.run();
    if (rank == 0) {
      resumed_losses = s.train_losses;
      EXPECT_EQ(s.first_step, K);
    }
  });
  const std::string what = l.name + " " + std::string(model::precision_name(l.precision));
  ASSERT_EQ(straight_losses.size(), static_cast<size_t>(N)) << what;
  const std::vector<float> tail(straight_losses.begin() + K, straight_losses.end());
  EXPECT_TRUE(same_bits(tail, resumed_losses)) << what;
  expect_same_state(load_checkpoint((root / "straight").string()).state,
                    load_checkpoint((root / "cut").string()).state, what);
}

// On each layout.
TEST(Checkpoint, ResumeContinuesBitForBit) {
  const fs::path tmp = fresh_dir("resume");
  for (const Layout& l :
       {Layout{"one rank"}, Layout{"dp2-zero2", 2, 2}, Layout{"dp4-zero3", 4, 3},
        Layout{"tp2", 1, 0, 2}, Layout{"pp2", 1, 0, 1, 2}, Layout{"dp2-tp2-zero1", 2, 1, 2},
        Layout{"dp2-tp2-pp2-zero3-sp", 2, 3, 2, 2, true}}) {
    expect_resume_continues_bit_for_bit(l, tmp / l.name);
  }
  fs::remove_all(tmp);
}

// Mixed precision (--precision bf16) checkpoints its fp32 master weights as the parameters, with
// the moments: a bf16 run's checkpoint loads into every layout in either precision and writes
// the same state back bit for bit (an fp32 run holds those weights as its parameters; a bf16 run
// as its master, rounding its bf16 weights from them), and a bf16 run's resume continues bit for
// bit like an fp32 one's.
TEST(Checkpoint, MixedPrecisionStateCrossesPrecisionsAndLayoutsBitwise) {
  const fs::path tmp = fresh_dir("mixed");
  constexpr model::Precision kBf16 = model::Precision::bf16;
  const std::vector<Layout> targets = matrix_layouts();
  for (Layout a : {Layout{"one rank"}, Layout{"dp2-zero1", 2, 1},
                   Layout{"dp2-tp2-pp2-zero3-sp", 2, 3, 2, 2, true}}) {
    a.precision = kBf16;
    const std::string saved = train_and_save(a, 2, tmp / ("bf16-" + a.name));
    const LoadedCheckpoint source = load_checkpoint(saved);
    for (Layout b : targets) {
      for (model::Precision p : {model::Precision::fp32, kBf16}) {
        b.precision = p;
        const std::string what =
            "bf16 " + a.name + " -> " + b.name + " " + std::string(model::precision_name(p));
        const fs::path root = tmp / ("bf16-" + a.name + "-to-" + b.name + "-" +
                                     std::string(model::precision_name(p)));
        on_layout(b, [&](train::StepEngine& engine, int) {
          engine.import_state(source.state);
          save_checkpoint(engine, source.state.model, source.manifest.position, root.string(), 0);
        });
        expect_same_state(source.state, load_checkpoint(root.string()).state, what);
      }
    }
  }
  // Resume, in bf16.
  for (Layout l : {Layout{"one rank"}, Layout{"dp2-zero2", 2, 2}, Layout{"dp2-tp2-zero1", 2, 1, 2},
                   Layout{"dp2-tp2-pp2-zero3-sp", 2, 3, 2, 2, true}}) {
    l.precision = kBf16;
    expect_resume_continues_bit_for_bit(l, tmp / ("resume-" + l.name));
  }
  fs::remove_all(tmp);
}

TEST(Checkpoint, RetentionKeepsTheNewestAndLatestPointsToIt) {
  const fs::path root = fresh_dir("retention");
  train::TrainerConfig t = ckpt_trainer(5, 5);
  t.checkpoint.save_dir = root.string();
  t.checkpoint.save_every = 1;
  t.checkpoint.keep = 2;
  on_layout({"dp2-zero1", 2, 1},
            [&](train::StepEngine& e, int) { train::Trainer(t, e, ckpt_data()).run(); });
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  // Beside the checkpoints: the run's record and its lock file (checkpoint/save_directory.h).
  EXPECT_EQ(names, (std::vector<std::string>{".lock", "latest", "run.json", "step-00000004",
                                             "step-00000005"}));
  std::ifstream latest(root / "latest");
  std::string line;
  std::getline(latest, line);
  EXPECT_EQ(line, "step-00000005");
  fs::remove_all(root);
}

// What a crash in the middle of a save leaves (a temporary directory with partial files, no
// rename) is invisible to readers, and the next save of that step cleans it up.
TEST(Checkpoint, AnInterruptedSaveLeavesThePreviousCheckpointWhole) {
  const fs::path root = fresh_dir("interrupted");
  const std::string first = train_and_save({"dp2-zero2", 2, 2}, 1, root);
  const SerialState before = load_checkpoint(root.string()).state;
  fs::create_directories(root / ".tmp-step-00000002");
  std::ofstream(root / ".tmp-step-00000002" / "rank-00000.bin") << "partial";
  std::ofstream(root / ".tmp-step-00000002" / "manifest.json") << "{\"format\": ";
  const LoadedCheckpoint after = load_checkpoint(root.string());
  EXPECT_EQ(after.dir, first);
  expect_same_state(before, after.state, "after an interrupted save");
  on_layout({"one rank"}, [&](train::StepEngine& engine, int) {
    engine.import_state(after.state);
    TrainerPosition p = after.manifest.position;
    p.step = 2;
    save_checkpoint(engine, after.state.model, p, root.string(), 0);
  });
  EXPECT_FALSE(fs::exists(root / ".tmp-step-00000002"));
  EXPECT_EQ(load_checkpoint(root.string()).manifest.position.step, 2);
  fs::remove_all(root);
}

TEST(Checkpoint, TpSliceRangesNameTheElementsOfTheSlice) {
  const model::GptConfig m = ckpt_config().model;
  const model::ParamTable table = model::gpt_param_table(m);
  for (const model::ParamTensor& t : table.tensors()) {
    std::vector<float> values(static_cast<size_t>(t.count));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> slice = model::tp_slice(t, values, m, 2, r);
      size_t at = 0;
      for (const model::FlatRange& range : model::tp_slice_ranges(t, m, 2, r)) {
        for (int64_t j = 0; j < range.count; ++j, ++at) {
          ASSERT_EQ(slice[at], static_cast<float>(range.offset + j)) << t.name << " rank " << r;
        }
      }
      for (; at < slice.size(); ++at) EXPECT_EQ(slice[at], 0.0f) << t.name << " padding";
    }
  }
}

// --- bad input

class CheckpointErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fresh_dir("errors");
    good_ = train_and_save({"dp2-zero1", 2, 1}, 1, root_ / "good");
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // A copy of the good checkpoint to break.
  static fs::path copy(const std::string& name) {
    const fs::path dir = root_ / name;
    fs::remove_all(dir);
    fs::copy(good_, dir);
    return dir;
  }
  static std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void write_text(const fs::path& p, const std::string& s) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
  }
  // Loading `dir` fails with a message containing every one of `words`.
  static void expect_load_error(const fs::path& dir, const std::vector<std::string>& words) {
    try {
      load_checkpoint(dir.string());
      ADD_FAILURE() << "loading " << dir << " succeeded";
    } catch (const Error& e) {
      for (const std::string& w : words) {
        EXPECT_NE(std::string(e.what()).find(w), std::string::npos)
            << "'" << e.what() << "' lacks '" << w << "'";
      }
    }
  }

  static fs::path root_;
  static std::string good_;
};
fs::path CheckpointErrors::root_;
std::string CheckpointErrors::good_;

TEST_F(CheckpointErrors, TheGoodOneLoads) {
  EXPECT_NO_THROW(load_checkpoint(good_));
}

TEST_F(CheckpointErrors, TruncatedShard) {
  const fs::path dir = copy("truncated");
  fs::resize_file(dir / "rank-00001.bin", 1000);
  expect_load_error(dir, {"rank-00001.bin", "1000 bytes, the manifest says"});
}

TEST_F(CheckpointErrors, FlippedByte) {
  const fs::path dir = copy("flipped");
  std::string bytes = read_text(dir / "rank-00000.bin");
  bytes[4000] = static_cast<char>(bytes[4000] ^ 0x10);
  write_text(dir / "rank-00000.bin", bytes);
  expect_load_error(dir, {"rank-00000.bin", "checksum mismatch"});
}

TEST_F(CheckpointErrors, MissingShardFile) {
  const fs::path dir = copy("missing");
  fs::remove(dir / "rank-00001.bin");
  expect_load_error(dir, {"rank-00001.bin", "missing"});
}

TEST_F(CheckpointErrors, ManifestNotJson) {
  const fs::path dir = copy("notjson");
  write_text(dir / "manifest.json", "{ this is not json");
  expect_load_error(dir, {"manifest.json", "not valid JSON"});
}

TEST_F(CheckpointErrors, ManifestForAnotherModelShape) {
  const LoadedCheckpoint c = load_checkpoint(good_);
  model::GptConfig other = c.manifest.model;
  other.layers = 2;
  try {
    check_compatible(c, other, c.manifest.position.batch, c.manifest.position.seq);
    ADD_FAILURE() << "a 2-layer run accepted a 4-layer checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another model shape"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("manifest.json"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointErrors, ManifestLiesAboutSizes) {
  using nlohmann::json;
  const json good = json::parse(read_text(fs::path(good_) / "manifest.json"));
  struct Lie {
    std::string name;
    std::function<void(json&)> edit;
    std::string words;
  };
  const std::vector<Lie> lies = {
      {"file-bytes", [](json& j) { j["files"][0]["bytes"] = 12; }, "ends past"},
      {"shape", [](json& j) { j["tensors"][0]["shape"][0] = 300; }, "shape that does not match"},
      {"layers", [](json& j) { j["model"]["layers"] = 3; }, "tensors"},
      {"count", [](json& j) { j["tensors"][1]["pieces"][0]["count"] = 7; }, "ranges hold"},
      {"range", [](json& j) { j["tensors"][1]["pieces"][0]["ranges"][0][0] = 100000; },
       "outside the"},
      {"offset", [](json& j) { j["tensors"][1]["pieces"][0]["offset"] = -5; }, "below"},
      {"dropped-piece", [](json& j) { j["tensors"][1]["pieces"].erase(0); }, "incomplete"},
      {"file-path", [](json& j) { j["files"][0]["name"] = "../x.bin"; }, "plain file name"},
      {"kind", [](json& j) { j["tensors"][1]["pieces"][0]["kind"] = "grad"; }, "not param"},
  };
  for (const Lie& lie : lies) {
    const fs::path dir = copy("lie-" + lie.name);
    json j = good;
    lie.edit(j);
    write_text(dir / "manifest.json", j.dump());
    SCOPED_TRACE(lie.name);
    expect_load_error(dir, {"manifest.json", lie.words});
  }
}

// Every prefix of a valid manifest, and every shard read against a shorter buffer, is an error
// (never a crash or an out-of-bounds read: run under the sanitizers in CI).
TEST_F(CheckpointErrors, TruncatedInputsAreErrorsNotCrashes) {
  const std::string text = read_text(fs::path(good_) / "manifest.json");
  for (size_t n = 0; n < text.size(); n += 97) {
    EXPECT_THROW(parse_manifest(std::string_view(text).substr(0, n), "m"), Error) << n;
  }
  EXPECT_THROW(parse_manifest(std::string(100000, '['), "m"), Error);
  EXPECT_THROW(parse_manifest("", "m"), Error);
  EXPECT_THROW(parse_manifest("[]", "m"), Error);
  const Manifest m = parse_manifest(text, "m");
  const std::string shard = read_text(fs::path(good_) / "rank-00000.bin");
  const auto bytes = std::as_bytes(std::span<const char>(shard.data(), shard.size()));
  const ShardEntry& e = m.entries.front();
  ASSERT_EQ(e.file, 0);
  EXPECT_NO_THROW(read_shard(bytes, e, "f"));
  for (size_t n : {size_t{0}, size_t{4}, static_cast<size_t>(e.byte_offset + 3)}) {
    EXPECT_THROW(read_shard(bytes.first(n), e, "f"), Error) << n;
  }
}

// A shard file records its step after the magic (format 2); files of format 1 (no step) are
// read as before, and a piece may not start inside either header.
TEST(CheckpointShard, StepInTheHeaderAndTheFirstFormat) {
  const float values[2] = {1.5f, -2.0f};
  const auto piece = std::as_bytes(std::span<const float>(values));
  const auto shard = [&](std::string_view magic, std::optional<int64_t> step) {
    std::vector<std::byte> bytes(magic.size());
    std::memcpy(bytes.data(), magic.data(), magic.size());
    if (step) {
      bytes.resize(bytes.size() + sizeof(int64_t));
      std::memcpy(bytes.data() + magic.size(), &*step, sizeof(int64_t));
    }
    bytes.insert(bytes.end(), piece.begin(), piece.end());
    return bytes;
  };
  ShardEntry e;
  e.tensor = "wte";
  e.count = 2;
  e.crc32 = crc32(piece);

  const std::vector<std::byte> v1 = shard(kShardMagicNoStep, std::nullopt);
  EXPECT_EQ(shard_step(v1, "v1"), std::nullopt);
  e.byte_offset = 8;
  EXPECT_EQ(read_shard(v1, e, "v1"), std::vector<float>({1.5f, -2.0f}));

  const std::vector<std::byte> v2 = shard(kShardMagic, 20);
  EXPECT_EQ(shard_step(v2, "v2"), std::optional<int64_t>(20));
  EXPECT_THROW(read_shard(v2, e, "v2"), Error);  // offset 8 lies in the step field
  e.byte_offset = kShardHeaderBytes;
  EXPECT_EQ(read_shard(v2, e, "v2"), std::vector<float>({1.5f, -2.0f}));

  std::vector<std::byte> bad = v2;
  bad[7] = std::byte{'9'};
  EXPECT_THROW(shard_step(bad, "bad"), Error);
  EXPECT_THROW(shard_step(std::span<const std::byte>(v2).first(12), "short"), Error);
}

TEST_F(CheckpointErrors, ResumeOfANonCheckpointNamesTheFlag) {
  const fs::path dir = root_ / "empty";
  fs::create_directories(dir);
  expect_load_error(dir, {"--resume", "manifest.json"});
}

}  // namespace
}  // namespace dtrain::checkpoint
