// Latency-optimal algorithms: O(log N) steps instead of O(N), each moving more bytes, which
// wins for small messages where the per-step latency dominates.
// - Binomial tree (broadcast, reduce): relative rank r receives from r - lowbit(r) and serves
//   r + 2^j for each 2^j < lowbit(r); ceil(log2 N) levels.
// - Recursive doubling (all-reduce): in round k ranks exchange everything with the partner
//   whose rank differs in bit k and both add. For N not a power of two, with p the largest
//   power of two <= N and rem = N - p, the first 2*rem ranks pair up first: the even one hands
//   its data to the odd one, sits out, and gets the result back at the end.
// - Bruck (all-gather): in round k each rank sends the min(2^k, N - 2^k) chunks it has to rank
//   r - 2^k, and receives as many from r + 2^k; ceil(log2 N) rounds for any N.
#include <cstring>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm::detail {
namespace {

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

}  // namespace

template <typename T>
void tree_broadcast(Communicator& comm, OperationScope& scope, T* data, int64_t count, int root) {
  const int n = comm.size();
  const int rel = mod(comm.rank() - root, n);
  const int64_t bytes = count * sizeof(T);
  int mask = 1;
  while (mask < n) {
    if (rel & mask) {
      comm.recv(data, bytes, mod(rel - mask + root, n), kTagBroadcast);
      scope.step();
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (rel + mask < n) {
      comm.send(data, bytes, mod(rel + mask + root, n), kTagBroadcast);
      scope.step();
    }
  }
}

template <typename T>
void tree_reduce(Communicator& comm, OperationScope& scope, const T* input, T* output,
                 int64_t count, ReduceOp op, int root) {
  const int n = comm.size();
  const int rel = mod(comm.rank() - root, n);
  const int64_t bytes = count * sizeof(T);
  T* acc = rel == 0 ? output : static_cast<T*>(comm.scratch(1, bytes));
  if (acc != input) std::memcpy(acc, input, bytes);
  T* incoming = static_cast<T*>(comm.scratch(0, bytes));
  for (int mask = 1; mask < n; mask <<= 1) {
    if ((rel & mask) == 0) {
      if ((rel | mask) < n) {
        comm.recv(incoming, bytes, mod((rel | mask) + root, n), kTagReduce);
        reduce_into(acc, acc, incoming, count, op);
        scope.step();
      }
    } else {
      comm.send(acc, bytes, mod((rel & ~mask) + root, n), kTagReduce);
      scope.step();
      break;
    }
  }
}

template <typename T>
void recursive_doubling_all_reduce(Communicator& comm, OperationScope& scope, T* data,
                                   int64_t count, ReduceOp op, int tag) {
  const int n = comm.size(), r = comm.rank();
  const int64_t bytes = count * sizeof(T);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  T* incoming = static_cast<T*>(comm.scratch(0, bytes));

  int vrank;  // rank among the p participants, or -1 while sitting out
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      comm.send(data, bytes, r + 1, tag);
      scope.step();
      vrank = -1;
    } else {
      comm.recv(incoming, bytes, r - 1, tag);
      reduce_into(data, incoming, data, count, op);  // lower rank's data first, as in the rounds
      scope.step();
      vrank = r / 2;
    }
  } else {
    vrank = r - rem;
  }
  if (vrank >= 0) {
    for (int mask = 1; mask < p; mask <<= 1) {
      const int vpartner = vrank ^ mask;
      const int partner = vpartner < rem ? vpartner * 2 + 1 : vpartner + rem;
      comm.send_recv(data, bytes, partner, incoming, bytes, partner, tag);
      // Both partners add the same two operands in the same order: identical bits on both.
      if (vpartner < vrank)
        reduce_into(data, incoming, data, count, op);
      else
        reduce_into(data, data, incoming, count, op);
      scope.step();
    }
  }
  if (r < 2 * rem) {
    if (r % 2 == 1)
      comm.send(data, bytes, r - 1, tag);
    else
      comm.recv(data, bytes, r + 1, tag);
    scope.step();
  }
}

template <typename T>
void bruck_all_gather(Communicator& comm, OperationScope& scope, const T* input, T* output,
                      int64_t count) {
  const int n = comm.size(), r = comm.rank();
  // work holds chunks r, r+1, ..., r+N-1 (mod N) back to back; block_offset[j] is where the
  // j-th of them starts.
  std::vector<int64_t> block_offset(static_cast<size_t>(n) + 1, 0);
  for (int j = 0; j < n; ++j)
    block_offset[j + 1] = block_offset[j] + chunk_of(count, n, mod(r + j, n)).count;
  T* work = static_cast<T*>(comm.scratch(1, count * sizeof(T)));
  // A rank with an empty chunk may pass a null input (memcpy's arguments must not be null).
  if (const int64_t mine = chunk_of(count, n, r).count; mine > 0) {
    std::memcpy(work, input, mine * sizeof(T));
  }
  for (int d = 1; d < n; d <<= 1) {
    const int blocks = d < n - d ? d : n - d;
    // Rank r+d's first `blocks` blocks are chunks r+d ... = our blocks d ... d+blocks-1.
    comm.send_recv(work, block_offset[blocks] * sizeof(T), mod(r - d, n), work + block_offset[d],
                   (block_offset[d + blocks] - block_offset[d]) * sizeof(T), mod(r + d, n),
                   kTagAllGather);
    scope.step();
  }
  for (int j = 0; j < n; ++j) {
    const Chunk c = chunk_of(count, n, mod(r + j, n));
    std::memcpy(output + c.offset, work + block_offset[j], c.count * sizeof(T));
  }
}

#define DTRAIN_INSTANTIATE_TREE(T)                                                              \
  template void tree_broadcast<T>(Communicator&, OperationScope&, T*, int64_t, int);            \
  template void tree_reduce<T>(Communicator&, OperationScope&, const T*, T*, int64_t, ReduceOp, \
                               int);                                                            \
  template void recursive_doubling_all_reduce<T>(Communicator&, OperationScope&, T*, int64_t,   \
                                                 ReduceOp, int);                                \
  template void bruck_all_gather<T>(Communicator&, OperationScope&, const T*, T*, int64_t);
DTRAIN_INSTANTIATE_TREE(float)
DTRAIN_INSTANTIATE_TREE(int64_t)
DTRAIN_INSTANTIATE_TREE(bf16)

}  // namespace dtrain::comm::detail
