// MPI backend: point-to-point with MPI_Isend/MPI_Irecv of bytes, waits by polling MPI_Test
// against a deadline, barrier by MPI_Ibarrier, subgroups by MPI_Comm_create_group (only the
// members call it, as the contract says). Errors are returned, not fatal (MPI_ERRORS_RETURN),
// and turned into CommError with the rank, peer, tag and operation. A request that timed out
// or was abandoned is never cancelled: the job is aborted right after (see poll).
#include "dtrain/comm/mpi/backend.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/chunks.h"
#include "dtrain/core/check.h"
#include "dtrain/core/cpu_relax.h"
#include "dtrain/core/timer.h"

namespace dtrain::comm::mpi {
namespace {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

// Polls `request` until it completes or the deadline passes. Spins first (a collective step is
// often microseconds away), then yields, then sleeps briefly so an oversubscribed machine
// still makes progress. The longest gap between two looks is kept: when this process was
// itself stopped (SIGSTOP, a debugger) its peers time out first, and when it resumes its own
// deadline has passed too; its message must then say that it is the stalled one.
void poll(MPI_Request& request, MPI_Status* status, double timeout_s, const std::string& what) {
  const double start_us = now_us();
  const double deadline_us = start_us + timeout_s * 1e6;
  double last_look_us = start_us, longest_gap_us = 0;
  for (int64_t i = 0;; ++i) {
    int done = 0;
    const int rc = MPI_Test(&request, &done, status);
    if (rc != MPI_SUCCESS) {
      int error_class = 0;
      MPI_Error_class(rc, &error_class);
      if (error_class == MPI_ERR_TRUNCATE) {
        throw CommError(str("message size mismatch: ", what, " received a larger message than the ",
                            "buffer it posted (", mpi_error_text(rc), ")"));
      }
      throw CommError(str(what, " failed: ", mpi_error_text(rc)));
    }
    if (done) return;
    if (i > 2000) {
      const double t_us = now_us();
      longest_gap_us = std::max(longest_gap_us, t_us - last_look_us);
      last_look_us = t_us;
      if (t_us > deadline_us) {
        // No MPI_Cancel: cancelling a send is deprecated (MPI 4.1) and OpenMPI 4 crashes in it
        // (SIGSEGV in PMPI_Cancel) when the peer is stopped mid-transfer. A timeout ends the
        // job anyway: the error unwinds to run_ranks / run_on_backend, which abort it.
        if (longest_gap_us * 2 > timeout_s * 1e6) {
          throw CommError(str("timed out after ", timeout_s, " s: ", what,
                              " never completed, but this process itself did not run for ",
                              longest_gap_us * 1e-6,
                              " s of the wait (stopped, or starved of CPU): it is the stalled "
                              "rank"));
        }
        throw CommError(str("timed out after ", timeout_s, " s: ", what,
                            " never completed (the peer is stalled or dead, or itself waiting "
                            "for a rank that is)"));
      }
      if (i > 20000)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      else
        std::this_thread::yield();
    }
  }
}

class MpiRequest : public Request {
 public:
  MpiRequest(double timeout_s, std::string what, int64_t expected_bytes, bool is_recv)
      : timeout_s_(timeout_s),
        what_(std::move(what)),
        expected_bytes_(expected_bytes),
        is_recv_(is_recv) {}
  // Abandoned while pending (an exception unwound past it, e.g. a timeout on the request beside
  // it): left alone, not cancelled or freed. MPI_Cancel of a send crashed OpenMPI here, and
  // MPI_Request_free would let MPI keep reading or writing a buffer its owner is about to
  // release; the exception reaches run_ranks / run_on_backend, which abort the job.
  ~MpiRequest() override = default;
  void wait() override {
    if (finished_) return;
    MPI_Status status;
    poll(request_, &status, timeout_s_, what_);
    finished_ = true;
    if (is_recv_) {
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      DTRAIN_CHECK(count == expected_bytes_, "message size mismatch: ", what_, " expected ",
                   expected_bytes_, " bytes but ", count, " arrived");
    }
  }
  bool done() override {
    if (finished_) return true;
    int flag = 0;
    MPI_Request_get_status(request_, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
  }
  MPI_Request* handle() { return &request_; }

 private:
  double timeout_s_;
  std::string what_;
  int64_t expected_bytes_;
  bool is_recv_;
  bool finished_ = false;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// The direct algorithm's shared memory for a group whose ranks are all on one node: one
// MPI_Win_allocate_shared window in which each rank owns a region:
//   [control: its exchange flag; on rank 0 also the barrier's count and generation]
//   [two small slots (the latency path)] [one slot (the bandwidth path's segments)].
// Synchronisation is by atomics in the window (lock-free, so valid across processes), never
// by MPI calls, so a hand-off costs what the cache lines cost. Waits spin, then yield, then
// sleep in short naps, and fail after the timeout naming the rank and the operation.
class MpiSharedMemory : public SharedMemoryGroup {
 public:
  static constexpr int64_t kControlBytes = 4096;
  static constexpr int64_t kSmallSlotBytes = 64 << 10;
  static constexpr int64_t kSlotBytes = 1 << 20;
  static constexpr int64_t kRegionBytes = kControlBytes + 2 * kSmallSlotBytes + kSlotBytes;

  // Collective over `comm`; nullptr when its ranks are not all on one node (or MPI refuses).
  static std::unique_ptr<MpiSharedMemory> create(MPI_Comm comm, std::vector<int> members,
                                                 double timeout_s,
                                                 std::function<std::string()> operation) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Comm node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) {
      return nullptr;
    }
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    // Every rank learns whether all are on one node (they agree: node_size is the same count).
    int everyone_local = node_size == size ? 1 : 0, all = 0;
    MPI_Allreduce(&everyone_local, &all, 1, MPI_INT, MPI_MIN, comm);
    if (all == 0) {
      MPI_Comm_free(&node);
      return nullptr;
    }
    MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
    void* base = nullptr;
    MPI_Win win = MPI_WIN_NULL;
    int ok =
        MPI_Win_allocate_shared(kRegionBytes, 1, MPI_INFO_NULL, node, &base, &win) == MPI_SUCCESS
            ? 1
            : 0;
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, node);
    if (all_ok == 0) {
      if (ok) MPI_Win_free(&win);
      MPI_Comm_free(&node);
      return nullptr;
    }
    std::memset(base, 0, kControlBytes);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    std::vector<std::byte*> regions(static_cast<size_t>(size));
    for (int q = 0; q < size; ++q) {
      MPI_Aint bytes = 0;
      int disp = 0;
      void* region = nullptr;
      MPI_Win_shared_query(win, q, &bytes, &disp, &region);
      regions[q] = static_cast<std::byte*>(region);
    }
    MPI_Barrier(node);  // every control area is zeroed before anyone uses one
    return std::unique_ptr<MpiSharedMemory>(new MpiSharedMemory(
        node, win, std::move(regions), rank, std::move(members), timeout_s, std::move(operation)));
  }

