// The direct algorithm: ranks that share memory (comm/shared_memory.h) skip the messages. In a
// shared address space every rank publishes its buffers, and after one flag barrier rank r
// reduces its slice (chunk r) straight from every rank's input, a cache-sized block at a time,
// and writes the result once into every rank's output; a second barrier ends the call, after
// which no rank touches another's memory. Each input element is read once and each output
// element written once: the memory traffic's lower bound. Through a shared window (MPI ranks on
// one node) the same steps run on the slots, segment by segment: a rank copies its segment into
// its slot, the ranks reduce across the slots, and each copies its result back.
//
// Counting: the bytes a rank reads from another rank's memory (its buffer, or its slot) are
// received from that rank, the bytes it writes into another's are sent to it; the copies into
// and out of its own slot are local. Each barrier is a step. plan::collective_traffic gives the
// same figures (docs/algorithms.md, "direct").
#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/algorithms/reduce_kernels.h"

namespace dtrain::comm::detail {
namespace {

// The accumulator of one block: float32 for float and bf16 (one rounding), int64 for int64.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, int64_t>, int64_t, float>;

// 16 KiB of accumulator: it stays in L1 between the reduction and the stores.
constexpr int64_t kBlockBytes = 16 << 10;

// One pointer per rank, on the stack for groups of up to 16 (no allocation on the latency path).
template <typename P>
class PointerList {
 public:
  explicit PointerList(int n) : n_(n) {
    if (n > kInline) heap_.resize(static_cast<size_t>(n));
  }
  P& operator[](int q) { return n_ > kInline ? heap_[q] : inline_[q]; }
  const P* data() const { return n_ > kInline ? heap_.data() : inline_.data(); }
  int size() const { return n_; }

 private:
  static constexpr int kInline = 16;
  int n_;
  std::array<P, kInline> inline_{};
  std::vector<P> heap_;
};

// The group's shared memory for one call: segment views, barriers and the traffic counts.
template <typename T>
class DirectGroup {
 public:
  DirectGroup(Communicator& comm, OperationScope& scope)
      : comm_(comm),
        scope_(scope),
        shm_(*comm.shared_memory()),
        n_(comm.size()),
        rank_(comm.rank()),
        in_(n_),
        out_(n_) {}

  int size() const { return n_; }
  int rank() const { return rank_; }
  bool staged() const { return !shm_.shares_address_space(); }
  // Elements of T one slot holds (staged only).
  int64_t slot_elements() const { return shm_.slot_bytes() / static_cast<int64_t>(sizeof(T)); }
  T* slot(int q) const { return reinterpret_cast<T*>(shm_.slot(q)); }

  // Makes the segment's buffers visible to every rank: in a shared address space this rank's
  // `in` and `out` are published; staged, every rank's views are its slot (which the caller
  // has filled). Then the first barrier.
  void open(const T* in, T* out) {
    if (staged()) {
      for (int q = 0; q < n_; ++q) in_[q] = out_[q] = slot(q);
    } else {
      shm_.publish(in, out);
    }
    barrier();
    if (!staged()) {
      for (int q = 0; q < n_; ++q) {
        in_[q] = static_cast<const T*>(shm_.input_of(q));
        out_[q] = static_cast<T*>(shm_.output_of(q));
      }
    }
  }
  void close() {
    shm_.closing_barrier();
    scope_.step();
  }

  const T* in(int q) { return in_[q]; }
  T* out(int q) { return out_[q]; }

  // Elements this rank read from rank q's memory and wrote into it.
  void count(int q, int64_t read, int64_t written) {
    if (q == rank_) return;
    comm_.add_shared_memory_traffic(q, read * static_cast<int64_t>(sizeof(T)),
                                    written * static_cast<int64_t>(sizeof(T)));
  }

 private:
  void barrier() {
    shm_.barrier();
    scope_.step();
  }

