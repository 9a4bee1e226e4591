// Naive algorithms: every message goes through one root. Reduce: the others send their whole
// buffer to the root, which adds them in rank order. Broadcast: the root sends the whole
// buffer to each rank. The root moves (N-1)*S bytes each way, so these are the baseline the
// ring and tree improve on, and the reference for the cost model's worst case.
#include <cstring>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm::detail {

template <typename T>
void naive_broadcast(Communicator& comm, OperationScope& scope, T* data, int64_t count, int root,
                     int tag) {
  const int n = comm.size(), r = comm.rank();
  const int64_t bytes = count * sizeof(T);
  if (r == root) {
    std::vector<RequestPtr> sends;
    for (int i = 0; i < n; ++i) {
      if (i == root) continue;
      sends.push_back(comm.isend(data, bytes, i, tag));
      scope.step();
    }
    for (auto& s : sends) s->wait();
  } else {
    comm.recv(data, bytes, root, tag);
    scope.step();
  }
}

template <typename T>
void naive_reduce(Communicator& comm, OperationScope& scope, const T* input, T* output,
                  int64_t count, ReduceOp op, int root, int tag) {
  const int n = comm.size(), r = comm.rank();
  const int64_t bytes = count * sizeof(T);
  if (r != root) {
    comm.send(input, bytes, root, tag);
    scope.step();
    return;
  }
  if (output != input) std::memcpy(output, input, bytes);
  T* incoming = static_cast<T*>(comm.scratch(0, bytes));
  for (int i = 0; i < n; ++i) {
    if (i == root) continue;
    comm.recv(incoming, bytes, i, tag);
    reduce_into(output, output, incoming, count, op);
    scope.step();
  }
}

// Reduce everything at rank 0, which then sends each rank its chunk.
template <typename T>
void naive_reduce_scatter(Communicator& comm, OperationScope& scope, const T* input, T* output,
                          int64_t count, ReduceOp op) {
  const int n = comm.size(), r = comm.rank();
  if (r == 0) {
    T* full = static_cast<T*>(comm.scratch(1, count * sizeof(T)));
    naive_reduce(comm, scope, input, full, count, op, 0, kTagReduceScatter);
    std::vector<RequestPtr> sends;
    for (int i = 1; i < n; ++i) {
      const Chunk c = chunk_of(count, n, i);
      sends.push_back(comm.isend(full + c.offset, c.count * sizeof(T), i, kTagReduceScatter));
      scope.step();
    }
    const Chunk mine = chunk_of(count, n, 0);
    std::memmove(output, full + mine.offset, mine.count * sizeof(T));
    for (auto& s : sends) s->wait();
  } else {
    naive_reduce(comm, scope, input, static_cast<T*>(nullptr), count, op, 0, kTagReduceScatter);
    comm.recv(output, chunk_of(count, n, r).count * sizeof(T), 0, kTagReduceScatter);
    scope.step();
  }
}

// Gather every chunk at rank 0, which then sends the whole buffer to each rank.
template <typename T>
void naive_all_gather(Communicator& comm, OperationScope& scope, const T* input, T* output,
                      int64_t count) {
  const int n = comm.size(), r = comm.rank();
  const Chunk mine = chunk_of(count, n, r);
  if (r == 0) {
    if (output + mine.offset != input)
      std::memmove(output + mine.offset, input, mine.count * sizeof(T));
    std::vector<RequestPtr> recvs;
    for (int i = 1; i < n; ++i) {
      const Chunk c = chunk_of(count, n, i);
      recvs.push_back(comm.irecv(output + c.offset, c.count * sizeof(T), i, kTagAllGather));
      scope.step();
    }
    for (auto& q : recvs) q->wait();
  } else {
    comm.send(input, mine.count * sizeof(T), 0, kTagAllGather);
    scope.step();
  }
  naive_broadcast(comm, scope, output, count, 0, kTagAllGather);
}

#define DTRAIN_INSTANTIATE_NAIVE(T)                                                              \
  template void naive_broadcast<T>(Communicator&, OperationScope&, T*, int64_t, int, int);       \
  template void naive_reduce<T>(Communicator&, OperationScope&, const T*, T*, int64_t, ReduceOp, \
                                int, int);                                                       \
  template void naive_reduce_scatter<T>(Communicator&, OperationScope&, const T*, T*, int64_t,   \
                                        ReduceOp);                                               \
  template void naive_all_gather<T>(Communicator&, OperationScope&, const T*, T*, int64_t);
DTRAIN_INSTANTIATE_NAIVE(float)
DTRAIN_INSTANTIATE_NAIVE(int64_t)
DTRAIN_INSTANTIATE_NAIVE(bf16)

}  // namespace dtrain::comm::detail
