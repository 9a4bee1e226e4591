// Room checkpoint/ (dtrain::checkpoint): the sharded format, the save directory and its lock,
// resharding, the state a checkpoint carries; includes data, comm, model and core.
//
// Sharded checkpoints: a directory with a JSON manifest and one binary shard file per rank,
// written atomically by every rank of any layout and read back into any other
// (docs/checkpoints.md).
//
// Fuzz-facing entry points: each reads only the text or bytes it is given and reports bad input
// by throwing dtrain::Error (never a crash, never a read outside the input):
//   parse_manifest(std::string_view json_text, std::string_view source)
//   read_shard(std::span<const std::byte> bytes, const ShardEntry& entry, std::string_view file)
//   assemble_state(const Manifest& manifest, std::span<const std::span<const std::byte>> files,
//                  std::string_view source)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/checkpoint/checkpointable.h"
#include "dtrain/checkpoint/run_record.h"
#include "dtrain/checkpoint/train_state.h"
#include "dtrain/data/data.h"
#include "dtrain/model/gpt_config.h"
#include "dtrain/model/tp_shard.h"

namespace dtrain::checkpoint {

// Version 2 adds the run record ("run": id, version, settings); version 1 is still read.
inline constexpr int kCheckpointVersion = 2;
inline constexpr std::string_view kManifestName = "manifest.json";
inline constexpr std::string_view kLatestName = "latest";  // a root's pointer file
// Every shard file starts with these 8 bytes, then the step it was saved at (little-endian
// int64), so that a manifest can be checked against its shards; the pieces follow as
// little-endian float32. Shard files of the first format ("dtrshrd1", no step) are still read.
inline constexpr std::string_view kShardMagic = "dtrshrd2";
inline constexpr std::string_view kShardMagicNoStep = "dtrshrd1";
inline constexpr int64_t kShardHeaderBytes = 16;  // magic + step

// One piece of one shard file: `count` float32 values at `byte_offset`, the elements `ranges`
// of the serial tensor's flat index space, in order.
struct ShardEntry {
  std::string tensor;
  StateKind kind = StateKind::param;
  int file = 0;  // index into Manifest::files
  int64_t byte_offset = 0;
  int64_t count = 0;
  std::vector<model::FlatRange> ranges;
  uint32_t crc32 = 0;  // of the piece's bytes
};

struct ShardFile {
  std::string name;  // "rank-00003.bin", relative to the checkpoint directory
  int64_t bytes = 0;
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // the serial (global) shape; dtype is always f32
};

// Where the training loop stands: enough to continue bit for bit.
struct TrainerPosition {
  int64_t step = 0;   // updates done
  int64_t batch = 0;  // B
  int64_t seq = 0;    // T
  uint64_t data_seed = 0;
  data::SamplerState sampler;  // the data loader's RNG and batches drawn
};

struct Manifest {
  model::GptConfig model;
  StateLayout layout;
  TrainerPosition position;
  int64_t adam_step = 0;
  std::vector<TensorInfo> tensors;  // gpt_param_table order
  std::vector<ShardFile> files;     // one per rank of the writing job
  std::vector<ShardEntry> entries;
  std::optional<RunRecord> run;  // absent in version 1 manifests
};

// What --save, --save-every, --keep-checkpoints and --resume ask for.
struct CheckpointConfig {
  std::string save_dir;    // root of step-numbered checkpoints; empty: no saving
  int64_t save_every = 0;  // also save after every N steps (0: only at the end)
  int keep = 0;            // keep the newest K checkpoints under save_dir (0: all)
  std::string resume;      // a checkpoint directory, or a root with a "latest" pointer
  bool overwrite = false;  // --overwrite: take over a save_dir holding another run's checkpoints
  bool allow_resume_changes = false;  // --allow-resume-changes: resume with other settings
};

// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), as zlib's crc32.
// `previous` continues a running CRC as zlib's crc32(crc, buf, len) does:
// crc32(b, crc32(a)) == crc32(a followed by b).
uint32_t crc32(std::span<const std::byte> bytes, uint32_t previous = 0);

// --- writing (every rank of the job calls save_checkpoint with the same arguments)

// Writes `engine`'s state as root/step-NNNNNNNN: each rank its shard file, rank 0 the manifest,
// then one rename makes it visible and root/latest is replaced atomically; checkpoints beyond
// the newest `keep` (0: none) of this run's (`run`'s id) are removed; another run's are left
// alone unless `overwrite`. Meets the other ranks at job_communicator()->barrier().
// Returns the directory written.
std::string save_checkpoint(Checkpointable& engine, const model::GptConfig& model,
                            const TrainerPosition& position, const std::string& root, int keep,
                            const RunRecord& run = {}, bool overwrite = false);

// --- reading

// The manifest's text as a Manifest; `source` (the file name) prefixes every error.
Manifest parse_manifest(std::string_view json_text, std::string_view source);
std::string manifest_to_json(const Manifest& manifest);
// The piece `entry` of a shard file's bytes, after checking the file's magic, that the piece
// lies inside `bytes` and its checksum. Errors name `file`.
// The step a shard file was saved at; nullopt for the first format, which has none. Throws
// Error naming `file` when the magic is neither format's.
std::optional<int64_t> shard_step(std::span<const std::byte> bytes, std::string_view file);
std::vector<float> read_shard(std::span<const std::byte> bytes, const ShardEntry& entry,
                              std::string_view file);
// The serial state from the manifest and every shard file's bytes (files[i] is
// manifest.files[i]): each element of each tensor's params, adam_m and adam_v must be
// written exactly once (errors name `source`, the manifest). Holds the whole model in memory.
SerialState assemble_state(const Manifest& manifest,
                           std::span<const std::span<const std::byte>> files,
                           std::string_view source);

// `path` (a checkpoint directory, or a root with a "latest" pointer) resolved to the checkpoint
// directory, and its manifest; the shards are not read.
struct CheckpointManifest {
  std::string dir;
  Manifest manifest;
};
CheckpointManifest read_manifest(const std::string& path, std::string_view flag = "--resume");

struct LoadedCheckpoint {
  std::string dir;  // the checkpoint directory read
  Manifest manifest;
  SerialState state;
};
// `path` is a checkpoint directory (it holds manifest.json) or a root holding a "latest"
// pointer. Errors name the file at fault and start with `flag`.
LoadedCheckpoint load_checkpoint(const std::string& path, std::string_view flag = "--resume");
// How the model a checkpoint was written for differs from this run's, one entry a field in the
// flags' words ("layers 4 (this run: 2)", "top-k 2 (this run: 1)", "dense (this run: experts
// 4)"); with `training_settings` also the MoE routing settings that shape no tensor
// (capacity-factor, aux-loss-coef).
std::vector<std::string> model_differences(const model::GptConfig& checkpoint,
                                           const model::GptConfig& run, bool training_settings);
// Throws naming `flag`, the manifest and every differing field unless the checkpoint was
// written for `model` and the run's batch shape (--global-batch, --seq-length). With
// `allow_setting_changes` (--allow-resume-changes) the MoE routing settings may differ.
void check_compatible(const LoadedCheckpoint& checkpoint, const model::GptConfig& model,
                      int64_t batch, int64_t seq, std::string_view flag = "--resume",
                      bool allow_setting_changes = false);

}  // namespace dtrain::checkpoint