  Communicator& comm_;
  OperationScope& scope_;
  SharedMemoryGroup& shm_;
  int n_, rank_;
  PointerList<const T*> in_;
  PointerList<T*> out_;
};

// Reduces elements [0, n) of srcs (in rank order), scales by 1/divisor for avg, and stores the
// result into every non-null one of the `dests` outputs.
template <typename T>
void reduce_to_all(PointerList<const T*>& srcs, T* const* dests, int ndests, int64_t n, ReduceOp op,
                   int divisor) {
  constexpr int64_t kBlock = kBlockBytes / static_cast<int64_t>(sizeof(Acc<T>));
  alignas(64) Acc<T> acc[kBlock];
  PointerList<const T*> block_srcs(srcs.size());
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t len = std::min(kBlock, n - begin);
    for (int q = 0; q < srcs.size(); ++q) block_srcs[q] = srcs[q] + begin;
    reduce_block(acc, block_srcs.data(), srcs.size(), len, op);
    if constexpr (!std::is_integral_v<T>) {
      if (op == ReduceOp::avg) scale_block(acc, len, 1.0f / static_cast<float>(divisor));
    }
    for (int d = 0; d < ndests; ++d) {
      if (dests[d] == nullptr) continue;
      if constexpr (std::is_same_v<T, bf16>) {
        store_block(dests[d] + begin, acc, len);
      } else {
        std::memcpy(dests[d] + begin, acc, static_cast<size_t>(len) * sizeof(T));
      }
    }
  }
}
template <typename T>
void reduce_to_all(PointerList<const T*>& srcs, PointerList<T*>& dests, int64_t n, ReduceOp op,
                   int divisor) {
  reduce_to_all(srcs, dests.data(), dests.size(), n, op, divisor);
}
template <typename T>
void reduce_to_one(PointerList<const T*>& srcs, T* dest, int64_t n, ReduceOp op, int divisor) {
  reduce_to_all(srcs, &dest, 1, n, op, divisor);
}

template <typename T>
void copy(T* dst, const T* src, int64_t n) {
  if (n > 0 && dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
}

}  // namespace

// The latency path (kDirectExchangeMaxBytes): one exchange through the small slots. Each rank
// copies its data into its slot and posts the exchange's number; once every rank has posted it
// reduces all N inputs itself, in rank order (every rank gets the same bits). A rank writes
// exchange e + 2 into the slot of e only after it has read everyone's e + 1, which each peer
// posted after reading e: nobody still reads the slot. One synchronisation per call, where the
// bandwidth path needs two barriers.
template <typename T>
void exchange_all_reduce(Communicator& comm, OperationScope& scope, T* data, int64_t count,
                         ReduceOp op) {
  SharedMemoryGroup& shm = *comm.shared_memory();
  const int n = comm.size(), r = comm.rank();
  const uint64_t exchange = shm.next_exchange();
  const int parity = static_cast<int>(exchange % 2);
  copy(reinterpret_cast<T*>(shm.small_slot(r, parity)), data, count);
  shm.post(exchange);
  shm.wait_posted(exchange);
  scope.step();
  PointerList<const T*> srcs(n);
  for (int q = 0; q < n; ++q) {
    srcs[q] = q == r ? data : reinterpret_cast<const T*>(shm.small_slot(q, parity));
    if (q != r) comm.add_shared_memory_traffic(q, count * static_cast<int64_t>(sizeof(T)), 0);
  }
  reduce_to_one(srcs, data, count, op, n);
}

template <typename T>
void direct_all_reduce(Communicator& comm, OperationScope& scope, T* data, int64_t count,
                       ReduceOp op) {
  if (count * static_cast<long long>(sizeof(T)) <= kDirectExchangeMaxBytes &&
      comm.shared_memory()->small_slot_bytes() >= kDirectExchangeMaxBytes) {
    exchange_all_reduce(comm, scope, data, count, op);
    return;
  }
  DirectGroup<T> g(comm, scope);
  const int n = g.size(), r = g.rank();
  const int64_t segment = g.staged() ? g.slot_elements() : count;
  PointerList<const T*> srcs(n);
  PointerList<T*> dests(n);
  for (int64_t begin = 0; begin < count; begin += segment) {
    const int64_t len = std::min(segment, count - begin);
    if (g.staged()) copy(g.slot(r), data + begin, len);
    g.open(data + begin, data + begin);
    const Chunk mine = chunk_of(len, n, r);
    for (int q = 0; q < n; ++q) {
      srcs[q] = g.in(q) + mine.offset;
      dests[q] = g.out(q) + mine.offset;
      g.count(q, mine.count, mine.count);
    }
    reduce_to_all(srcs, dests, mine.count, op, n);
    g.close();
    if (g.staged()) copy(data + begin, g.slot(r), len);
  }
}

template <typename T>
void direct_reduce_scatter_chunks(Communicator& comm, OperationScope& scope, const T* input,
                                  T* output, std::span<const Chunk> chunks, ReduceOp op) {
  DirectGroup<T> g(comm, scope);
  const int n = g.size(), r = g.rank();
  const Chunk mine = chunks[r];
  int64_t longest = 0;
  for (const Chunk& c : chunks) longest = std::max(longest, c.count);
  // Staged, a segment holds a piece of every rank's chunk: piece q at q * piece in the slot.
  const int64_t piece = g.staged() ? g.slot_elements() / n : longest;
  DTRAIN_CHECK(piece > 0, "direct reduce_scatter: a ", g.slot_elements() * sizeof(T),
               "-byte slot cannot hold a piece for each of ", n, " ranks");
  PointerList<const T*> srcs(n);
  for (int64_t begin = 0; begin < longest; begin += piece) {
    if (g.staged()) {
      for (int q = 0; q < n; ++q) {
        const int64_t len = std::clamp<int64_t>(chunks[q].count - begin, 0, piece);
        copy(g.slot(r) + q * piece, input + chunks[q].offset + begin, len);
      }
    }
    g.open(input, output);
    const int64_t len = std::clamp<int64_t>(mine.count - begin, 0, piece);
    for (int q = 0; q < n; ++q) {
      srcs[q] = g.staged() ? g.in(q) + r * piece : g.in(q) + mine.offset + begin;
      g.count(q, len, 0);
    }
    if (len > 0) reduce_to_one(srcs, output + begin, len, op, n);
    g.close();
  }
}

template <typename T>
void direct_all_gather_chunks(Communicator& comm, OperationScope& scope, const T* input, T* output,
                              std::span<const Chunk> chunks) {
  DirectGroup<T> g(comm, scope);
  const int n = g.size(), r = g.rank();
  const Chunk mine = chunks[r];
  copy(output + mine.offset, input, mine.count);
  int64_t longest = 0;
  for (const Chunk& c : chunks) longest = std::max(longest, c.count);
  // Staged, a segment is a piece of each rank's chunk, each in its owner's slot.
  const int64_t piece = g.staged() ? g.slot_elements() : longest;
  for (int64_t begin = 0; begin < longest; begin += piece) {
    if (g.staged()) {
      copy(g.slot(r), input + begin, std::clamp<int64_t>(mine.count - begin, 0, piece));
    }
    g.open(input, output);
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      const int64_t len = std::clamp<int64_t>(chunks[q].count - begin, 0, piece);
      copy(output + chunks[q].offset + begin, g.staged() ? g.in(q) : g.in(q) + begin, len);
      g.count(q, len, 0);
    }
    g.close();
  }
}

