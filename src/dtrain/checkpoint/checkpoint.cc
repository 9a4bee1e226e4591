// Checkpoint files: shard writing with fsync, the rank-0 manifest merge, the atomic rename and
// "latest" pointer, retention; manifest parsing and shard reading that check every size, range
// and checksum before touching the bytes.
#include "dtrain/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "dtrain/checkpoint/save_directory.h"
#include "dtrain/core/check.h"
#include "dtrain/model/param_table.h"

namespace dtrain::checkpoint {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Counts and offsets beyond this are lies: no shard of our models comes near 2^40 bytes, and
// staying far below 2^63 keeps every sum below free of overflow.
constexpr int64_t kMaxSize = int64_t{1} << 40;

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string shard_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.bin", rank);
  return buf;
}

std::string index_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.json", rank);
  return buf;
}

// Writes `bytes` to `path` and flushes them to the disk before returning.
void write_synced(const fs::path& path, std::span<const std::byte> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  DTRAIN_CHECK(fd >= 0, "checkpoint: cannot create ", path.string(), ": ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error(str("checkpoint: cannot write ", path.string(), ": ", why));
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  DTRAIN_CHECK(synced, "checkpoint: cannot flush ", path.string(), ": ", std::strerror(errno));
}

void write_synced(const fs::path& path, std::string_view text) {
  write_synced(path, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

// A rename or a new entry is durable only once the directory holding it is flushed.
void sync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  DTRAIN_CHECK(fd >= 0, "checkpoint: cannot open directory ", dir.string(), ": ",
               std::strerror(errno));
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  DTRAIN_CHECK(synced, "checkpoint: cannot flush directory ", dir.string(), ": ",
               std::strerror(errno));
}

std::vector<std::byte> read_file(const fs::path& path, std::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  DTRAIN_CHECK(in.good(), flag, ": cannot open ", path.string(), " (missing or unreadable)");
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(raw.size());
  if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

json ranges_to_json(const std::vector<model::FlatRange>& ranges) {
  json out = json::array();
  for (const model::FlatRange& r : ranges) out.push_back({r.offset, r.count});
  return out;
}

// Named and numbered like a collective (every rank saves at the same steps, so the numbers
// agree), so a rank that fails while the others wait here is reported with the operation.
void barrier(comm::Communicator* comm, const char* phase) {
  if (comm == nullptr) return;
  comm::OperationScope scope(*comm,
                             str("checkpoint barrier (", phase, ") #", comm->next_sequence()));
  comm->barrier();
}

// --- strict JSON field access: every error names the source and the field.

const json& field(const json& obj, std::string_view key, std::string_view where,
                  std::string_view source) {
  DTRAIN_CHECK(obj.is_object(), source, ": ", where, " is not a JSON object");
  const auto it = obj.find(key);
  DTRAIN_CHECK(it != obj.end(), source, ": ", where, " has no field \"", key, "\"");
  return *it;
}

int64_t get_int(const json& obj, std::string_view key, std::string_view where,
                std::string_view source, int64_t min = 0, int64_t max = kMaxSize) {
  const json& v = field(obj, key, where, source);
  DTRAIN_CHECK(v.is_number_integer(), source, ": ", where, ".", key, " is not an integer");
  DTRAIN_CHECK(v.is_number_unsigned() || v.get<int64_t>() >= min, source, ": ", where, ".", key,
               " = ", v.dump(), " is below ", min);
  DTRAIN_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(max), source,
               ": ", where, ".", key, " = ", v.dump(), " is above ", max);
  const int64_t x = v.get<int64_t>();
  DTRAIN_CHECK(x >= min && x <= max, source, ": ", where, ".", key, " = ", x, " is outside [", min,
               ", ", max, "]");
  return x;
}

uint64_t get_u64(const json& obj, std::string_view key, std::string_view where,
                 std::string_view source) {
  const json& v = field(obj, key, where, source);
  DTRAIN_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), source,
               ": ", where, ".", key, " is not a non-negative integer");
  return v.get<uint64_t>();
}

std::string get_string(const json& obj, std::string_view key, std::string_view where,
                       std::string_view source) {
  const json& v = field(obj, key, where, source);
  DTRAIN_CHECK(v.is_string(), source, ": ", where, ".", key, " is not a string");
  return v.get<std::string>();
}

const json& get_array(const json& obj, std::string_view key, std::string_view where,
                      std::string_view source) {
  const json& v = field(obj, key, where, source);
  DTRAIN_CHECK(v.is_array(), source, ": ", where, ".", key, " is not an array");
  return v;
}