  ~MpiSharedMemory() override {
    // MPI_Win_free waits for every member: while an error unwinds (a peer stalled or died, and
    // the job is about to be aborted) it would never return, so the window is left to the abort.
    if (std::uncaught_exceptions() > 0) return;
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
    MPI_Comm_free(&node_);
  }

  void barrier() override {
    std::atomic_ref<uint32_t> arrived(*reinterpret_cast<uint32_t*>(regions_[0] + 64));
    std::atomic_ref<uint64_t> generation(*reinterpret_cast<uint64_t*>(regions_[0] + 128));
    const uint64_t gen = generation.load(std::memory_order_acquire);
    entered(rank_).fetch_add(1, std::memory_order_relaxed);
    if (arrived.fetch_add(1, std::memory_order_acq_rel) == static_cast<uint32_t>(size() - 1)) {
      arrived.store(0, std::memory_order_relaxed);
      generation.store(gen + 1, std::memory_order_release);
      return;
    }
    wait_until([&] { return generation.load(std::memory_order_acquire) != gen; },
               "a shared-memory barrier",
               [&](int q) {
                 return entered(q).load(std::memory_order_relaxed) <
                        entered(rank_).load(std::memory_order_relaxed);
               });
  }

  bool shares_address_space() const override { return false; }
  void publish(const void*, void*) override {}
  const void* input_of(int) const override { return nullptr; }
  void* output_of(int) const override { return nullptr; }
  int64_t slot_bytes() const override { return kSlotBytes; }
  std::byte* slot(int rank) const override {
    return regions_[rank] + kControlBytes + 2 * kSmallSlotBytes;
  }
  int64_t small_slot_bytes() const override { return kSmallSlotBytes; }
  std::byte* small_slot(int rank, int parity) override {
    return regions_[rank] + kControlBytes + parity * kSmallSlotBytes;
  }
  void post(uint64_t exchange) override { flag(rank_).store(exchange, std::memory_order_release); }
  void wait_posted(uint64_t exchange) override {
    wait_until(
        [&] {
          for (int q = 0; q < size(); ++q) {
            if (flag(q).load(std::memory_order_acquire) < exchange) return false;
          }
          return true;
        },
        "a shared-memory exchange",
        [&](int q) { return flag(q).load(std::memory_order_relaxed) < exchange; });
  }

