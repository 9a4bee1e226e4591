// The collectives on bf16 elements, on the backend under test (harness.h): with small integers
// (exact in bf16's 8-bit mantissa) every result equals the closed form bit for bit; the bytes
// are plan::collective_traffic's with 2-byte elements, exactly half of the same call on floats;
// and on real values a ring all-reduce stays within its rounding bound. Each hop adds in fp32
// and rounds the partial sum to bf16, so element i's sum over N ranks is rounded N - 1 times:
// |error| <= (N - 1) * 2^-8 * sum_r |x_r(i)| (each rounding is within half an ulp, at most
// 2^-8 of the partial sum for 8 significant bits, and every partial sum is at most
// sum_r |x_r(i)|); avg rounds once more, by 2^-8 of the result.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "dtrain/comm/collectives.h"
#include "dtrain/core/bf16.h"
#include "dtrain/cost/collective_cost.h"
#include "harness.h"

namespace dtrain::comm {
namespace {

// Rank r's element i: (i % 7) + 1 + r, at most 7 + 8 = 15; a sum over 8 ranks is at most 156,
// and every partial sum is an integer below 256: exact in bf16.
float small_int(int r, int64_t i) {
  return static_cast<float>(i % 7 + 1 + r);
}

// Every rank's inputs (bf16 values, held as floats), rank r's at [r * count, ...): one table
// made once, so that every rank checks against the values the others sent (a vectorised sinf
// can round differently from the scalar one).
std::vector<float> bf16_inputs(int world, int64_t count) {
  std::vector<float> table(static_cast<size_t>(world * count));
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < count; ++i) {
      table[static_cast<size_t>(r * count + i)] =
          round_to_bf16(std::sin(0.37f * static_cast<float>(i) + 1.3f * r) * 3.0f);
    }
  }
  return table;
}

TEST(Bf16Collectives, SmallIntegersAreExactAndTheBytesAreHalfOfFloats) {
  for (Algorithm algo : {Algorithm::ring, Algorithm::naive, Algorithm::tree, Algorithm::direct}) {
    for (int world : {2, 3, 4, 8}) {
      for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::reduce_scatter,
                              CollectiveOp::all_gather, CollectiveOp::broadcast}) {
        SCOPED_TRACE(str(name(op), " ", name(algo), " world ", world));
        testing::run_group(world, [&](Communicator& comm) {
          const int r = comm.rank();
          const int64_t count = 1009;
          std::vector<bf16> in16(count), out16(count);
          std::vector<float> in32(count), out32(count);
          for (int64_t i = 0; i < count; ++i) {
            in32[static_cast<size_t>(i)] = small_int(r, i);
            in16[static_cast<size_t>(i)] = to_bf16(small_int(r, i));
          }
          Traffic t16, t32;
          const Chunk mine = chunk_of(count, world, r);
          switch (op) {
            case CollectiveOp::all_reduce:
              out16 = in16;
              out32 = in32;
              t16 = all_reduce(comm, out16.data(), count, ReduceOp::sum, algo);
              t32 = all_reduce(comm, out32.data(), count, ReduceOp::sum, algo);
              break;
            case CollectiveOp::reduce_scatter:
              t16 = reduce_scatter(comm, in16.data(), out16.data(), count, ReduceOp::sum, algo);
              t32 = reduce_scatter(comm, in32.data(), out32.data(), count, ReduceOp::sum, algo);
              break;
            case CollectiveOp::all_gather:
              t16 = all_gather(comm, in16.data() + mine.offset, out16.data(), count, algo);
              t32 = all_gather(comm, in32.data() + mine.offset, out32.data(), count, algo);
              break;
            default:
              out16 = in16;
              out32 = in32;
              t16 = broadcast(comm, out16.data(), count, 0, algo);
              t32 = broadcast(comm, out32.data(), count, 0, algo);
              break;
          }
          // The bf16 result is the float result's bits, rounded (the floats are exact too).
          const bool scattered = op == CollectiveOp::reduce_scatter;
          for (int64_t k = 0; k < (scattered ? mine.count : count); ++k) {
            const auto e = static_cast<size_t>(k);
            ASSERT_EQ(to_float(out16[e]), out32[e]) << "element " << k;
          }
          EXPECT_EQ(2 * t16.bytes_sent, t32.bytes_sent);
          EXPECT_EQ(2 * t16.bytes_received, t32.bytes_received);
          EXPECT_EQ(t16.steps, t32.steps);
          const plan::CollectiveTraffic want =
              plan::collective_traffic(op, algo, static_cast<double>(count) * 2, world, r, 0);
          EXPECT_EQ(t16.steps, want.steps);
          const double slack =
              static_cast<double>(std::max<int64_t>(want.steps, world - 1)) * sizeof(bf16);
          EXPECT_LE(std::abs(t16.bytes_sent - want.bytes_sent), slack);
        });
      }
    }
  }
}

