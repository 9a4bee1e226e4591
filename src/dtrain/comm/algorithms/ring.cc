// Ring algorithms. The data is cut into one chunk per rank (chunk_of). In the reduce-scatter,
// at step s rank r sends chunk (r-s-1) mod N to its right neighbour and receives chunk
// (r-s-2) mod N from its left one, adding its own contribution; after N-1 steps it holds
// chunk r fully reduced. The all-gather then passes the reduced chunks around the ring in
// N-1 more steps. Each step moves one chunk per rank: S/N bytes, so an all-reduce sends
// 2(N-1)/N * S bytes per rank in 2(N-1) steps, which no algorithm beats in bytes.
#include <cstring>

#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm::detail {
namespace {

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

}  // namespace

template <typename T>
void ring_reduce_scatter_in_place(Communicator& comm, OperationScope& scope, T* data, int64_t count,
                                  ReduceOp op, int tag) {
  const int n = comm.size(), r = comm.rank();
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  T* incoming = static_cast<T*>(comm.scratch(0, max_chunk(count, n) * sizeof(T)));
  for (int s = 0; s < n - 1; ++s) {
    const Chunk out = chunk_of(count, n, mod(r - s - 1, n));
    const Chunk in = chunk_of(count, n, mod(r - s - 2, n));
    comm.send_recv(data + out.offset, out.count * sizeof(T), next, incoming, in.count * sizeof(T),
                   prev, tag);
    reduce_into(data + in.offset, data + in.offset, incoming, in.count, op);
    scope.step();
  }
}

template <typename T>
void ring_all_gather_in_place(Communicator& comm, OperationScope& scope, T* data, int64_t count,
                              int tag) {
  const int n = comm.size(), r = comm.rank();
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const Chunk out = chunk_of(count, n, mod(r - s, n));
    const Chunk in = chunk_of(count, n, mod(r - s - 1, n));
    comm.send_recv(data + out.offset, out.count * sizeof(T), next, data + in.offset,
                   in.count * sizeof(T), prev, tag);
    scope.step();
  }
}

// Out of place: the partial sums travel in two alternating scratch chunks (one is being sent
// while the next is written), and the last step writes straight into `output`.
template <typename T>
void ring_reduce_scatter(Communicator& comm, OperationScope& scope, const T* input, T* output,
                         int64_t count, ReduceOp op, int tag) {
  const int n = comm.size(), r = comm.rank();
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const int64_t chunk_bytes = max_chunk(count, n) * sizeof(T);
  T* incoming = static_cast<T*>(comm.scratch(0, chunk_bytes));
  T* partial[2] = {static_cast<T*>(comm.scratch(1, chunk_bytes)),
                   static_cast<T*>(comm.scratch(2, chunk_bytes))};
  for (int s = 0; s < n - 1; ++s) {
    const Chunk out = chunk_of(count, n, mod(r - s - 1, n));
    const Chunk in = chunk_of(count, n, mod(r - s - 2, n));
    const T* send_from = s == 0 ? input + out.offset : partial[(s - 1) % 2];
    comm.send_recv(send_from, out.count * sizeof(T), next, incoming, in.count * sizeof(T), prev,
                   tag);
    T* dst = s == n - 2 ? output : partial[s % 2];
    reduce_into(dst, input + in.offset, incoming, in.count, op);
    scope.step();
  }
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
  template void ring_broadcast<T>(Communicator&, OperationScope&, T*, int64_t, int);            \
  template void ring_reduce<T>(Communicator&, OperationScope&, const T*, T*, int64_t, ReduceOp, \
                               int);
DTRAIN_INSTANTIATE_RING(float)
DTRAIN_INSTANTIATE_RING(int64_t)

}  // namespace dtrain::comm::detail