StateKind parse_kind(const std::string& text, std::string_view where, std::string_view source) {
  for (StateKind k : {StateKind::param, StateKind::adam_m, StateKind::adam_v}) {
    if (text == name(k)) return k;
  }
  throw Error(str(source, ": ", where, ".kind \"", text, "\" is not param, adam_m or adam_v"));
}

// A manifest nests 6 levels deep; refusing deep nesting before parsing bounds the parser's
// work and memory on hostile input ("[[[[...").
void check_nesting(std::string_view text, std::string_view source) {
  constexpr int kMaxDepth = 32;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
      continue;
    }
    if (ch == '"') in_string = true;
    if (ch == '[' || ch == '{') {
      DTRAIN_CHECK(++depth <= kMaxDepth, source, ": not a manifest (nested deeper than ", kMaxDepth,
                   " levels)");
    }
    if (ch == ']' || ch == '}') --depth;
  }
}

// The entries one rank wrote, as the small index file it leaves for rank 0.
json rank_index(const std::vector<ShardEntry>& entries, int64_t bytes, int64_t adam_step) {
  json list = json::array();
  for (const ShardEntry& e : entries) {
    list.push_back({{"tensor", e.tensor},
                    {"kind", name(e.kind)},
                    {"offset", e.byte_offset},
                    {"count", e.count},
                    {"ranges", ranges_to_json(e.ranges)},
                    {"crc32", e.crc32}});
  }
  return {{"bytes", bytes}, {"adam_step", adam_step}, {"entries", list}};
}

// Rank 0: the manifest from every rank's index file.
Manifest merge_indexes(const fs::path& dir, int ranks, const model::GptConfig& model,
                       const StateLayout& layout, const TrainerPosition& position) {
  Manifest m;
  m.model = model;
  m.layout = layout;
  m.position = position;
  const model::ParamTable table = model::gpt_param_table(model);
  for (const model::ParamTensor& t : table.tensors()) {
    m.tensors.push_back({t.name, t.shape});
  }
  for (int r = 0; r < ranks; ++r) {
    const fs::path path = dir / index_name(r);
    const std::vector<std::byte> bytes = read_file(path, "checkpoint");
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const json index = json::parse(text);
    const int64_t adam_step = index.at("adam_step").get<int64_t>();
    DTRAIN_CHECK(r == 0 || adam_step == m.adam_step, "checkpoint: rank ", r, " is at AdamW step ",
                 adam_step, ", rank 0 at ", m.adam_step);
    m.adam_step = adam_step;
    m.files.push_back({shard_name(r), index.at("bytes").get<int64_t>()});
    for (const json& e : index.at("entries")) {
      ShardEntry entry;
      entry.tensor = e.at("tensor").get<std::string>();
      entry.kind = parse_kind(e.at("kind").get<std::string>(), "entry", path.string());
      entry.file = r;
      entry.byte_offset = e.at("offset").get<int64_t>();
      entry.count = e.at("count").get<int64_t>();
      for (const json& range : e.at("ranges")) {
        entry.ranges.push_back({range.at(0).get<int64_t>(), range.at(1).get<int64_t>()});
      }
      entry.crc32 = e.at("crc32").get<uint32_t>();
      m.entries.push_back(std::move(entry));
    }
  }
  return m;
}

// Keeps the newest `keep` checkpoints of run `run_id`; never touches another run's, unless
// `overwrite` (the user handed the directory to this run), when those go too.
void prune(const fs::path& root, int keep, const std::string& newest, const std::string& run_id,
           bool overwrite) {
  std::vector<std::string> dirs;
  for (const fs::directory_entry& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (!e.is_directory() || !n.starts_with("step-") || n == newest) continue;
    if (checkpoint_run_id((root / n).string()) == run_id) {
      dirs.push_back(n);
    } else if (overwrite) {
      fs::remove_all(root / n);
    }
  }
  if (keep <= 0) return;
  dirs.push_back(newest);
  std::sort(dirs.begin(), dirs.end());  // zero-padded step numbers sort as numbers
  const size_t limit = static_cast<size_t>(keep);
  for (size_t i = 0; i + limit < dirs.size(); ++i) {
    if (dirs[i] != newest) fs::remove_all(root / dirs[i]);
  }
}

}  // namespace

