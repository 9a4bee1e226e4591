// Collective entry points: validate the arguments, short-circuit the trivial cases (one rank,
// no elements), open the OperationScope that names the call in errors and measures its
// traffic, and dispatch to the algorithm family (algorithms/ring.cc, naive.cc, tree.cc).
#include "dtrain/comm/collectives.h"

#include <charconv>
#include <cstring>
#include <type_traits>

#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm {
namespace {

using detail::kTagAllReduce;
using detail::kTagReduceScatter;

template <typename T>
void check_op(ReduceOp op, CollectiveOp what) {
  if constexpr (std::is_integral_v<T>) {
    DTRAIN_CHECK(op != ReduceOp::avg, name(what),
                 ": avg is defined for float32 and bf16 only; use sum on integer counters");
  }
}

void check_common(const Communicator& comm, int64_t count, CollectiveOp what) {
  DTRAIN_CHECK(count >= 0, name(what), ": negative element count ", count);
  (void)comm;
}

void check_root(const Communicator& comm, int root, CollectiveOp what) {
  DTRAIN_CHECK(root >= 0 && root < comm.size(), name(what), ": root ", root,
               " is outside the group of ", comm.size(), " ranks");
}

// Built with appends, not a stream: it runs on every call, and a 4 KiB all-reduce on the
// latency path takes about a microsecond in all.
std::string operation_name(Communicator& comm, CollectiveOp op, Algorithm algo) {
  char sequence[24];
  const auto [end, ec] = std::to_chars(sequence, sequence + sizeof sequence, comm.next_sequence());
  (void)ec;
  std::string out;
  out.reserve(48);
  out.append(name(op)).append(" #").append(sequence, end).append(" (").append(name(algo));
  out += ')';
  return out;
}

template <typename T>
constexpr ElementType element_type() {
  if constexpr (std::is_same_v<T, bf16>) return ElementType::bf16;
  return std::is_floating_point_v<T> ? ElementType::f32 : ElementType::i64;
}

// Algorithm::native: hand the call to the backend, or fail naming the flag that chose it.
template <typename T>
void run_native(Communicator& comm, CollectiveOp op, ReduceOp reduce, const T* input, T* output,
                int64_t count, int root) {
  NativeCollective c;
  c.op = op;
  c.type = element_type<T>();
  c.reduce = reduce == ReduceOp::avg ? ReduceOp::sum : reduce;
  c.input = input;
  c.output = output;
  c.count = count;
  c.root = root;
  DTRAIN_CHECK(comm.run_native(c), "--algo native: this backend has no collectives of its own ",
               "(native ones come with --backend mpi)");
}

template <typename T>
void finish_average(T* data, int64_t count, int ranks) {
  if constexpr (std::is_same_v<T, bf16>) {
    detail::scale(data, count, 1.0f / static_cast<float>(ranks));
  } else if constexpr (std::is_floating_point_v<T>) {
    detail::scale(data, count, static_cast<T>(1) / static_cast<T>(ranks));
  } else {
    (void)data, (void)count, (void)ranks;
  }
}

}  // namespace

Algorithm resolve_algorithm(Communicator& comm, Algorithm requested, long long bytes) {
  DTRAIN_CHECK(requested != Algorithm::pairwise,
               "--algo pairwise is the all-to-all's exchange (comm/all_to_all.h); the reducing "
               "and gathering collectives run ring, tree, naive, direct or native");
  if (requested == Algorithm::automatic) {
    if (comm.size() > 1 && comm.shared_memory() != nullptr) return Algorithm::direct;
    return choose_algorithm(requested, bytes, comm.size());
  }
  if (requested == Algorithm::direct && comm.size() > 1) {
    DTRAIN_CHECK(comm.shared_memory() != nullptr,
                 "--algo direct: the ranks of this group do not share memory (direct needs the "
                 "threads backend, or MPI ranks that are all on one node)");
  }
  return requested;
}