 private:
  MpiSharedMemory(MPI_Comm node, MPI_Win win, std::vector<std::byte*> regions, int rank,
                  std::vector<int> members, double timeout_s,
                  std::function<std::string()> operation)
      : node_(node),
        win_(win),
        regions_(std::move(regions)),
        rank_(rank),
        global_rank_(members[static_cast<size_t>(rank)]),
        members_(std::move(members)),
        timeout_s_(timeout_s),
        operation_(std::move(operation)) {
    // Spinning only pays while every rank has a core of its own.
    oversubscribed_ = size() > static_cast<int>(std::thread::hardware_concurrency());
  }

  int size() const { return static_cast<int>(regions_.size()); }
  // Rank q's control area: its exchange flag, and the barriers it has arrived at.
  std::atomic_ref<uint64_t> flag(int q) const {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(regions_[q]));
  }
  std::atomic_ref<uint64_t> entered(int q) const {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(regions_[q] + 8));
  }

  // `missing(q)`: whether group rank q has not arrived yet (named when the wait times out).
  template <typename Done, typename Missing>
  void wait_until(Done done, const char* what, Missing missing) {
    // Spin while every rank has a core, bounded in time (another process may hold the core the
    // awaited rank needs), then yield, then nap: as the threads backend's waits.
    const double start_us = now_us();
    if (!oversubscribed_) {
      for (int i = 0;; ++i) {
        if (done()) return;
        cpu_relax();
        if ((i & 255) == 255 && now_us() - start_us > 20) break;
      }
    }
    const double deadline_us = start_us + timeout_s_ * 1e6;
    for (int64_t i = 0; !done(); ++i) {
      if ((i & 63) == 0 && now_us() > deadline_us) {
        std::string absent;
        for (int q = 0; q < size(); ++q) {
          if (q != rank_ && missing(q)) absent += str(absent.empty() ? "" : ", ", members_[q]);
        }
        throw CommError(str("timed out after ", timeout_s_, " s: rank ", global_rank_,
                            ": waited at ", what, " in ", operation_(), "; nothing came from rank ",
                            absent.empty() ? "?" : absent, " (stalled or dead)"));
      }
      if (now_us() - start_us < 200) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }

  MPI_Comm node_;
  MPI_Win win_;
  std::vector<std::byte*> regions_;  // by group rank
  int rank_, global_rank_;
  std::vector<int> members_;  // world ranks, by group rank
  double timeout_s_;
  std::function<std::string()> operation_;
  bool oversubscribed_ = false;
};