TEST(Bf16Collectives, RingAllReduceStaysWithinItsRoundingBound) {
  for (int world : {2, 4, 8}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
      const int64_t count = 4096;
      const std::vector<float> table = bf16_inputs(world, count);
      auto x = [&](int r, int64_t i) { return table[static_cast<size_t>(r * count + i)]; };
      testing::run_group(world, [&](Communicator& comm) {
        std::vector<bf16> data(count);
        for (int64_t i = 0; i < count; ++i)
          data[static_cast<size_t>(i)] = to_bf16(x(comm.rank(), i));
        all_reduce(comm, data.data(), count, op, Algorithm::ring);
        const double u = std::ldexp(1.0, -8);  // bf16's unit roundoff: 8 significant bits
        double worst = 0;
        for (int64_t i = 0; i < count; ++i) {
          double exact = 0, magnitude = 0;
          for (int r = 0; r < world; ++r) {
            exact += x(r, i);
            magnitude += std::fabs(x(r, i));
          }
          double bound = (world - 1) * u * magnitude;
          if (op == ReduceOp::avg) {
            exact /= world;
            bound = bound / world + u * (std::fabs(exact) + bound / world);
          }
          const double err = std::fabs(to_float(data[static_cast<size_t>(i)]) - exact);
          ASSERT_LE(err, bound) << "element " << i << " world " << world << " " << name(op);
          worst = std::max(worst, err / std::max(magnitude, 1e-30));
        }
        if (comm.rank() == 0) {
          std::printf("bf16 ring %s, %d ranks: worst |error| / sum|x| %.2e (bound %.2e)\n",
                      name(op).data(), world, worst, (world - 1) * u);
        }
        // One reduced copy of each chunk travels, so every rank holds the same bits.
        std::vector<bf16> rank0 = data;
        broadcast(comm, rank0.data(), count, 0, Algorithm::naive);
        for (int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(data[static_cast<size_t>(i)].bits, rank0[static_cast<size_t>(i)].bits);
        }
      });
    }
  }
}

// The direct algorithm adds every rank's bf16 input in float32 (in rank order) and rounds once,
// so its error is one bf16 rounding of the exact sum plus float32's own, whatever the rank
// count: tighter than the ring's (N-1) roundings. Sizes on both of its paths.
TEST(Bf16Collectives, DirectAllReduceRoundsOnce) {
  for (int world : {2, 5, 8}) {
    for (int64_t count : {int64_t{1000}, int64_t{300000}}) {
      const std::vector<float> table = bf16_inputs(world, count);
      auto x = [&](int r, int64_t i) { return table[static_cast<size_t>(r * count + i)]; };
      testing::run_group(world, [&](Communicator& comm) {
        std::vector<bf16> data(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i)
          data[static_cast<size_t>(i)] = to_bf16(x(comm.rank(), i));
        all_reduce(comm, data.data(), count, ReduceOp::sum, Algorithm::direct);
        const double u = std::ldexp(1.0, -8), u32 = std::ldexp(1.0, -24);
        for (int64_t i = 0; i < count; ++i) {
          double exact = 0, magnitude = 0;
          for (int r = 0; r < world; ++r) {
            exact += x(r, i);
            magnitude += std::fabs(x(r, i));
          }
          const double bound = u * std::fabs(exact) + (world - 1) * u32 * magnitude * (1 + u);
          const double err = std::fabs(to_float(data[static_cast<size_t>(i)]) - exact);
          ASSERT_LE(err, bound) << "element " << i << " world " << world;
        }
        std::vector<bf16> rank0 = data;
        broadcast(comm, rank0.data(), count, 0, Algorithm::naive);
        for (int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(data[static_cast<size_t>(i)].bits, rank0[static_cast<size_t>(i)].bits);
        }
      });
    }
  }
}

TEST(Bf16Collectives, MaxPicksTheLargerValue) {
  testing::run_group(3, [](Communicator& comm) {
    std::vector<bf16> v = {to_bf16(static_cast<float>(comm.rank()) - 1.5f), to_bf16(-2.0f)};
    all_reduce(comm, v.data(), 2, ReduceOp::max, Algorithm::ring);
    EXPECT_EQ(to_float(v[0]), 0.5f);
    EXPECT_EQ(to_float(v[1]), -2.0f);
  });
}

}  // namespace
}  // namespace dtrain::comm