template <typename T>
Traffic broadcast(Communicator& comm, T* data, int64_t count, int root, Algorithm algo) {
  check_common(comm, count, CollectiveOp::broadcast);
  check_root(comm, root, CollectiveOp::broadcast);
  algo = resolve_algorithm(comm, algo, count * static_cast<long long>(sizeof(T)));
  OperationScope scope(comm, operation_name(comm, CollectiveOp::broadcast, algo));
  if (comm.size() == 1 || count == 0) return scope.traffic();
  switch (algo) {
    case Algorithm::native:
      run_native<T>(comm, CollectiveOp::broadcast, ReduceOp::sum, data, data, count, root);
      break;
    case Algorithm::ring:
      detail::ring_broadcast(comm, scope, data, count, root);
      break;
    case Algorithm::direct:
      detail::direct_broadcast(comm, scope, data, count, root);
      break;
    case Algorithm::naive:
      detail::naive_broadcast(comm, scope, data, count, root, detail::kTagBroadcast);
      break;
    default:
      detail::tree_broadcast(comm, scope, data, count, root);
      break;
  }
  return scope.traffic();
}

template <typename T>
Traffic reduce(Communicator& comm, const T* input, T* output, int64_t count, ReduceOp op, int root,
               Algorithm algo) {
  check_common(comm, count, CollectiveOp::reduce);
  check_root(comm, root, CollectiveOp::reduce);
  check_op<T>(op, CollectiveOp::reduce);
  DTRAIN_CHECK(comm.rank() != root || output != nullptr || count == 0,
               "reduce: the root needs an output buffer");
  algo = resolve_algorithm(comm, algo, count * static_cast<long long>(sizeof(T)));
  OperationScope scope(comm, operation_name(comm, CollectiveOp::reduce, algo));
  if (count == 0) return scope.traffic();
  if (comm.size() == 1) {
    if (output != input) std::memcpy(output, input, count * sizeof(T));
  } else {
    switch (algo) {
      case Algorithm::native:
        run_native<T>(comm, CollectiveOp::reduce, op, input, output, count, root);
        break;
      case Algorithm::ring:
        detail::ring_reduce(comm, scope, input, output, count, op, root);
        break;
      case Algorithm::direct:
        detail::direct_reduce(comm, scope, input, output, count, op, root);
        return scope.traffic();  // averaged already
      case Algorithm::naive:
        detail::naive_reduce(comm, scope, input, output, count, op, root, detail::kTagReduce);
        break;
      default:
        detail::tree_reduce(comm, scope, input, output, count, op, root);
        break;
    }
  }
  if (op == ReduceOp::avg && comm.rank() == root) finish_average(output, count, comm.size());
  return scope.traffic();
}

template <typename T>
Traffic all_reduce(Communicator& comm, T* data, int64_t count, ReduceOp op, Algorithm algo) {
  check_common(comm, count, CollectiveOp::all_reduce);
  check_op<T>(op, CollectiveOp::all_reduce);
  algo = resolve_algorithm(comm, algo, count * static_cast<long long>(sizeof(T)));
  OperationScope scope(comm, operation_name(comm, CollectiveOp::all_reduce, algo));
  const int n = comm.size();
  if (n == 1 || count == 0) return scope.traffic();
  switch (algo) {
    case Algorithm::native:
      run_native<T>(comm, CollectiveOp::all_reduce, op, data, data, count, 0);
      if (op == ReduceOp::avg) finish_average(data, count, n);
      return scope.traffic();
    case Algorithm::ring: {
      detail::ring_reduce_scatter_in_place(comm, scope, data, count, op, kTagAllReduce);
      // Average the owned chunk once, before it is shared, so every rank gets the same bits.
      const Chunk mine = chunk_of(count, n, comm.rank());
      if (op == ReduceOp::avg) finish_average(data + mine.offset, mine.count, n);
      detail::ring_all_gather_in_place(comm, scope, data, count, kTagAllReduce);
      return scope.traffic();
    }
    case Algorithm::direct:
      detail::direct_all_reduce(comm, scope, data, count, op);
      return scope.traffic();
    case Algorithm::naive:
      detail::naive_reduce(comm, scope, data, data, count, op, 0, kTagAllReduce);
      if (op == ReduceOp::avg && comm.rank() == 0) finish_average(data, count, n);
      detail::naive_broadcast(comm, scope, data, count, 0, kTagAllReduce);
      return scope.traffic();
    default:
      detail::recursive_doubling_all_reduce(comm, scope, data, count, op, kTagAllReduce);
      if (op == ReduceOp::avg) finish_average(data, count, n);
      return scope.traffic();
  }
}