uint32_t crc32(std::span<const std::byte> bytes, uint32_t previous) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  uint32_t c = previous ^ 0xFFFFFFFFu;
  for (std::byte b : bytes) c = table[(c ^ static_cast<uint32_t>(b)) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string save_checkpoint(Checkpointable& engine, const model::GptConfig& model,
                            const TrainerPosition& position, const std::string& root, int keep,
                            const RunRecord& run, bool overwrite) {
  comm::Communicator* comm = engine.job_communicator();
  const int rank = comm != nullptr ? comm->rank() : 0;
  const int ranks = comm != nullptr ? comm->size() : 1;
  const fs::path base(root);
  const std::string final_name = step_dir_name(position.step);
  const fs::path tmp = base / (".tmp-" + final_name);
  if (rank == 0) {
    std::error_code ec;
    fs::create_directories(base, ec);
    DTRAIN_CHECK(fs::is_directory(base), "--save: cannot create directory ", root,
                 ec ? ": " + ec.message() : std::string());
    fs::remove_all(tmp);  // what a crash during an earlier save left behind
    fs::create_directory(tmp);
  }
  barrier(comm, "directory ready");

  // This rank's shard file: the magic and the step, then every piece's float32 values.
  const RankState state = engine.export_state();
  std::vector<std::byte> bytes(static_cast<size_t>(kShardHeaderBytes));
  std::memcpy(bytes.data(), kShardMagic.data(), kShardMagic.size());
  const int64_t step = position.step;  // little-endian, as the floats (x86 and ARM both)
  std::memcpy(bytes.data() + kShardMagic.size(), &step, sizeof step);
  std::vector<ShardEntry> entries;
  for (const StatePiece& p : state.pieces) {
    ShardEntry e;
    e.tensor = p.tensor;
    e.kind = p.kind;
    e.file = rank;
    e.byte_offset = static_cast<int64_t>(bytes.size());
    e.count = static_cast<int64_t>(p.data.size());
    e.ranges = p.ranges;
    const std::span<const std::byte> piece = std::as_bytes(std::span<const float>(p.data));
    e.crc32 = crc32(piece);
    bytes.insert(bytes.end(), piece.begin(), piece.end());
    entries.push_back(std::move(e));
  }
  write_synced(tmp / shard_name(rank), bytes);
  write_synced(tmp / index_name(rank),
               rank_index(entries, static_cast<int64_t>(bytes.size()), state.adam_step).dump());
  barrier(comm, "shards written");

  const fs::path final_dir = base / final_name;
  if (rank == 0) {
    Manifest m = merge_indexes(tmp, ranks, model, engine.state_layout(), position);
    m.run = run;
    write_synced(tmp / kManifestName, manifest_to_json(m));
    for (int r = 0; r < ranks; ++r) fs::remove(tmp / index_name(r));
    sync_dir(tmp);
    // Saving a step that already exists (a resumed run): move the old one aside first, so
    // that one rename still publishes the whole new directory.
    const fs::path old = base / (".old-" + final_name);
    if (fs::exists(final_dir)) {
      fs::remove_all(old);
      fs::rename(final_dir, old);
    }
    fs::rename(tmp, final_dir);
    sync_dir(base);
    fs::remove_all(old);
    const fs::path latest_tmp = base / (std::string(kLatestName) + ".tmp");
    write_synced(latest_tmp, final_name + "\n");
    fs::rename(latest_tmp, base / kLatestName);
    sync_dir(base);
    prune(base, keep, final_name, run.id, overwrite);
  }
  barrier(comm, "published");
  return final_dir.string();
}

std::string manifest_to_json(const Manifest& m) {
  json files = json::array();
  for (const ShardFile& f : m.files) files.push_back({{"name", f.name}, {"bytes", f.bytes}});
  std::map<std::string, json> pieces;
  for (const ShardEntry& e : m.entries) {
    pieces[e.tensor].push_back({{"kind", name(e.kind)},
                                {"file", m.files.at(static_cast<size_t>(e.file)).name},
                                {"offset", e.byte_offset},
                                {"count", e.count},
                                {"ranges", ranges_to_json(e.ranges)},
                                {"crc32", e.crc32}});
  }
  json tensors = json::array();
  for (const TensorInfo& t : m.tensors) {
    json list = pieces.contains(t.name) ? pieces[t.name] : json::array();
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", "f32"}, {"pieces", list}});
  }
  const TrainerPosition& p = m.position;
  json out = {{"format", "dtrain-checkpoint"},
              {"version", kCheckpointVersion},
              {"step", p.step},
              {"adam_step", m.adam_step},
              {"model",
               {{"vocab", m.model.vocab},
                {"context", m.model.context},
                {"layers", m.model.layers},
                {"heads", m.model.heads},
                {"channels", m.model.channels}}},
              {"layout",
               {{"dp", m.layout.dp},
                {"cp", m.layout.cp},
                {"tp", m.layout.tp},
                {"pp", m.layout.pp},
                {"zero", m.layout.zero}}},
              {"trainer",
               {{"batch", p.batch},
                {"seq", p.seq},
                {"data_seed", p.data_seed},
                {"sampler_rng_state", p.sampler.rng_state},
                {"batches_drawn", p.sampler.batches_drawn}}},
              {"files", files},
              {"tensors", tensors}};
  if (m.layout.cp > 1) {
    out["layout"]["cp_algo"] = m.layout.cp_algo;
    out["layout"]["cp_split"] = m.layout.cp_split;
  }
  if (m.model.moe.enabled()) {
    // The MoE shape (its tensors) and routing settings; absent for a dense model.
    const model::MoeConfig& e = m.model.moe;
    out["model"]["moe"] = {{"experts", e.experts},
                           {"top_k", e.top_k},
                           {"every", e.every},
                           {"capacity_factor", e.capacity_factor},
                           {"aux_loss_coef", e.aux_loss_coef}};
  }
  if (m.model.llama()) {
    // The Llama family's shape and settings; absent for GPT (the family before it existed).
    const model::GptConfig& g = m.model;
    out["model"]["family"] = "llama";
    out["model"]["llama"] = {{"kv_heads", g.kv_heads_or_heads()},
                             {"ffn_hidden", g.ffn()},
                             {"rope_theta", g.rope_theta},
                             {"norm_eps", g.norm_eps},
                             {"tie_embeddings", g.tie_embeddings}};
  }
  if (m.run) out["run"] = run_record_to_json(*m.run);
  return out.dump(1) + "\n";
}

Manifest parse_manifest(std::string_view text, std::string_view source) {
  check_nesting(text, source);
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  DTRAIN_CHECK(!doc.is_discarded(), source, ": not valid JSON");
  DTRAIN_CHECK(doc.is_object(), source, ": not a JSON object");
  DTRAIN_CHECK(doc.contains("format") && doc["format"] == "dtrain-checkpoint", source,
               ": not a dtrain checkpoint manifest (no \"format\": \"dtrain-checkpoint\")");
  const int64_t version = get_int(doc, "version", "manifest", source, 0, 1 << 20);
  DTRAIN_CHECK(version >= 1 && version <= kCheckpointVersion, source, ": format version ", version,
               ", this build reads versions 1 to ", kCheckpointVersion);
  Manifest m;
  if (version >= 2) m.run = run_record_from_json(field(doc, "run", "manifest", source), source);
  const int64_t big = kMaxSize;
  m.position.step = get_int(doc, "step", "manifest", source, 0, big);
  m.adam_step = get_int(doc, "adam_step", "manifest", source, 0, big);
  const json& model = field(doc, "model", "manifest", source);
  m.model.vocab = get_int(model, "vocab", "model", source, 1, 1 << 24);
  m.model.context = get_int(model, "context", "model", source, 1, 1 << 20);
  m.model.layers = get_int(model, "layers", "model", source, 1, 1 << 12);
  m.model.heads = get_int(model, "heads", "model", source, 1, 1 << 12);
  m.model.channels = get_int(model, "channels", "model", source, 1, 1 << 16);
  DTRAIN_CHECK(m.model.channels % m.model.heads == 0, source, ": model.heads ", m.model.heads,
               " does not divide model.channels ", m.model.channels);
  if (model.contains("moe")) {
    const json& e = field(model, "moe", "model", source);
    m.model.moe.experts = get_int(e, "experts", "model.moe", source, 1, 1 << 20);
    m.model.moe.top_k = get_int(e, "top_k", "model.moe", source, 1, m.model.moe.experts);
    m.model.moe.every = get_int(e, "every", "model.moe", source, 1, m.model.layers);
    for (const char* key : {"capacity_factor", "aux_loss_coef"}) {
      DTRAIN_CHECK(e.contains(key) && e[key].is_number() && e[key].get<double>() >= 0, source,
                   ": model.moe.", key, " must be a non-negative number");
    }
    m.model.moe.capacity_factor = e["capacity_factor"].get<double>();
    m.model.moe.aux_loss_coef = e["aux_loss_coef"].get<double>();
  }
  if (model.contains("family")) {
    DTRAIN_CHECK(model["family"] == "llama" || model["family"] == "gpt", source,
                 ": model.family must be gpt or llama");
    if (model["family"] == "llama") {
      const json& l = field(model, "llama", "model", source);
      m.model.family = model::ModelFamily::llama;
      m.model.kv_heads = get_int(l, "kv_heads", "model.llama", source, 1, m.model.heads);
      m.model.ffn_hidden = get_int(l, "ffn_hidden", "model.llama", source, 1, 1 << 24);
      for (const char* key : {"rope_theta", "norm_eps"}) {
        DTRAIN_CHECK(l.contains(key) && l[key].is_number() && l[key].get<double>() > 0, source,
                     ": model.llama.", key, " must be a positive number");
      }
      m.model.rope_theta = l["rope_theta"].get<float>();
      m.model.norm_eps = l["norm_eps"].get<float>();
      DTRAIN_CHECK(l.contains("tie_embeddings") && l["tie_embeddings"].is_boolean(), source,
                   ": model.llama.tie_embeddings must be true or false");
      m.model.tie_embeddings = l["tie_embeddings"].get<bool>();
    }
  }
  const json& layout = field(doc, "layout", "manifest", source);
  m.layout.dp = static_cast<int>(get_int(layout, "dp", "layout", source, 1, 1 << 20));
  m.layout.tp = static_cast<int>(get_int(layout, "tp", "layout", source, 1, 1 << 20));
  m.layout.pp = static_cast<int>(get_int(layout, "pp", "layout", source, 1, 1 << 20));
  m.layout.zero = static_cast<int>(get_int(layout, "zero", "layout", source, 0, 3));
  // cp: absent before context parallelism (cp 1); with cp > 1 its algorithm and split.
  if (layout.contains("cp")) {
    m.layout.cp = static_cast<int>(get_int(layout, "cp", "layout", source, 1, 1 << 20));
  }
  if (m.layout.cp > 1) {
    for (auto [key, value] :
         {std::pair{"cp_algo", &m.layout.cp_algo}, std::pair{"cp_split", &m.layout.cp_split}}) {
      DTRAIN_CHECK(layout.contains(key) && layout[key].is_string(), source, ": layout.", key,
                   " must be a string when layout.cp is ", m.layout.cp);
      *value = layout[key].get<std::string>();
    }
  }
  const json& trainer = field(doc, "trainer", "manifest", source);
  m.position.batch = get_int(trainer, "batch", "trainer", source, 1, big);
  m.position.seq = get_int(trainer, "seq", "trainer", source, 1, big);
  m.position.data_seed = get_u64(trainer, "data_seed", "trainer", source);
  m.position.sampler.rng_state = get_u64(trainer, "sampler_rng_state", "trainer", source);
  m.position.sampler.batches_drawn = get_int(trainer, "batches_drawn", "trainer", source, 0, big);

  // The tensors must be exactly the model's: a manifest that lies about a shape is caught here.
  const model::ParamTable table = model::gpt_param_table(m.model);
  const json& files = get_array(doc, "files", "manifest", source);
  DTRAIN_CHECK(!files.empty() && files.size() <= (1u << 20), source, ": files has ", files.size(),
               " entries");
  std::map<std::string, int> file_index;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string where = str("files[", i, "]");
    ShardFile f{get_string(files[i], "name", where, source),
                get_int(files[i], "bytes", where, source, 0, big)};
    // A plain name inside the checkpoint directory: never a path that leaves it.
    DTRAIN_CHECK(
        !f.name.empty() && f.name.find('/') == std::string::npos && f.name != "." && f.name != "..",
        source, ": ", where, ".name \"", f.name, "\" is not a plain file name");
    DTRAIN_CHECK(file_index.emplace(f.name, static_cast<int>(i)).second, source, ": ", where,
                 ".name \"", f.name, "\" is listed twice");
    m.files.push_back(std::move(f));
  }
  const json& tensors = get_array(doc, "tensors", "manifest", source);
  DTRAIN_CHECK(tensors.size() == table.size(), source, ": ", tensors.size(),
               " tensors, the model it names (", model::gpt_param_count(m.model),
               " parameters) has ", table.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const model::ParamTensor& expect = table[i];
    const std::string where = str("tensors[", i, "]");
    TensorInfo t;
    t.name = get_string(tensors[i], "name", where, source);
    DTRAIN_CHECK(t.name == expect.name, source, ": ", where, " is \"", t.name, "\", expected \"",
                 expect.name, "\"");
    for (const json& d : get_array(tensors[i], "shape", where, source)) {
      DTRAIN_CHECK(d.is_number_integer(), source, ": ", where, ".shape has a non-integer");
      t.shape.push_back(d.get<int64_t>());
    }
    DTRAIN_CHECK(t.shape == expect.shape, source, ": ", where, " (", t.name,
                 ") has a shape that does not match the model in the manifest");
    DTRAIN_CHECK(get_string(tensors[i], "dtype", where, source) == "f32", source, ": ", where,
                 ".dtype is not f32");
    const json& pieces = get_array(tensors[i], "pieces", where, source);
    for (size_t k = 0; k < pieces.size(); ++k) {
      const std::string pw = str(where, ".pieces[", k, "]");
      const json& p = pieces[k];
      ShardEntry e;
      e.tensor = t.name;
      e.kind = parse_kind(get_string(p, "kind", pw, source), pw, source);
      const std::string file = get_string(p, "file", pw, source);
      const auto it = file_index.find(file);
      DTRAIN_CHECK(it != file_index.end(), source, ": ", pw, ".file \"", file,
                   "\" is not in files");
      e.file = it->second;
      e.byte_offset = get_int(p, "offset", pw, source, 0, big);
      e.count = get_int(p, "count", pw, source, 0, big);
      e.crc32 = static_cast<uint32_t>(get_int(p, "crc32", pw, source, 0, 0xFFFFFFFFll));
      const int64_t file_bytes = m.files[static_cast<size_t>(e.file)].bytes;
      DTRAIN_CHECK(e.byte_offset + e.count * 4 <= file_bytes, source, ": ", pw, " (bytes ",
                   e.byte_offset, " + ", e.count * 4, ") ends past the ", file_bytes, " bytes of ",
                   file);
      int64_t covered = 0;
      for (const json& r : get_array(p, "ranges", pw, source)) {
        DTRAIN_CHECK(
            r.is_array() && r.size() == 2 && r[0].is_number_integer() && r[1].is_number_integer(),
            source, ": ", pw, ".ranges holds something other than [offset, count]");
        const int64_t off = r[0].get<int64_t>(), count = r[1].get<int64_t>();
        DTRAIN_CHECK(off >= 0 && count >= 0 && off <= expect.count && count <= expect.count - off,
                     source, ": ", pw, ".ranges has [", off, ", ", count, "] outside the ",
                     expect.count, " elements of ", t.name);
        covered += count;
        e.ranges.push_back({off, count});
      }
      DTRAIN_CHECK(covered == e.count, source, ": ", pw, " ranges hold ", covered,
                   " elements, its count says ", e.count);
      m.entries.push_back(std::move(e));
    }
    m.tensors.push_back(std::move(t));
  }
  return m;
}