// A tag for MPI_Comm_create_group from the group's name, so two groups with the same
// members but different names are created independently.
int name_tag(std::string_view name) {
  uint32_t h = 2166136261u;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return static_cast<int>(h % 30000u);
}

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned, std::vector<int> members, double timeout_s)
      : comm_(comm), owned_(owned), members_(std::move(members)), timeout_s_(timeout_s) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    init_accounting(world_size_);
  }
  ~MpiCommunicator() override {
    shared_.reset();  // frees its window and node communicator first (collective, like this)
    if (owned_) MPI_Comm_free(&comm_);
  }

  SharedMemoryGroup* shared_memory() override {
    if (!shared_checked_) {
      shared_checked_ = true;
      shared_ = MpiSharedMemory::create(comm_, members_, timeout_s_,
                                        [this] { return current_operation(); });
    }
    return shared_.get();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int global_rank_of(int rank) const override { return members_[rank]; }
  int world_size() const override { return world_size_; }

  void barrier() override {
    MPI_Request request;
    const int rc = MPI_Ibarrier(comm_, &request);
    if (rc != MPI_SUCCESS) throw CommError(str("barrier failed: ", mpi_error_text(rc)));
    poll(request, MPI_STATUS_IGNORE, timeout_s_,
         str("rank ", global_rank(), ": barrier",
             current_operation().empty() ? "" : " in " + current_operation()));
  }

  // Algorithm::native: OpenMPI's own collectives, started nonblocking and polled like every
  // other wait, so a dead peer still ends in an error instead of a hang.
  bool run_native(const NativeCollective& c) override {
    DTRAIN_CHECK(c.count <= INT_MAX, "MPI backend: native collectives take at most ", INT_MAX,
                 " elements, got ", c.count);
    // MPI has no bfloat16 type (its sum would need a user-defined op): bf16 takes the ring.
    DTRAIN_CHECK(c.type != ElementType::bf16,
                 "--algo native: MPI has no bfloat16 type; bf16 collectives run with --algo ring");
    const MPI_Datatype type = c.type == ElementType::f32 ? MPI_FLOAT : MPI_INT64_T;
    const MPI_Op op = c.reduce == ReduceOp::max ? MPI_MAX : MPI_SUM;
    const int count = static_cast<int>(c.count);
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_SUCCESS;
    std::vector<int> counts, displs;
    if (c.op == CollectiveOp::reduce_scatter || c.op == CollectiveOp::all_gather) {
      for (int r = 0; r < size_; ++r) {
        const Chunk ch = chunk_of(c.count, size_, r);
        counts.push_back(static_cast<int>(ch.count));
        displs.push_back(static_cast<int>(ch.offset));
      }
    }
    switch (c.op) {
      case CollectiveOp::all_reduce:
        rc = MPI_Iallreduce(c.input == c.output ? MPI_IN_PLACE : c.input, c.output, count, type, op,
                            comm_, &request);
        break;
      case CollectiveOp::broadcast:
        rc = MPI_Ibcast(c.output, count, type, c.root, comm_, &request);
        break;
      case CollectiveOp::reduce:
        rc = MPI_Ireduce(rank_ == c.root && c.input == c.output ? MPI_IN_PLACE : c.input, c.output,
                         count, type, op, c.root, comm_, &request);
        break;
      case CollectiveOp::reduce_scatter:
        rc = MPI_Ireduce_scatter(c.input, c.output, counts.data(), type, op, comm_, &request);
        break;
      case CollectiveOp::all_gather:
        rc = MPI_Iallgatherv(c.input, counts[rank_], type, c.output, counts.data(), displs.data(),
                             type, comm_, &request);
        break;
      case CollectiveOp::all_to_all:  // count: the elements of one block
        rc = MPI_Ialltoall(c.input, count, type, c.output, count, type, comm_, &request);
        break;
    }
    const std::string what = str("rank ", global_rank(), ": native ", name(c.op),
                                 current_operation().empty() ? "" : " in " + current_operation());
    if (rc != MPI_SUCCESS) throw CommError(str(what, " failed: ", mpi_error_text(rc)));
    poll(request, MPI_STATUS_IGNORE, timeout_s_, what);
    return true;
  }

  std::unique_ptr<Communicator> subgroup(std::span<const int> ranks,
                                         std::string_view name) override {
    std::vector<int> members;
    bool member = false;
    for (size_t i = 0; i < ranks.size(); ++i) {
      DTRAIN_CHECK(ranks[i] >= 0 && ranks[i] < size_, "subgroup '", name, "': rank ", ranks[i],
                   " is outside the parent group of ", size_);
      DTRAIN_CHECK(i == 0 || ranks[i] > ranks[i - 1], "subgroup '", name,
                   "': ranks must be ascending and distinct");
      member = member || ranks[i] == rank_;
      members.push_back(members_[ranks[i]]);
    }
    DTRAIN_CHECK(member, "subgroup '", name, "': rank ", rank_,
                 " creates a group it is not a member of");
    MPI_Group parent_group, group;
    MPI_Comm_group(comm_, &parent_group);
    MPI_Group_incl(parent_group, static_cast<int>(ranks.size()), ranks.data(), &group);
    MPI_Comm child;
    const int rc = MPI_Comm_create_group(comm_, group, name_tag(name), &child);
    MPI_Group_free(&group);
    MPI_Group_free(&parent_group);
    if (rc != MPI_SUCCESS) {
      throw CommError(str("subgroup '", name, "' could not be created: ", mpi_error_text(rc)));
    }
    return std::make_unique<MpiCommunicator>(child, true, std::move(members), timeout_s_);
  }

 protected:
  RequestPtr start_send(const void* data, int64_t bytes, int peer, int tag) override {
    check_message(bytes, tag);
    auto request =
        std::make_unique<MpiRequest>(timeout_s_, describe("send to", peer, tag), bytes, false);
    const int rc =
        MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, request->handle());
    if (rc != MPI_SUCCESS)
      throw CommError(describe("send to", peer, tag) + ": " + mpi_error_text(rc));
    return request;
  }
  RequestPtr start_recv(void* data, int64_t bytes, int peer, int tag) override {
    check_message(bytes, tag);
    auto request =
        std::make_unique<MpiRequest>(timeout_s_, describe("recv from", peer, tag), bytes, true);
    const int rc =
        MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, request->handle());
    if (rc != MPI_SUCCESS)
      throw CommError(describe("recv from", peer, tag) + ": " + mpi_error_text(rc));
    return request;
  }

 private:
  static void check_message(int64_t bytes, int tag) {
    DTRAIN_CHECK(bytes <= INT_MAX, "MPI backend: one message is limited to ", INT_MAX,
                 " bytes, got ", bytes);
    DTRAIN_CHECK(tag >= 0 && tag <= 32767, "MPI backend: tag ", tag, " outside 0..32767");
  }

  MPI_Comm comm_;
  bool owned_;
  std::vector<int> members_;
  double timeout_s_;
  int rank_ = 0, size_ = 0, world_size_ = 0;
  bool shared_checked_ = false;
  std::unique_ptr<MpiSharedMemory> shared_;
};

}  // namespace

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

