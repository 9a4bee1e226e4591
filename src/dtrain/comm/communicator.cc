// The parts of Communicator that every backend shares: byte accounting around the backend's
// send/recv, send_recv for ring steps, and the operation names used in error messages.
#include "dtrain/comm/communicator.h"

#include <utility>

namespace dtrain::comm {

void Communicator::init_accounting(int world_size) {
  accounted_world_ = world_size;
  bytes_to_peer_ = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(world_size));
  for (int i = 0; i < world_size; ++i) bytes_to_peer_[i].store(0);
}

RequestPtr Communicator::isend(const void* data, int64_t bytes, int peer, int tag) {
  DTRAIN_CHECK(peer >= 0 && peer < size(), "send to rank ", peer, " outside group of ", size());
  DTRAIN_CHECK(bytes >= 0, "send of negative size ", bytes);
  RequestPtr request = start_send(data, bytes, peer, tag);
  bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
  messages_sent_.fetch_add(1, std::memory_order_relaxed);
  if (bytes_to_peer_) {
    bytes_to_peer_[global_rank_of(peer)].fetch_add(bytes, std::memory_order_relaxed);
  }
  return request;
}

RequestPtr Communicator::irecv(void* data, int64_t bytes, int peer, int tag) {
  DTRAIN_CHECK(peer >= 0 && peer < size(), "recv from rank ", peer, " outside group of ", size());
  DTRAIN_CHECK(bytes >= 0, "recv of negative size ", bytes);
  RequestPtr request = start_recv(data, bytes, peer, tag);
  bytes_received_.fetch_add(bytes, std::memory_order_relaxed);
  return request;
}

void Communicator::send_recv(const void* send_data, int64_t send_bytes, int to, void* recv_data,
                             int64_t recv_bytes, int from, int tag) {
  RequestPtr recv = irecv(recv_data, recv_bytes, from, tag);
  RequestPtr send = isend(send_data, send_bytes, to, tag);
  recv->wait();
  send->wait();
}

void Communicator::add_shared_memory_traffic(int peer, int64_t read, int64_t written) {
  bytes_received_.fetch_add(read, std::memory_order_relaxed);
  bytes_read_.fetch_add(read, std::memory_order_relaxed);
  bytes_sent_.fetch_add(written, std::memory_order_relaxed);
  if (bytes_to_peer_ && read + written > 0) {
    bytes_to_peer_[global_rank_of(peer)].fetch_add(read + written, std::memory_order_relaxed);
  }
}

Traffic Communicator::traffic() const {
  return {steps_.load(std::memory_order_relaxed), bytes_sent_.load(std::memory_order_relaxed),
          bytes_received_.load(std::memory_order_relaxed),
          messages_sent_.load(std::memory_order_relaxed),
          bytes_read_.load(std::memory_order_relaxed)};
}

std::vector<int64_t> Communicator::bytes_sent_per_peer() const {
  std::vector<int64_t> out(static_cast<size_t>(accounted_world_));
  for (int i = 0; i < accounted_world_; ++i) out[i] = bytes_to_peer_[i].load();
  return out;
}

void* Communicator::scratch(int slot, int64_t bytes) {
  DTRAIN_CHECK(slot >= 0 && slot < kScratchSlots, "scratch slot ", slot, " out of range");
  Buffer<std::byte>& b = scratch_[slot];
  if (b.size() < bytes) b = Buffer<std::byte>(bytes, MemoryTag::communication, tracker_);
  return b.data();
}

std::string Communicator::describe(std::string_view what, int peer, int tag) const {
  std::string out =
      str("rank ", global_rank(), ": ", what, " rank ", global_rank_of(peer), " (tag ", tag, ")");
  if (!current_operation_.empty()) out += " in " + current_operation_;
  return out;
}

OperationScope::OperationScope(Communicator& comm, std::string name)
    : comm_(comm), previous_(std::move(comm.current_operation_)), start_(comm.traffic()) {
  comm_.current_operation_ = std::move(name);
}

OperationScope::~OperationScope() {
  comm_.current_operation_ = std::move(previous_);
}

}  // namespace dtrain::comm