std::optional<int64_t> shard_step(std::span<const std::byte> bytes, std::string_view file) {
  const auto starts_with = [&](std::string_view magic) {
    return bytes.size() >= magic.size() &&
           std::memcmp(bytes.data(), magic.data(), magic.size()) == 0;
  };
  if (starts_with(kShardMagicNoStep)) return std::nullopt;
  DTRAIN_CHECK(starts_with(kShardMagic) && bytes.size() >= static_cast<size_t>(kShardHeaderBytes),
               file, ": not a dtrain shard file (bad magic)");
  int64_t step = 0;
  std::memcpy(&step, bytes.data() + kShardMagic.size(), sizeof step);
  return step;
}

std::vector<float> read_shard(std::span<const std::byte> bytes, const ShardEntry& entry,
                              std::string_view file) {
  const int64_t header =
      shard_step(bytes, file) ? kShardHeaderBytes : static_cast<int64_t>(kShardMagicNoStep.size());
  const auto size = static_cast<int64_t>(bytes.size());
  DTRAIN_CHECK(entry.byte_offset >= header && entry.count >= 0 && entry.count <= kMaxSize &&
                   entry.byte_offset <= size && entry.count * 4 <= size - entry.byte_offset,
               file, ": ", entry.tensor, " (", name(entry.kind), ") at byte ", entry.byte_offset,
               ", ", entry.count, " float32 values, lies outside the file's ", size,
               " bytes (truncated?)");
  const std::span<const std::byte> piece =
      bytes.subspan(static_cast<size_t>(entry.byte_offset), static_cast<size_t>(entry.count * 4));
  const uint32_t crc = crc32(piece);
  DTRAIN_CHECK(crc == entry.crc32, file, ": checksum mismatch in ", entry.tensor, " (",
               name(entry.kind), ") at byte ", entry.byte_offset, ": stored ", entry.crc32,
               ", computed ", crc, " (the file is corrupt)");
  std::vector<float> out(static_cast<size_t>(entry.count));
  if (!out.empty()) std::memcpy(out.data(), piece.data(), piece.size());
  return out;
}