template <typename T>
Traffic reduce_scatter(Communicator& comm, const T* input, T* output, int64_t count, ReduceOp op,
                       Algorithm algo) {
  check_common(comm, count, CollectiveOp::reduce_scatter);
  check_op<T>(op, CollectiveOp::reduce_scatter);
  algo = resolve_algorithm(comm, algo, count * static_cast<long long>(sizeof(T)));
  OperationScope scope(comm, operation_name(comm, CollectiveOp::reduce_scatter, algo));
  const int n = comm.size();
  const Chunk mine = chunk_of(count, n, comm.rank());
  if (count == 0) return scope.traffic();
  if (n == 1) {
    if (output != input) std::memmove(output, input, count * sizeof(T));
    return scope.traffic();
  }
  switch (algo) {
    case Algorithm::native:
      run_native<T>(comm, CollectiveOp::reduce_scatter, op, input, output, count, 0);
      break;
    case Algorithm::ring:
      detail::ring_reduce_scatter(comm, scope, input, output, count, op, kTagReduceScatter);
      break;
    case Algorithm::naive:
      detail::naive_reduce_scatter(comm, scope, input, output, count, op);
      break;
    case Algorithm::direct: {
      const std::vector<Chunk> chunks = detail::balanced_chunks(count, n);
      detail::direct_reduce_scatter_chunks(comm, scope, input, output,
                                           std::span<const Chunk>(chunks), op);
      return scope.traffic();
    }
    default: {
      // Latency-optimal: a recursive-doubling all-reduce of a copy, keeping this rank's chunk.
      T* work = static_cast<T*>(comm.scratch(1, count * sizeof(T)));
      std::memcpy(work, input, count * sizeof(T));
      detail::recursive_doubling_all_reduce(comm, scope, work, count, op, kTagReduceScatter);
      // A rank whose chunk is empty may pass a null output (memmove's arguments must not be).
      if (mine.count > 0) std::memmove(output, work + mine.offset, mine.count * sizeof(T));
      break;
    }
  }
  if (op == ReduceOp::avg) finish_average(output, mine.count, n);
  return scope.traffic();
}

template <typename T>
Traffic all_gather(Communicator& comm, const T* input, T* output, int64_t count, Algorithm algo) {
  check_common(comm, count, CollectiveOp::all_gather);
  algo = resolve_algorithm(comm, algo, count * static_cast<long long>(sizeof(T)));
  OperationScope scope(comm, operation_name(comm, CollectiveOp::all_gather, algo));
  const int n = comm.size();
  const Chunk mine = chunk_of(count, n, comm.rank());
  if (count == 0) return scope.traffic();
  if (n == 1) {
    if (output != input) std::memmove(output, input, count * sizeof(T));
    return scope.traffic();
  }
  switch (algo) {
    case Algorithm::native:
      run_native<T>(comm, CollectiveOp::all_gather, ReduceOp::sum, input, output, count, 0);
      break;
    case Algorithm::ring:
      if (output + mine.offset != input && mine.count > 0) {  // an empty chunk: input may be null
        std::memmove(output + mine.offset, input, mine.count * sizeof(T));
      }
      detail::ring_all_gather_in_place(comm, scope, output, count, detail::kTagAllGather);
      break;
    case Algorithm::naive:
      detail::naive_all_gather(comm, scope, input, output, count);
      break;
    case Algorithm::direct: {
      const std::vector<Chunk> chunks = detail::balanced_chunks(count, n);
      detail::direct_all_gather_chunks(comm, scope, input, output, std::span<const Chunk>(chunks));
      break;
    }
    default:
      detail::bruck_all_gather(comm, scope, input, output, count);
      break;
  }
  return scope.traffic();
}

#define DTRAIN_INSTANTIATE_COLLECTIVES(T)                                                        \
  template Traffic broadcast<T>(Communicator&, T*, int64_t, int, Algorithm);                     \
  template Traffic reduce<T>(Communicator&, const T*, T*, int64_t, ReduceOp, int, Algorithm);    \
  template Traffic all_reduce<T>(Communicator&, T*, int64_t, ReduceOp, Algorithm);               \
  template Traffic reduce_scatter<T>(Communicator&, const T*, T*, int64_t, ReduceOp, Algorithm); \
  template Traffic all_gather<T>(Communicator&, const T*, T*, int64_t, Algorithm);
DTRAIN_INSTANTIATE_COLLECTIVES(float)
DTRAIN_INSTANTIATE_COLLECTIVES(int64_t)
DTRAIN_INSTANTIATE_COLLECTIVES(bf16)

}  // namespace dtrain::comm
