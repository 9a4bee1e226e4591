// safetensors: the header parse with its checks, F32/BF16 conversion, the writer and the atomic
// file replacement.
#include "dtrain/formats/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"

namespace dtrain::formats {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and copied as it is");

namespace {

// The specification's limit on the header (100 MB); larger is refused before any allocation.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

SafetensorsDtype parse_dtype(const std::string& name, std::string_view path,
                             std::string_view tensor) {
  if (name == "F32") return SafetensorsDtype::f32;
  if (name == "BF16") return SafetensorsDtype::bf16;
  throw Error(
      str(path, ": tensor '", tensor, "': dtype '", name, "' is not read (only F32 and BF16)"));
}

int64_t json_size(const nlohmann::json& v, std::string_view path, std::string_view tensor,
                  std::string_view field) {
  DTRAIN_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), path,
               ": tensor '", tensor, "': ", field, " holds ", v.dump(),
               ", not a non-negative integer");
  const auto u = v.get<uint64_t>();
  DTRAIN_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / 8), path,
               ": tensor '", tensor, "': ", field, " value ", u, " is too large");
  return static_cast<int64_t>(u);
}

SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& v,
                             std::string_view path) {
  DTRAIN_CHECK(v.is_object(), path, ": tensor '", name, "' is ", v.type_name(), ", not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    DTRAIN_CHECK(v.contains(key), path, ": tensor '", name, "' has no \"", key, "\"");
  }
  DTRAIN_CHECK(v["dtype"].is_string(), path, ": tensor '", name, "': dtype is not a string");
  SafetensorsEntry e;
  e.name = name;
  e.dtype = parse_dtype(v["dtype"].get<std::string>(), path, name);
  const nlohmann::json& shape = v["shape"];
  DTRAIN_CHECK(shape.is_array(), path, ": tensor '", name, "': shape is not an array");
  int64_t count = 1;
  for (const nlohmann::json& d : shape) {
    e.shape.push_back(json_size(d, path, name, "shape"));
    // Bounded so that count * dtype size cannot overflow.
    DTRAIN_CHECK(e.shape.back() == 0 || count <= (int64_t{1} << 60) / e.shape.back(), path,
                 ": tensor '", name, "': shape ", shape.dump(), " is too large");
    count *= e.shape.back();
  }
  const nlohmann::json& offsets = v["data_offsets"];
  DTRAIN_CHECK(offsets.is_array() && offsets.size() == 2, path, ": tensor '", name,
               "': data_offsets is not [begin, end]");
  e.begin = json_size(offsets[0], path, name, "data_offsets");
  e.end = json_size(offsets[1], path, name, "data_offsets");
  DTRAIN_CHECK(e.begin <= e.end, path, ": tensor '", name, "': data_offsets [", e.begin, ", ",
               e.end, ") ends before it begins");
  DTRAIN_CHECK(count * dtype_bytes(e.dtype) == e.end - e.begin, path, ": tensor '", name,
               "': shape ", shape.dump(), " of ", dtype_name(e.dtype), " is ",
               count * dtype_bytes(e.dtype), " bytes, but data_offsets [", e.begin, ", ", e.end,
               ") hold ", e.end - e.begin);
  return e;
}

}  // namespace

std::string_view dtype_name(SafetensorsDtype dtype) {
  return dtype == SafetensorsDtype::f32 ? "F32" : "BF16";
}

int64_t dtype_bytes(SafetensorsDtype dtype) {
  return dtype == SafetensorsDtype::f32 ? 4 : 2;
}

