// Ring algorithms. The data is cut into one chunk per rank (chunk_of). In the reduce-scatter,
// at step s rank r sends chunk (r-s-1) mod N to its right neighbour and receives chunk
// (r-s-2) mod N from its left one, adding its own contribution; after N-1 steps it holds
// chunk r fully reduced. The all-gather then passes the reduced chunks around the ring in
// N-1 more steps. Each step moves one chunk per rank: S/N bytes, so an all-reduce sends
// 2(N-1)/N * S bytes per rank in 2(N-1) steps, which no algorithm beats in bytes. (One chunk
// per rank, many segments per chunk: a step is one chunk, sent as several segment messages.)
// The _chunks variants run the same rings over caller-chosen chunks (collectives_v.h): rank r
// then sends every chunk but its own in a reduce-scatter, and every chunk but rank r+1's in an
// all-gather, whatever their sizes.
#include <algorithm>
#include <cstring>

#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm::detail {
namespace {

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

// Reduce-scatter steps move a chunk in segments: each arrives in a small scratch buffer and is
// added while it is still in cache, so a step reads its chunk from memory once instead of
// copying it out and reading it back. Smaller segments pay more per-message overhead; larger
// ones fall out of the 1 MiB L2 before they are reduced.
constexpr int64_t kSegmentBytes = 256 << 10;
template <typename T>
constexpr int64_t segment_elements() {
  return kSegmentBytes / static_cast<int64_t>(sizeof(T));
}

// One ring step of a reduce-scatter: send chunk `out` to `next` while chunk `in` arrives from
// `prev` segment by segment; reduce(segment index, elements, incoming) runs as each lands.
// A chunk is always at least one message (possibly empty), so sender and receiver, who both
// derive the segment count from the same chunk, agree on the messages.
template <typename T, typename Reduce>
void segmented_step(Communicator& comm, const T* out_data, int64_t out_count, int next,
                    int64_t in_count, int prev, int tag, T* incoming, Reduce&& reduce) {
  const int64_t segment = segment_elements<T>();
  const int64_t out_segments = std::max<int64_t>(1, (out_count + segment - 1) / segment);
  const int64_t in_segments = std::max<int64_t>(1, (in_count + segment - 1) / segment);
  for (int64_t k = 0; k < std::max(out_segments, in_segments); ++k) {
    const int64_t begin = k * segment;
    RequestPtr recv, send;
    const int64_t in_n = std::clamp<int64_t>(in_count - begin, 0, segment);
    if (k < in_segments) recv = comm.irecv(incoming, in_n * sizeof(T), prev, tag);
    if (k < out_segments) {
      const int64_t out_n = std::clamp<int64_t>(out_count - begin, 0, segment);
      send = comm.isend(out_data + begin, out_n * sizeof(T), next, tag);
    }
    if (recv) {
      recv->wait();
      reduce(begin, in_n);
    }
    if (send) send->wait();
  }
}

// The ring all-gather and the out-of-place ring reduce-scatter are written once over a chunk
// lookup, chunk_at(i): chunk_of's balanced chunks for the plain collectives, the caller's chunks
// for the _v variants (collectives_v.h).
template <typename T, typename ChunkAt>
void all_gather_ring(Communicator& comm, OperationScope& scope, T* data, ChunkAt&& chunk_at,
                     int tag) {
  const int n = comm.size(), r = comm.rank();
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const Chunk out = chunk_at(mod(r - s, n));
    const Chunk in = chunk_at(mod(r - s - 1, n));
    comm.send_recv(data + out.offset, out.count * sizeof(T), next, data + in.offset,
                   in.count * sizeof(T), prev, tag);
    scope.step();
  }
}

// Out of place: the partial sums travel in two alternating scratch chunks (one is being sent
// while the next is written), and the last step writes straight into `output`; a chunk is
// taken only when a step writes it (two ranks need none, three one).
template <typename T, typename ChunkAt>
void reduce_scatter_ring(Communicator& comm, OperationScope& scope, const T* input, T* output,
                         ChunkAt&& chunk_at, int64_t max_chunk_count, ReduceOp op, int tag) {
  const int n = comm.size(), r = comm.rank();
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const int64_t chunk_bytes = max_chunk_count * sizeof(T);
  T* incoming = static_cast<T*>(comm.scratch(0, segment_elements<T>() * sizeof(T)));
  T* partial[2] = {n > 2 ? static_cast<T*>(comm.scratch(1, chunk_bytes)) : nullptr,
                   n > 3 ? static_cast<T*>(comm.scratch(2, chunk_bytes)) : nullptr};
  for (int s = 0; s < n - 1; ++s) {
    const Chunk out = chunk_at(mod(r - s - 1, n));
    const Chunk in = chunk_at(mod(r - s - 2, n));
    const T* send_from = s == 0 ? input + out.offset : partial[(s - 1) % 2];
    T* dst = s == n - 2 ? output : partial[s % 2];
    const T* own = input + in.offset;
    segmented_step(comm, send_from, out.count, next, in.count, prev, tag, incoming,
                   [&](int64_t begin, int64_t len) {
                     reduce_into(dst + begin, own + begin, incoming, len, op);
                   });
    scope.step();
  }
}

}  // namespace

