// The direct all-to-all: ranks that share memory read their parts straight from the peers'
// input buffers. In a shared address space each rank publishes its input and its send layout,
// and between two flag barriers every rank copies part r of each peer's input into its output:
// one copy per byte, no messages. Through a shared window (MPI ranks on one node) the same runs
// on the slots, segment by segment: each rank stages a piece of every peer's part into its slot
// (piece j at j * piece, after a header of its send counts), and each reader copies its piece out
// of every peer's slot. The header, read once after the first barrier, tells every rank the
// longest part in the group, hence the same number of segments everywhere.
//
// Counting (as direct.cc): the bytes a rank reads from a peer's memory are received from it;
// nothing is written into a peer's memory, so nothing is sent. The published layout and the
// slot header are control words, like the barrier flags, and are not counted. Each barrier is a
// step: 2 per segment, at least one segment (a rank cannot know that every part is empty).
#include <algorithm>
#include <cstring>
#include <string>

#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm::detail {
namespace {

// What a rank publishes in a shared address space: its input and where each peer's part lies.
struct PublishedInput {
  const std::byte* input = nullptr;
  const Chunk* send = nullptr;
};

std::string count_mismatch(const Communicator& comm, int peer, int64_t sent, int64_t expected) {
  return str("all_to_all: rank ", comm.global_rank_of(peer), " sends ", sent, " elements to rank ",
             comm.global_rank(), " which expects ", expected, " (in ", comm.current_operation(),
             ")");
}

void copy_bytes(std::byte* dst, const std::byte* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

}  // namespace

void direct_all_to_all(Communicator& comm, OperationScope& scope, const std::byte* input,
                       std::span<const Chunk> send, std::byte* output, std::span<const Chunk> recv,
                       int64_t element_bytes) {
  SharedMemoryGroup& shm = *comm.shared_memory();
  const int n = comm.size(), r = comm.rank();
  const int64_t eb = element_bytes;
  DTRAIN_CHECK(send[r].count == recv[r].count, "all_to_all: rank ", comm.global_rank(), " sends ",
               send[r].count, " elements to itself but expects ", recv[r].count);
  copy_bytes(output + recv[r].offset * eb, input + send[r].offset * eb, send[r].count * eb);
  // A mismatch found while reading is thrown after the closing barrier: the peers must not be
  // left waiting for this rank, nor have their buffers read after they returned.
  std::string error;

  if (shm.shares_address_space()) {
    const PublishedInput mine{input, send.data()};
    shm.publish(&mine, output);
    shm.barrier();
    scope.step();
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      const auto* peer = static_cast<const PublishedInput*>(shm.input_of(q));
      const Chunk part = peer->send[r];
      if (part.count != recv[q].count) {
        if (error.empty()) error = count_mismatch(comm, q, part.count, recv[q].count);
        continue;
      }
      copy_bytes(output + recv[q].offset * eb, peer->input + part.offset * eb, part.count * eb);
      comm.add_shared_memory_traffic(q, part.count * eb, 0);
    }
    shm.closing_barrier();
    scope.step();
    DTRAIN_CHECK(error.empty(), error);
    return;
  }

  const int64_t header_bytes = direct_all_to_all_header_bytes(n);
  const int64_t piece = direct_all_to_all_piece(shm.slot_bytes(), n, eb);
  DTRAIN_CHECK(piece > 0, "direct all_to_all: a ", shm.slot_bytes(),
               "-byte slot cannot hold a piece for each of ", n, " ranks");
  auto header = [&](int q) { return reinterpret_cast<int64_t*>(shm.slot(q)); };
  auto piece_in_slot = [&](int q, int j) { return shm.slot(q) + header_bytes + j * piece * eb; };
  for (int j = 0; j < n; ++j) header(r)[j] = send[j].count;
  int64_t segments = 1;  // known to every rank after the first barrier
  for (int64_t k = 0; k < segments; ++k) {
    const int64_t begin = k * piece;
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      const int64_t len = std::clamp<int64_t>(send[j].count - begin, 0, piece);
      copy_bytes(piece_in_slot(r, j), input + (send[j].offset + begin) * eb, len * eb);
    }
    shm.barrier();
    scope.step();
    if (k == 0) {
      int64_t longest = 0;
      for (int q = 0; q < n; ++q) {
        for (int j = 0; j < n; ++j) {
          if (j != q) longest = std::max(longest, header(q)[j]);
        }
        if (q != r && header(q)[r] != recv[q].count && error.empty()) {
          error = count_mismatch(comm, q, header(q)[r], recv[q].count);
        }
      }
      segments = std::max<int64_t>(1, (longest + piece - 1) / piece);
    }
    for (int q = 0; q < n; ++q) {
      if (q == r || header(q)[r] != recv[q].count) continue;
      const int64_t len = std::clamp<int64_t>(recv[q].count - begin, 0, piece);
      copy_bytes(output + (recv[q].offset + begin) * eb, piece_in_slot(q, r), len * eb);
      comm.add_shared_memory_traffic(q, len * eb, 0);
    }
    shm.closing_barrier();
    scope.step();
  }
  DTRAIN_CHECK(error.empty(), error);
}

}  // namespace dtrain::comm::detail
