// The pairwise all-to-all: N-1 steps, at step s rank r sends its part for rank r+s and receives
// the part of rank r-s (mod N), so every step pairs each rank with one sender and one receiver and
// no link carries two messages at once. Each rank sends every part but its own once: for equal
// blocks of S/N bytes that is (N-1)/N * S, as the bandwidth-optimal bound for an all-to-all
// (every byte not kept must cross once). Empty parts still travel as empty messages: the step
// count is N-1 whatever the counts, and a count the sender and the receiver disagree on fails in
// the backend with a message naming both ranks instead of leaving one of them waiting.
#include <cstring>

#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm::detail {

void pairwise_all_to_all(Communicator& comm, OperationScope& scope, const std::byte* input,
                         std::span<const Chunk> send, std::byte* output,
                         std::span<const Chunk> recv, int64_t element_bytes, int tag) {
  const int n = comm.size(), r = comm.rank();
  DTRAIN_CHECK(send[r].count == recv[r].count, "all_to_all: rank ", comm.global_rank(), " sends ",
               send[r].count, " elements to itself but expects ", recv[r].count);
  if (send[r].count > 0) {
    std::memcpy(output + recv[r].offset * element_bytes, input + send[r].offset * element_bytes,
                static_cast<size_t>(send[r].count * element_bytes));
  }
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    comm.send_recv(input + send[to].offset * element_bytes, send[to].count * element_bytes, to,
                   output + recv[from].offset * element_bytes, recv[from].count * element_bytes,
                   from, tag);
    scope.step();
  }
}

}  // namespace dtrain::comm::detail