int64_t SafetensorsEntry::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const SafetensorsEntry* SafetensorsIndex::find(std::string_view name) const {
  for (const SafetensorsEntry& e : tensors) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

SafetensorsIndex parse_safetensors(std::span<const std::byte> file, std::string_view path) {
  DTRAIN_CHECK(file.size() >= 8, path, ": ", file.size(),
               " bytes, shorter than the 8-byte header length of a safetensors file");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, file.data(), 8);
  DTRAIN_CHECK(header_bytes <= kMaxHeaderBytes && header_bytes <= file.size() - 8, path,
               ": the header length (first 8 bytes) is ", header_bytes, ", but the file has ",
               file.size() - 8, " bytes after them");
  const std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, header_bytes);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(path, ": the header is not valid JSON (", e.what(), ")"));
  }
  DTRAIN_CHECK(header.is_object(), path, ": the header is ", header.type_name(),
               ", not a JSON object");
  SafetensorsIndex index;
  index.data_offset = static_cast<int64_t>(8 + header_bytes);
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      DTRAIN_CHECK(value.is_object(), path, ": __metadata__ is not an object");
      for (const auto& [key, text_value] : value.items()) {
        DTRAIN_CHECK(text_value.is_string(), path, ": __metadata__ '", key, "' is not a string");
        index.metadata[key] = text_value.get<std::string>();
      }
      continue;
    }
    index.tensors.push_back(parse_entry(name, value, path));
  }
  std::sort(index.tensors.begin(), index.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  // The entries, in data order, must tile the data section: each begins where the last ended.
  const auto data_bytes = static_cast<int64_t>(file.size()) - index.data_offset;
  int64_t at = 0;
  std::string previous = "(the start of the data)";
  for (const SafetensorsEntry& e : index.tensors) {
    DTRAIN_CHECK(e.begin >= at, path, ": tensor '", e.name, "' (data_offsets [", e.begin, ", ",
                 e.end, ")) overlaps tensor '", previous, "', which ends at ", at);
    DTRAIN_CHECK(e.begin == at, path, ": bytes [", at, ", ", e.begin,
                 ") of the data belong to no tensor (before tensor '", e.name, "')");
    DTRAIN_CHECK(e.end <= data_bytes, path, ": tensor '", e.name, "' (data_offsets [", e.begin,
                 ", ", e.end, ")) runs past the data's ", data_bytes, " bytes");
    at = e.end;
    previous = e.name;
  }
  DTRAIN_CHECK(at == data_bytes, path, ": the data has ", data_bytes, " bytes but the tensors ",
               "end at ", at, " (", data_bytes - at, " bytes after tensor '", previous,
               "' belong to no tensor)");
  return index;
}

std::vector<float> read_tensor_f32(std::span<const std::byte> file, const SafetensorsIndex& index,
                                   const SafetensorsEntry& entry) {
  const std::byte* p = file.data() + index.data_offset + entry.begin;
  std::vector<float> out(static_cast<size_t>(entry.count()));
  if (out.empty()) return out;  // an empty tensor: no bytes to copy (and no pointer to copy to)
  if (entry.dtype == SafetensorsDtype::f32) {
    std::memcpy(out.data(), p, out.size() * 4);
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      bf16 b;
      std::memcpy(&b.bits, p + 2 * i, 2);
      out[i] = to_float(b);
    }
  }
  return out;
}

std::string safetensors_bytes(std::span<const SafetensorsTensor> tensors, SafetensorsDtype dtype,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t at = 0;
  for (const SafetensorsTensor& t : tensors) {
    int64_t count = 1;
    for (int64_t d : t.shape) count *= d;
    DTRAIN_CHECK(count == static_cast<int64_t>(t.data.size()), "safetensors: tensor '", t.name,
                 "' has ", t.data.size(), " values for a shape of ", count);
    const int64_t bytes = count * dtype_bytes(dtype);
    header[t.name] = {
        {"dtype", dtype_name(dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  out += text;
  out.reserve(out.size() + static_cast<size_t>(at));
  for (const SafetensorsTensor& t : tensors) {
    if (t.data.empty()) continue;
    if (dtype == SafetensorsDtype::f32) {
      out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4);
    } else {
      for (float v : t.data) {
        const bf16 b = to_bf16(v);
        out.append(reinterpret_cast<const char*>(&b.bits), 2);
      }
    }
  }
  return out;
}

namespace {

// Writes all of `contents` to `fd`; false (errno set) when a write fails.
bool write_all(int fd, std::string_view contents) {
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) {
      errno = EIO;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view contents,
                           std::string_view flag) {
  // A device or a pipe (/dev/null, /dev/stdout, a FIFO) is written in place: a file renamed
  // over it would replace the device itself.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    DTRAIN_CHECK(fd >= 0, flag, " ", path, ": cannot be opened (", std::strerror(errno), ")");
    const bool written = write_all(fd, contents);
    const int write_errno = errno;
    const bool closed = ::close(fd) == 0;
    DTRAIN_CHECK(written && closed, flag, " ", path, ": cannot write (",
                 std::strerror(written ? errno : write_errno), ")");
    return;
  }
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DTRAIN_CHECK(fd >= 0, flag, " ", path, ": cannot create ", tmp, " (", std::strerror(errno), ")");
  // Nothing is renamed over `path` unless every byte, the flush and the close succeeded.
  const bool ok = write_all(fd, contents) && ::fsync(fd) == 0;
  const int why = errno;
  const bool closed = ::close(fd) == 0;
  if (!ok || !closed || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(ok ? errno : why);
    ::unlink(tmp.c_str());
    throw Error(str(flag, " ", path, ": cannot write (", reason, ")"));
  }
}

}  // namespace dtrain::formats
