// gather_in_rank_order and sum_in_rank_order over the int64 all-gather: a double travels as its
// 64 bits, so no algorithm can round or reorder it.
#include "dtrain/comm/rank_order.h"

#include <bit>
#include <cstdint>

#include "dtrain/comm/collectives.h"

namespace dtrain::comm {

std::vector<double> gather_in_rank_order(Communicator& comm, std::span<const double> values) {
  const auto n = static_cast<int64_t>(values.size());
  const int ranks = comm.size();
  // With n * size() elements, chunk_of gives rank r exactly [r * n, (r + 1) * n).
  std::vector<int64_t> bits(static_cast<size_t>(n * ranks));
  int64_t* mine = bits.data() + comm.rank() * n;
  for (int64_t i = 0; i < n; ++i) mine[i] = std::bit_cast<int64_t>(values[static_cast<size_t>(i)]);
  all_gather<int64_t>(comm, mine, bits.data(), n * ranks);
  std::vector<double> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = std::bit_cast<double>(bits[i]);
  return out;
}

std::vector<double> sum_in_rank_order(Communicator& comm, std::span<const double> values) {
  const std::vector<double> all = gather_in_rank_order(comm, values);
  const size_t n = values.size();
  std::vector<double> sum(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
  for (size_t r = 1; r < static_cast<size_t>(comm.size()); ++r) {
    for (size_t i = 0; i < n; ++i) sum[i] += all[r * n + i];
  }
  return sum;
}

}  // namespace dtrain::comm
