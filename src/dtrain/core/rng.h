// Deterministic random numbers from a 64-bit seed: SplitMix64 (Steele, Lea and Flood 2014,
// "Fast splittable pseudorandom number generators"), uniform floats from its top bits, and
// normals by Box-Muller. The whole state is one uint64_t, so a checkpoint can save it.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace dtrain {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : state_(seed) {}

  // SplitMix64: add the golden-ratio increment, then mix (Stafford's "Mix13" constants).
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n); n > 0. Scales a 53-bit uniform, exact enough for n < 2^40.
  uint64_t uniform_int(uint64_t n) {
    const auto k = static_cast<uint64_t>(uniform() * static_cast<double>(n));
    return k < n ? k : n - 1;
  }
  // Standard normal by Box-Muller from two uniforms; the second normal is discarded so that
  // the state stays one integer.
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

  uint64_t state() const { return state_; }
  void set_state(uint64_t state) { state_ = state; }

 private:
  uint64_t state_;
};

}  // namespace dtrain
