// bfloat16: the top 16 bits of an IEEE float32 (1 sign, 8 exponent, 7 mantissa bits), so it
// keeps float32's range with 8 bits of precision. Conversion from float rounds to nearest, ties
// to even (what AVX512-BF16's vcvtneps2bf16 and PyTorch do), keeps infinities, and turns every
// NaN into a quiet NaN of the same sign; subnormals round like any other value (no flush).
#pragma once

#include <bit>
#include <cstdint>

namespace dtrain {

struct bf16 {
  uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2);

inline bf16 to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep the sign, set the quiet bit
    return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  }
  // Adding 0x7fff plus the lowest kept bit rounds the dropped 16 bits to nearest, ties to the
  // even kept value; a carry out of the mantissa bumps the exponent (to inf past the largest).
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(rounded >> 16)};
}

inline float to_float(bf16 b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b.bits) << 16);
}

// f rounded to the nearest bf16 value, as a float (to_float(to_bf16(f))).
inline float round_to_bf16(float f) {
  return to_float(to_bf16(f));
}

// Array conversions: loops the compiler vectorises, out of line so that the portable build
// picks AVX-512 or AVX2 clones at run time (bf16.cc, cpu_dispatch.h). Bitwise the element-wise
// conversions above.
void to_bf16(const float* in, bf16* out, int64_t count);
void to_float(const bf16* in, float* out, int64_t count);

}  // namespace dtrain
