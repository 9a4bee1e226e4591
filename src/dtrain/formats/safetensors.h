// The safetensors file format, read and written here against its specification: an 8-byte
// little-endian u64 N, N bytes of JSON header mapping each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end)} (offsets relative to the data after the header; an optional
// "__metadata__" maps strings to strings), then the raw little-endian data. F32 and BF16.
//
// Fuzz-facing entry point: parse_safetensors(bytes, path) reads only the bytes it is given and
// reports bad input by throwing dtrain::Error naming the file and, where one is at fault, the
// tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::formats {

enum class SafetensorsDtype { f32, bf16 };
std::string_view dtype_name(SafetensorsDtype dtype);  // "F32", "BF16"
int64_t dtype_bytes(SafetensorsDtype dtype);          // 4, 2

struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::f32;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // bytes, relative to the data section
  int64_t count() const;       // product of shape (1 for a scalar)
};

struct SafetensorsIndex {
  std::vector<SafetensorsEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  int64_t data_offset = 0;  // 8 + header length
  // The entry called `name`, or nullptr.
  const SafetensorsEntry* find(std::string_view name) const;
};

// Checks everything: the header length against the file size, the JSON, each entry's dtype,
// shape and offsets (shape product * dtype size == end - begin), and that the entries cover the
// data section exactly once, in order, without overlap or gap.
SafetensorsIndex parse_safetensors(std::span<const std::byte> file, std::string_view path);

// The values of `entry` (of an index parse_safetensors returned for `file`) as float32.
std::vector<float> read_tensor_f32(std::span<const std::byte> file, const SafetensorsIndex& index,
                                   const SafetensorsEntry& entry);

struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  // product of shape
};

// The file's bytes: tensors in the given order, stored as `dtype` (BF16 rounds to nearest
// even); the header is padded with spaces to a multiple of 8 bytes so the data is aligned.
std::string safetensors_bytes(std::span<const SafetensorsTensor> tensors, SafetensorsDtype dtype,
                              const std::map<std::string, std::string>& metadata = {});

// Writes `contents` to `path` atomically: a temporary file beside it, flushed, then renamed over
// `path` only once every byte was written. A device or pipe at `path` (/dev/null, a FIFO) is
// written in place instead. Errors (a full disk or device) name `flag`, the path and the reason.
void write_file_atomically(const std::string& path, std::string_view contents,
                           std::string_view flag);

}  // namespace dtrain::formats