SerialState assemble_state(const Manifest& m, std::span<const std::span<const std::byte>> files,
                           std::string_view source) {
  DTRAIN_CHECK(files.size() == m.files.size(), source, ": ", m.files.size(),
               " shard files listed, ", files.size(), " given");
  SerialState s;
  s.model = m.model;
  s.table = model::gpt_param_table(m.model);
  s.adam_step = m.adam_step;
  for (size_t i = 0; i < files.size(); ++i) {
    DTRAIN_CHECK(static_cast<int64_t>(files[i].size()) == m.files[i].bytes, m.files[i].name, ": ",
                 files[i].size(), " bytes, the manifest says ", m.files[i].bytes,
                 " (truncated or replaced)");
  }
  // Before allocating the model: the pieces must hold exactly its element count (they lie
  // inside files of known size, so a manifest cannot make us allocate more than it brought).
  const int64_t total = s.table.total_count();
  int64_t held[kStateKindCount] = {0, 0, 0};
  for (const ShardEntry& e : m.entries) {
    DTRAIN_CHECK(e.count >= 0 && e.count <= kMaxSize, source, ": a piece of ", e.tensor,
                 " has count ", e.count);
    held[static_cast<int>(e.kind)] += e.count;
  }
  for (int k = 0; k < kStateKindCount; ++k) {
    DTRAIN_CHECK(held[k] == total, source, ": the pieces of ", name(static_cast<StateKind>(k)),
                 " hold ", held[k], " elements, the model has ", total,
                 held[k] < total ? " (incomplete checkpoint)" : " (some written twice)");
  }
  int64_t file_bytes = 0;
  for (std::span<const std::byte> f : files) file_bytes += static_cast<int64_t>(f.size());
  DTRAIN_CHECK(total <= kMaxSize && 3 * total * 4 <= file_bytes, source, ": the pieces claim ",
               total, " elements of each kind, the shard files hold only ", file_bytes, " bytes");
  const auto n = static_cast<size_t>(total);
  std::vector<uint8_t> seen[kStateKindCount];
  for (int k = 0; k < kStateKindCount; ++k) {
    s.of(static_cast<StateKind>(k)).assign(n, 0.0f);
    seen[k].assign(n, 0);
  }
  for (const ShardEntry& e : m.entries) {
    DTRAIN_CHECK(e.file >= 0 && static_cast<size_t>(e.file) < files.size(), source, ": a piece of ",
                 e.tensor, " names shard file ", e.file, " of ", files.size());
    const std::string& file = m.files[static_cast<size_t>(e.file)].name;
    const std::vector<float> values = read_shard(files[static_cast<size_t>(e.file)], e, file);
    const model::ParamTensor& t = s.table[static_cast<size_t>(s.table.index_of(e.tensor))];
    std::vector<float>& dst = s.of(e.kind);
    std::vector<uint8_t>& mark = seen[static_cast<int>(e.kind)];
    size_t at = 0;
    for (const model::FlatRange& r : e.ranges) {
      DTRAIN_CHECK(r.offset >= 0 && r.count >= 0 && r.offset <= t.count &&
                       r.count <= t.count - r.offset &&
                       static_cast<size_t>(r.count) <= values.size() - at,
                   source, ": a piece of ", e.tensor, " has a range outside the tensor");
      for (int64_t j = 0; j < r.count; ++j) {
        const auto flat = static_cast<size_t>(t.offset + r.offset + j);
        DTRAIN_CHECK(mark[flat] == 0, source, ": element ", r.offset + j, " of ", e.tensor, " (",
                     name(e.kind), ") is written twice (in ", file, " and another piece)");
        mark[flat] = 1;
        dst[flat] = values[at++];
      }
    }
  }
  for (int k = 0; k < kStateKindCount; ++k) {
    const auto it = std::find(seen[k].begin(), seen[k].end(), 0);
    if (it == seen[k].end()) continue;
    const auto flat = static_cast<int64_t>(it - seen[k].begin());
    std::string tensor = "?";
    for (const model::ParamTensor& t : s.table.tensors()) {
      if (flat >= t.offset && flat < t.offset + t.count) tensor = t.name;
    }
    throw Error(str(source, ": no shard holds element ", flat, " (in ", tensor, ") of ",
                    name(static_cast<StateKind>(k)), ": the checkpoint is incomplete"));
  }
  return s;
}

