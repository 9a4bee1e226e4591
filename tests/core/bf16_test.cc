// core/bf16.h against a reference written from the definition: the bf16 nearest to f in exact
// arithmetic (doubles hold every float and every difference of two neighbours exactly), ties to
// the even mantissa, overflow to infinity, NaN kept as a quiet NaN of the same sign.
#include "dtrain/core/bf16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace dtrain {
namespace {

uint16_t reference_bits(uint32_t u) {
  const float f = std::bit_cast<float>(u);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  if (std::isinf(f)) return static_cast<uint16_t>(u >> 16);
  const uint32_t low = u & 0xffff0000u;  // truncation towards zero
  const uint16_t low_bits = static_cast<uint16_t>(low >> 16);
  if (low == u) return low_bits;
  const uint16_t high_bits = static_cast<uint16_t>(low_bits + 1);  // next bf16 away from zero
  const double x = std::fabs(static_cast<double>(f));
  const double a = std::fabs(static_cast<double>(std::bit_cast<float>(low)));
  // The neighbour away from zero; past the largest finite bf16 it is the overflow threshold
  // 2^128, where IEEE rounding goes to infinity.
  const bool to_inf = (high_bits & 0x7fffu) == 0x7f80u;
  const double b =
      to_inf ? std::ldexp(1.0, 128)
             : std::fabs(static_cast<double>(std::bit_cast<float>(uint32_t{high_bits} << 16)));
  if (x - a < b - x) return low_bits;
  if (b - x < x - a) return high_bits;
  return (low_bits & 1u) == 0 ? low_bits : high_bits;  // a tie: the even one
}

TEST(Bf16, EdgeValues) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {0x00000000u, 0x0000u},  // +0
      {0x80000000u, 0x8000u},  // -0
      {0x00000001u, 0x0000u},  // smallest subnormal: rounds to 0
      {0x00008000u, 0x0000u},  // tie between 0 and the smallest bf16 subnormal: even 0
      {0x00008001u, 0x0001u},  // just above the tie
      {0x00018000u, 0x0002u},  // tie between subnormals 1 and 2: even 2
      {0x007fffffu, 0x0080u},  // largest subnormal rounds up to the smallest normal
      {0x3f800000u, 0x3f80u},  // 1.0 is exact
      {0x3f808000u, 0x3f80u},  // 1 + 2^-8: tie, even down
      {0x3f818000u, 0x3f82u},  // 1 + 3*2^-8: tie, even up
      {0x3f80ffffu, 0x3f81u},  // below the next tie: up
      {0xbf808001u, 0xbf81u},  // negative, above the tie in magnitude
      {0x7f7f0000u, 0x7f7fu},  // largest finite bf16
      {0x7f7f7fffu, 0x7f7fu},  // below its tie with 2^128: stays finite
      {0x7f7f8000u, 0x7f80u},  // the tie: even is the infinity bit pattern
      {0x7f7fffffu, 0x7f80u},  // FLT_MAX overflows to +inf
      {0xff7fffffu, 0xff80u},  // -FLT_MAX to -inf
      {0x7f800000u, 0x7f80u},  // +inf
      {0xff800000u, 0xff80u},  // -inf
      {0x7fc00000u, 0x7fc0u},  // quiet NaN
      {0x7f800001u, 0x7fc0u},  // signalling NaN whose payload is all in the dropped bits: quiet
      {0xff810000u, 0xffc1u},  // negative signalling NaN: quiet, sign and payload kept
  };
  for (const Case& c : cases) {
    EXPECT_EQ(to_bf16(std::bit_cast<float>(c.in)).bits, c.out) << std::hex << c.in;
    EXPECT_EQ(reference_bits(c.in), c.out) << "reference, " << std::hex << c.in;
  }
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(to_float(bf16{0x3f80u}), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 1.0f / 256), 1.0f);
}

// Every low half for high halves spread over all exponents and both signs (plus the ones next to
// the specials): 2^16 * 390 patterns (65 high halves, each with its sign flipped, and 4 fixed),
// every rounding case each exponent can meet.
TEST(Bf16, MatchesTheReferenceOnEveryLowHalf) {
  int64_t checked = 0;
  for (uint32_t high = 0; high < 0x10000u; high += 1021) {
    for (uint32_t h : {high, high ^ 0x8000u, 0x7f7fu, 0x0000u, 0x007fu, 0x7f80u}) {
      for (uint32_t lowbits = 0; lowbits < 0x10000u; ++lowbits) {
        const uint32_t u = (h << 16) | lowbits;
        ASSERT_EQ(to_bf16(std::bit_cast<float>(u)).bits, reference_bits(u)) << std::hex << u;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, int64_t{1} << 24);
}

TEST(Bf16, ArrayConversionsRoundTrip) {
  float in[5] = {1.0f, -2.5f, 3.14159f, 1e-40f, -0.0f};
  bf16 mid[5];
  float out[5];
  to_bf16(in, mid, 5);
  to_float(mid, out, 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(out[i], round_to_bf16(in[i]));
    // Relative error of a normal value is at most 2^-8: half an ulp, with 8 significant bits.
    if (std::fabs(in[i]) > 1e-37f) {
      EXPECT_LE(std::fabs(out[i] - in[i]), std::fabs(in[i]) / 256);
    }
  }
  EXPECT_EQ(std::bit_cast<uint32_t>(out[4]), 0x80000000u);
}

}  // namespace
}  // namespace dtrain