template <typename T>
void ring_reduce_scatter_in_place(Communicator& comm, OperationScope& scope, T* data, int64_t count,
                                  ReduceOp op, int tag) {
  const int n = comm.size(), r = comm.rank();
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  T* incoming = static_cast<T*>(comm.scratch(0, segment_elements<T>() * sizeof(T)));
  for (int s = 0; s < n - 1; ++s) {
    const Chunk out = chunk_of(count, n, mod(r - s - 1, n));
    const Chunk in = chunk_of(count, n, mod(r - s - 2, n));
    T* acc = data + in.offset;
    segmented_step(comm, data + out.offset, out.count, next, in.count, prev, tag, incoming,
                   [&](int64_t begin, int64_t len) {
                     reduce_into(acc + begin, acc + begin, incoming, len, op);
                   });
    scope.step();
  }
}

template <typename T>
void ring_all_gather_in_place(Communicator& comm, OperationScope& scope, T* data, int64_t count,
                              int tag) {
  const int n = comm.size();
  all_gather_ring(
      comm, scope, data, [&](int i) { return chunk_of(count, n, i); }, tag);
}

template <typename T>
void ring_reduce_scatter(Communicator& comm, OperationScope& scope, const T* input, T* output,
                         int64_t count, ReduceOp op, int tag) {
  const int n = comm.size();
  reduce_scatter_ring(
      comm, scope, input, output, [&](int i) { return chunk_of(count, n, i); }, max_chunk(count, n),
      op, tag);
}

template <typename T>
void ring_reduce_scatter_chunks(Communicator& comm, OperationScope& scope, const T* input,
                                T* output, std::span<const Chunk> chunks, ReduceOp op, int tag) {
  int64_t largest = 0;
  for (const Chunk& c : chunks) largest = std::max(largest, c.count);
  reduce_scatter_ring(
      comm, scope, input, output, [&](int i) { return chunks[static_cast<size_t>(i)]; }, largest,
      op, tag);
}

template <typename T>
void ring_all_gather_chunks_in_place(Communicator& comm, OperationScope& scope, T* data,
                                     std::span<const Chunk> chunks, int tag) {
  all_gather_ring(
      comm, scope, data, [&](int i) { return chunks[static_cast<size_t>(i)]; }, tag);
}

// Scatter from the root (one chunk to each rank), then a ring all-gather.
template <typename T>
void ring_broadcast(Communicator& comm, OperationScope& scope, T* data, int64_t count, int root) {
  const int n = comm.size(), r = comm.rank();
  if (r == root) {
    std::vector<RequestPtr> sends;
    for (int i = 0; i < n; ++i) {
      if (i == root) continue;
      const Chunk c = chunk_of(count, n, i);
      sends.push_back(comm.isend(data + c.offset, c.count * sizeof(T), i, kTagBroadcast));
      scope.step();
    }
    for (auto& s : sends) s->wait();
  } else {
    const Chunk c = chunk_of(count, n, r);
    comm.recv(data + c.offset, c.count * sizeof(T), root, kTagBroadcast);
    scope.step();
  }
  ring_all_gather_in_place(comm, scope, data, count, kTagBroadcast);
}

// A ring reduce-scatter, then every rank sends its reduced chunk to the root.
template <typename T>
void ring_reduce(Communicator& comm, OperationScope& scope, const T* input, T* output,
                 int64_t count, ReduceOp op, int root) {
  const int n = comm.size(), r = comm.rank();
  const Chunk mine = chunk_of(count, n, r);
  // The reduce-scatter uses scratch slots 0-2; the own chunk lands in the root's output or in a
  // separate buffer on the other ranks.
  std::vector<T> own;
  T* own_chunk = nullptr;
  if (r == root) {
    own_chunk = output + mine.offset;
  } else {
    own.resize(static_cast<size_t>(mine.count));
    own_chunk = own.data();
  }
  ring_reduce_scatter(comm, scope, input, own_chunk, count, op, kTagReduce);
  if (r == root) {
    std::vector<RequestPtr> recvs;
    for (int i = 0; i < n; ++i) {
      if (i == root) continue;
      const Chunk c = chunk_of(count, n, i);
      recvs.push_back(comm.irecv(output + c.offset, c.count * sizeof(T), i, kTagReduce));
      scope.step();
    }
    for (auto& q : recvs) q->wait();
  } else {
    comm.send(own_chunk, mine.count * sizeof(T), root, kTagReduce);
    scope.step();
  }
}

#define DTRAIN_INSTANTIATE_RING(T)                                                              \
  template void ring_reduce_scatter_in_place<T>(Communicator&, OperationScope&, T*, int64_t,    \
                                                ReduceOp, int);                                 \
  template void ring_all_gather_in_place<T>(Communicator&, OperationScope&, T*, int64_t, int);  \
  template void ring_reduce_scatter<T>(Communicator&, OperationScope&, const T*, T*, int64_t,   \
                                       ReduceOp, int);                                          \
  template void ring_reduce_scatter_chunks<T>(Communicator&, OperationScope&, const T*, T*,     \
                                              std::span<const Chunk>, ReduceOp, int);           \
  template void ring_all_gather_chunks_in_place<T>(Communicator&, OperationScope&, T*,          \
                                                   std::span<const Chunk>, int);                \
  template void ring_broadcast<T>(Communicator&, OperationScope&, T*, int64_t, int);            \
  template void ring_reduce<T>(Communicator&, OperationScope&, const T*, T*, int64_t, ReduceOp, \
                               int);
DTRAIN_INSTANTIATE_RING(float)
DTRAIN_INSTANTIATE_RING(int64_t)
DTRAIN_INSTANTIATE_RING(bf16)

}  // namespace dtrain::comm::detail