CheckpointManifest read_manifest(const std::string& path, std::string_view flag) {
  fs::path dir(path);
  DTRAIN_CHECK(fs::is_directory(dir), flag, " ", path, ": no such directory");
  if (!fs::exists(dir / kManifestName) && fs::exists(dir / kLatestName)) {
    const std::vector<std::byte> raw = read_file(dir / kLatestName, flag);
    std::string name(reinterpret_cast<const char*>(raw.data()), raw.size());
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    DTRAIN_CHECK(!name.empty() && name.find('/') == std::string::npos, flag, " ",
                 (dir / kLatestName).string(), ": does not name a checkpoint directory");
    DTRAIN_CHECK(fs::is_directory(dir / name), flag, " ", (dir / kLatestName).string(), " names ",
                 name, ", but ", (dir / name).string(),
                 " is missing (deleted or moved?); give a checkpoint directory of ", path,
                 " that exists, or restore ", name);
    dir /= name;
  }
  const fs::path manifest_path = dir / kManifestName;
  DTRAIN_CHECK(fs::exists(manifest_path), flag, " ", path, ": no ", kManifestName,
               " (not a checkpoint) and no \"", kLatestName, "\" pointer");
  const std::vector<std::byte> text = read_file(manifest_path, flag);
  return {dir.string(),
          parse_manifest(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()),
                         manifest_path.string())};
}

