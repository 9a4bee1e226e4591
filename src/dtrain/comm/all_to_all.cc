// all_to_all and all_to_all_v: check the parts, resolve the algorithm, open the OperationScope
// that names the call in errors and measures its traffic, and run pairwise.cc or
// direct_all_to_all.cc over the parts in bytes (the element type only sizes them).
#include "dtrain/comm/all_to_all.h"

#include <cstring>
#include <type_traits>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm {
namespace {

template <typename T>
constexpr ElementType element_type() {
  if constexpr (std::is_same_v<T, bf16>) return ElementType::bf16;
  return std::is_floating_point_v<T> ? ElementType::f32 : ElementType::i64;
}

void check_parts(const Communicator& comm, std::span<const Chunk> parts, const char* which) {
  DTRAIN_CHECK(static_cast<int>(parts.size()) == comm.size(), "all_to_all_v: ", parts.size(), " ",
               which, " parts for a group of ", comm.size(), " ranks");
  for (size_t i = 0; i < parts.size(); ++i) {
    DTRAIN_CHECK(parts[i].offset >= 0 && parts[i].count >= 0, "all_to_all_v: ", which, " part ", i,
                 " is [", parts[i].offset, ", +", parts[i].count,
                 ") but offsets and counts must not be negative");
  }
}

// One call over parts in elements: the scope, the trivial group, and the algorithm.
template <typename T>
Traffic run(Communicator& comm, const char* what, const T* input, std::span<const Chunk> send,
            T* output, std::span<const Chunk> recv, Algorithm algo) {
  algo = resolve_all_to_all_algorithm(comm, algo);
  OperationScope scope(comm, str(what, " #", comm.next_sequence(), " (", name(algo), ")"));
  const auto* in = reinterpret_cast<const std::byte*>(input);
  auto* out = reinterpret_cast<std::byte*>(output);
  constexpr int64_t kBytes = sizeof(T);
  if (comm.size() == 1) {
    DTRAIN_CHECK(send[0].count == recv[0].count, what, ": the one rank sends ", send[0].count,
                 " elements to itself but expects ", recv[0].count);
    if (send[0].count > 0) {
      std::memmove(out + recv[0].offset * kBytes, in + send[0].offset * kBytes,
                   static_cast<size_t>(send[0].count * kBytes));
    }
    return scope.traffic();
  }
  if (algo == Algorithm::direct) {
    detail::direct_all_to_all(comm, scope, in, send, out, recv, kBytes);
  } else {
    detail::pairwise_all_to_all(comm, scope, in, send, out, recv, kBytes, detail::kTagAllToAll);
  }
  return scope.traffic();
}

}  // namespace

Algorithm resolve_all_to_all_algorithm(Communicator& comm, Algorithm requested) {
  switch (requested) {
    case Algorithm::automatic:
      return comm.size() > 1 && comm.shared_memory() != nullptr ? Algorithm::direct
                                                                : Algorithm::pairwise;
    case Algorithm::direct:
      DTRAIN_CHECK(comm.size() == 1 || comm.shared_memory() != nullptr,
                   "--algo direct: the ranks of this group do not share memory (direct needs the "
                   "threads backend, or MPI ranks that are all on one node)");
      return requested;
    case Algorithm::pairwise:
    case Algorithm::native:
      return requested;
    default:
      throw Error(str("--algo ", name(requested),
                      ": the all-to-all runs pairwise, direct, native (MPI; all_to_all only) or "
                      "auto"));
  }
}

template <typename T>
Traffic all_to_all(Communicator& comm, const T* input, T* output, int64_t block_count,
                   Algorithm algo) {
  DTRAIN_CHECK(block_count >= 0, "all_to_all: negative block size ", block_count);
  const int n = comm.size();
  DTRAIN_CHECK(block_count == 0 || input != output,
               "all_to_all: the input and the output must be different buffers");
  algo = resolve_all_to_all_algorithm(comm, algo);
  if (algo == Algorithm::native) {
    OperationScope scope(comm, str("all_to_all #", comm.next_sequence(), " (native)"));
    if (block_count == 0) return scope.traffic();
    NativeCollective c;
    c.op = CollectiveOp::all_to_all;
    c.type = element_type<T>();
    c.input = input;
    c.output = output;
    c.count = block_count;
    DTRAIN_CHECK(comm.run_native(c), "--algo native: this backend has no collectives of its own ",
                 "(native ones come with --backend mpi)");
    return scope.traffic();
  }
  std::vector<Chunk> blocks(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) blocks[q] = {q * block_count, block_count};
  if (block_count == 0) {  // the same on every rank: nothing moves, not even a barrier
    OperationScope scope(comm, str("all_to_all #", comm.next_sequence(), " (", name(algo), ")"));
    return scope.traffic();
  }
  return run(comm, "all_to_all", input, std::span<const Chunk>(blocks), output,
             std::span<const Chunk>(blocks), algo);
}

template <typename T>
Traffic all_to_all_v(Communicator& comm, const T* input, std::span<const Chunk> send, T* output,
                     std::span<const Chunk> recv, Algorithm algo) {
  check_parts(comm, send, "send");
  check_parts(comm, recv, "receive");
  DTRAIN_CHECK(algo != Algorithm::native,
               "all_to_all_v: --algo native is not offered (MPI's Alltoallv takes int counts; "
               "use pairwise or direct)");
  return run(comm, "all_to_all_v", input, send, output, recv, algo);
}

#define DTRAIN_INSTANTIATE_ALL_TO_ALL(T)                                                \
  template Traffic all_to_all<T>(Communicator&, const T*, T*, int64_t, Algorithm);      \
  template Traffic all_to_all_v<T>(Communicator&, const T*, std::span<const Chunk>, T*, \
                                   std::span<const Chunk>, Algorithm);
DTRAIN_INSTANTIATE_ALL_TO_ALL(float)
DTRAIN_INSTANTIATE_ALL_TO_ALL(int64_t)
DTRAIN_INSTANTIATE_ALL_TO_ALL(bf16)
#undef DTRAIN_INSTANTIATE_ALL_TO_ALL

}  // namespace dtrain::comm
