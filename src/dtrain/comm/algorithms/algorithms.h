// Internal to comm/: the algorithm families behind collectives.h, one file each (ring.cc,
// naive.cc, tree.cc), and the element-wise reduction they share. collectives.cc validates
// arguments, opens the OperationScope and dispatches here; these functions may assume
// size() > 1 and count > 0.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dtrain/comm/chunks.h"
#include "dtrain/comm/collective_kind.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/core/bf16.h"

namespace dtrain::comm::detail {

// Message tags, one per collective, so a mismatch between ranks shows up as an error naming
// the tags instead of silently pairing the wrong messages.
inline constexpr int kTagBroadcast = 101;
inline constexpr int kTagReduce = 102;
inline constexpr int kTagAllReduce = 103;
inline constexpr int kTagReduceScatter = 104;
inline constexpr int kTagAllGather = 105;
inline constexpr int kTagReduceScatterV = 106;
inline constexpr int kTagAllGatherV = 107;
inline constexpr int kTagAllToAll = 108;

// dst[i] = a[i] (op) b[i]; dst may alias a or b. avg reduces like sum (callers scale once).
template <typename T>
inline void reduce_into(T* dst, const T* a, const T* b, int64_t n, ReduceOp op) {
  if (op == ReduceOp::max) {
    for (int64_t i = 0; i < n; ++i) dst[i] = std::max(a[i], b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
  }
}

template <typename T>
inline void scale(T* data, int64_t n, T factor) {
  for (int64_t i = 0; i < n; ++i) data[i] *= factor;
}

// bf16: each pair is added (or compared) in fp32 and the result rounded to bf16, so a ring
// reduction rounds once per hop, as NCCL's bf16 reductions do.
inline void reduce_into(bf16* dst, const bf16* a, const bf16* b, int64_t n, ReduceOp op) {
  if (op == ReduceOp::max) {
    for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(std::max(to_float(a[i]), to_float(b[i])));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(to_float(a[i]) + to_float(b[i]));
  }
}
inline void scale(bf16* data, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) data[i] = to_bf16(to_float(data[i]) * factor);
}

inline int64_t max_chunk(int64_t count, int parts) {
  return chunk_of(count, parts, 0).count;
}

// Ring (bandwidth-optimal).
template <typename T>
void ring_reduce_scatter_in_place(Communicator& comm, OperationScope& scope, T* data, int64_t count,
                                  ReduceOp op, int tag);
template <typename T>
void ring_all_gather_in_place(Communicator& comm, OperationScope& scope, T* data, int64_t count,
                              int tag);
template <typename T>
void ring_reduce_scatter(Communicator& comm, OperationScope& scope, const T* input, T* output,
                         int64_t count, ReduceOp op, int tag);
// The same over caller-chosen chunks (collectives_v.h): chunk i is chunks[i].
template <typename T>
void ring_reduce_scatter_chunks(Communicator& comm, OperationScope& scope, const T* input,
                                T* output, std::span<const Chunk> chunks, ReduceOp op, int tag);
template <typename T>
void ring_all_gather_chunks_in_place(Communicator& comm, OperationScope& scope, T* data,
                                     std::span<const Chunk> chunks, int tag);
template <typename T>
void ring_broadcast(Communicator& comm, OperationScope& scope, T* data, int64_t count, int root);
template <typename T>
void ring_reduce(Communicator& comm, OperationScope& scope, const T* input, T* output,
                 int64_t count, ReduceOp op, int root);

// Naive (everything through one root).
template <typename T>
void naive_broadcast(Communicator& comm, OperationScope& scope, T* data, int64_t count, int root,
                     int tag);
template <typename T>
void naive_reduce(Communicator& comm, OperationScope& scope, const T* input, T* output,
                  int64_t count, ReduceOp op, int root, int tag);
template <typename T>
void naive_reduce_scatter(Communicator& comm, OperationScope& scope, const T* input, T* output,
                          int64_t count, ReduceOp op);
template <typename T>
void naive_all_gather(Communicator& comm, OperationScope& scope, const T* input, T* output,
                      int64_t count);

// Tree (latency-optimal).
template <typename T>
void tree_broadcast(Communicator& comm, OperationScope& scope, T* data, int64_t count, int root);
template <typename T>
void tree_reduce(Communicator& comm, OperationScope& scope, const T* input, T* output,
                 int64_t count, ReduceOp op, int root);
template <typename T>
void recursive_doubling_all_reduce(Communicator& comm, OperationScope& scope, T* data,
                                   int64_t count, ReduceOp op, int tag);
template <typename T>
void bruck_all_gather(Communicator& comm, OperationScope& scope, const T* input, T* output,
                      int64_t count);

// Direct (shared memory: comm/shared_memory.h; the caller checked comm.shared_memory()). These
// apply avg themselves (the 1/N scaling happens once, before the result is shared).
template <typename T>
void direct_all_reduce(Communicator& comm, OperationScope& scope, T* data, int64_t count,
                       ReduceOp op);
template <typename T>
void direct_reduce_scatter_chunks(Communicator& comm, OperationScope& scope, const T* input,
                                  T* output, std::span<const Chunk> chunks, ReduceOp op);
// `input` is this rank's chunk (it may alias output + chunks[rank].offset).
template <typename T>
void direct_all_gather_chunks(Communicator& comm, OperationScope& scope, const T* input, T* output,
                              std::span<const Chunk> chunks);
template <typename T>
void direct_broadcast(Communicator& comm, OperationScope& scope, T* data, int64_t count, int root);
template <typename T>
void direct_reduce(Communicator& comm, OperationScope& scope, const T* input, T* output,
                   int64_t count, ReduceOp op, int root);

// All-to-all (comm/all_to_all.h): pure data movement, so written once over bytes; the parts are
// in elements of `element_bytes` each. The self part is copied here too. pairwise.cc runs N-1
// send/recv steps; direct_all_to_all.cc reads the peers' parts through shared memory.
void pairwise_all_to_all(Communicator& comm, OperationScope& scope, const std::byte* input,
                         std::span<const Chunk> send, std::byte* output,
                         std::span<const Chunk> recv, int64_t element_bytes, int tag);
void direct_all_to_all(Communicator& comm, OperationScope& scope, const std::byte* input,
                       std::span<const Chunk> send, std::byte* output, std::span<const Chunk> recv,
                       int64_t element_bytes);

// The balanced chunks of chunk_of, one per rank.
inline std::vector<Chunk> balanced_chunks(int64_t count, int parts) {
  std::vector<Chunk> chunks;
  for (int q = 0; q < parts; ++q) chunks.push_back(chunk_of(count, parts, q));
  return chunks;
}

}  // namespace dtrain::comm::detail