template <typename T>
void direct_broadcast(Communicator& comm, OperationScope& scope, T* data, int64_t count, int root) {
  DirectGroup<T> g(comm, scope);
  const int r = g.rank();
  const int64_t segment = g.staged() ? g.slot_elements() : count;
  for (int64_t begin = 0; begin < count; begin += segment) {
    const int64_t len = std::min(segment, count - begin);
    if (g.staged() && r == root) copy(g.slot(r), data + begin, len);
    g.open(data + begin, data + begin);
    if (r != root) {
      copy(data + begin, g.in(root), len);
      g.count(root, len, 0);
    }
    g.close();
  }
}

template <typename T>
void direct_reduce(Communicator& comm, OperationScope& scope, const T* input, T* output,
                   int64_t count, ReduceOp op, int root) {
  DirectGroup<T> g(comm, scope);
  const int n = g.size(), r = g.rank();
  const int64_t segment = g.staged() ? g.slot_elements() : count;
  PointerList<const T*> srcs(n);
  for (int64_t begin = 0; begin < count; begin += segment) {
    const int64_t len = std::min(segment, count - begin);
    if (g.staged()) copy(g.slot(r), input + begin, len);
    g.open(input + begin, r == root ? output + begin : nullptr);
    const Chunk mine = chunk_of(len, n, r);
    for (int q = 0; q < n; ++q) {
      srcs[q] = g.in(q) + mine.offset;
      g.count(q, mine.count, q == root ? mine.count : 0);
    }
    reduce_to_one(srcs, g.out(root) + mine.offset, mine.count, op, n);
    g.close();
    if (g.staged() && r == root) copy(output + begin, g.slot(r), len);
  }
}

#define DTRAIN_INSTANTIATE_DIRECT(T)                                                              \
  template void direct_all_reduce<T>(Communicator&, OperationScope&, T*, int64_t, ReduceOp);      \
  template void direct_reduce_scatter_chunks<T>(Communicator&, OperationScope&, const T*, T*,     \
                                                std::span<const Chunk>, ReduceOp);                \
  template void direct_all_gather_chunks<T>(Communicator&, OperationScope&, const T*, T*,         \
                                            std::span<const Chunk>);                              \
  template void direct_broadcast<T>(Communicator&, OperationScope&, T*, int64_t, int);            \
  template void direct_reduce<T>(Communicator&, OperationScope&, const T*, T*, int64_t, ReduceOp, \
                                 int);
DTRAIN_INSTANTIATE_DIRECT(float)
DTRAIN_INSTANTIATE_DIRECT(int64_t)
DTRAIN_INSTANTIATE_DIRECT(bf16)
#undef DTRAIN_INSTANTIATE_DIRECT

}  // namespace dtrain::comm::detail