namespace {

// The manifest's step against what else records it: the directory's name (step-00000020) and
// each shard file's header (format 2). An edited manifest would resume at one step with the
// weights of another.
void check_step_agrees(int64_t step, const fs::path& dir, const std::vector<ShardFile>& files,
                       const std::vector<std::vector<std::byte>>& contents, std::string_view flag) {
  const std::string manifest = (dir / kManifestName).string();
  const std::string dir_name = dir.filename().string();
  const bool step_named = dir_name.size() == step_dir_name(0).size() &&
                          dir_name.starts_with("step-") &&
                          dir_name.find_first_not_of("0123456789", 5) == std::string::npos;
  DTRAIN_CHECK(!step_named || dir_name == step_dir_name(step), flag, " ", manifest,
               ": the manifest says step ", step, " but its directory is ", dir_name,
               " (edited, or copied from another checkpoint?); the checkpoint is inconsistent");
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string file = (dir / files[i].name).string();
    const std::optional<int64_t> saved = shard_step(contents[i], file);
    DTRAIN_CHECK(!saved || *saved == step, flag, " ", manifest, ": the manifest says step ", step,
                 " but shard ", file, " was saved at step ", *saved,
                 " (edited, or copied from another checkpoint?); the checkpoint is inconsistent");
  }
}

}  // namespace

