// Fuzz target: parse_safetensors and read_tensor_f32, the reader behind `dtrain train
// --init-from`. Any input may be rejected with dtrain::Error; a crash, undefined behaviour or any
// other exception is a finding. An accepted file must read every tensor, and writing those
// values again as F32 must parse to the same names and shapes, F32 tensors bitwise.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtrain::train;
  const auto file = std::as_bytes(std::span<const uint8_t>(data, size));
  SafetensorsIndex index;
  try {
    index = parse_safetensors(file, "fuzz.safetensors");
  } catch (const dtrain::Error&) {
    return 0;  // rejected with a message: the expected outcome for most inputs
  }
  std::vector<SafetensorsTensor> tensors;
  int64_t total = 0;
  for (const SafetensorsEntry& e : index.tensors) {
    total += e.count();
    if (total > (int64_t{1} << 24)) return 0;  // the input itself bounds this; keep runs short
    tensors.push_back({e.name, e.shape, read_tensor_f32(file, index, e)});
  }
  const std::string again = safetensors_bytes(tensors, SafetensorsDtype::f32, index.metadata);
  const SafetensorsIndex back = parse_safetensors(
      std::as_bytes(std::span<const char>(again.data(), again.size())), "round trip");
  if (back.tensors.size() != index.tensors.size() || back.metadata != index.metadata) {
    __builtin_trap();
  }
  for (const SafetensorsEntry& e : index.tensors) {
    const SafetensorsEntry* b = back.find(e.name);
    if (b == nullptr || b->shape != e.shape) __builtin_trap();
    if (e.dtype != SafetensorsDtype::f32) continue;
    const auto bytes = std::as_bytes(std::span<const char>(again.data(), again.size()));
    const std::vector<float> x = read_tensor_f32(file, index, e);
    const std::vector<float> y = read_tensor_f32(bytes, back, *b);
    if (x.size() != y.size() ||
        (!x.empty() && std::memcmp(x.data(), y.data(), x.size() * 4) != 0)) {
      __builtin_trap();
    }
  }
  return 0;
}