namespace {

std::unique_ptr<MpiCommunicator>& world_slot() {
  static std::unique_ptr<MpiCommunicator> slot;
  return slot;
}

}  // namespace

Communicator& world(WorldOptions options) {
  auto& slot = world_slot();
  if (slot) return *slot;
  DTRAIN_CHECK(launched_by_mpirun(),
               "--backend mpi: this process was not started by mpirun (run it as "
               "`mpirun -np N dtrain ...`, or use --backend threads)");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  }
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> members(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) members[r] = r;
  slot = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false, members, options.timeout_s);
  std::atexit(finalize);  // every process finalizes when it exits normally
  return *slot;
}

void finalize() {
  auto& slot = world_slot();
  if (!slot) return;
  slot.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void run_ranks(int ranks, const std::function<void(Communicator&)>& fn, WorldOptions options) {
  Communicator& comm = world(options);
  if (ranks != 0 && ranks != comm.size()) {
    const int size = comm.size();
    finalize();
    throw Error(
        str("the layout needs ", ranks, " ranks but mpirun started ", size, " processes (-np)"));
  }
  try {
    fn(comm);
  } catch (const std::exception& e) {
    // Name the culprit, then take the whole job down: the others would wait for this rank.
    std::fprintf(stderr, "error: rank %d failed: %s\n", comm.rank(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  finalize();
}

}  // namespace dtrain::comm::mpi