LoadedCheckpoint load_checkpoint(const std::string& path, std::string_view flag) {
  CheckpointManifest found = read_manifest(path, flag);
  const fs::path dir(found.dir);
  const fs::path manifest_path = dir / kManifestName;
  LoadedCheckpoint out;
  out.dir = found.dir;
  out.manifest = std::move(found.manifest);
  std::vector<std::vector<std::byte>> contents;
  for (const ShardFile& f : out.manifest.files) {
    const fs::path file = dir / f.name;
    DTRAIN_CHECK(fs::exists(file), flag, " ", file.string(),
                 ": shard file missing (the manifest lists it)");
    contents.push_back(read_file(file, flag));
  }
  check_step_agrees(out.manifest.position.step, dir, out.manifest.files, contents, flag);
  std::vector<std::span<const std::byte>> views(contents.begin(), contents.end());
  // Name the files by their full path in errors.
  Manifest named = out.manifest;
  for (ShardFile& f : named.files) f.name = (dir / f.name).string();
  out.state = assemble_state(named, views, manifest_path.string());
  return out;
}

void check_compatible(const LoadedCheckpoint& c, const model::GptConfig& model, int64_t batch,
                      int64_t seq, std::string_view flag, bool allow_setting_changes) {
  const std::string manifest = (fs::path(c.dir) / kManifestName).string();
  std::string list;
  for (const std::string& d : model_differences(c.manifest.model, model, !allow_setting_changes)) {
    list += (list.empty() ? "" : "; ") + d;
  }
  // The MoE routing settings (capacity factor, aux coefficient) train the same tensors: only a
  // refusal without --allow-resume-changes, which lets them change.
  const bool shapes_agree = model_differences(c.manifest.model, model, false).empty();
  DTRAIN_CHECK(list.empty(), flag, " ", manifest, ": ",
               shapes_agree ? "written with other MoE routing settings: "
                            : "written for another model shape: ",
               list,
               shapes_agree ? "; resume with the same flags, or pass --allow-resume-changes to "
                              "train on with the new ones"
                            : "");
  DTRAIN_CHECK(c.manifest.position.batch == batch && c.manifest.position.seq == seq, flag, " ",
               manifest, ": written with --global-batch ", c.manifest.position.batch,
               " --seq-length ", c.manifest.position.seq, ", this run has --global-batch ", batch,
               " --seq-length ", seq);
}

}  // namespace dtrain::checkpoint
