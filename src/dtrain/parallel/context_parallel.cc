// The three CP attention algorithms over the CP group's communicator, each built from the same
// blockwise pieces (model/ops/blockwise_attention.h): a rank's queries merged against key blocks
// that carry their owners' global positions, so the causal mask needs no block order.
#include "dtrain/parallel/context_parallel.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "dtrain/comm/all_to_all.h"
#include "dtrain/comm/collectives.h"
#include "dtrain/comm/rank_order.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/model/ops/blockwise_attention.h"

namespace dtrain::parallel {
namespace {

using model::BlockShape;
using model::ConstTokenBlock;
using model::TokenBlock;
using Dims = ContextParallelGroup::Dims;

constexpr int kTagRing = 0x4350;       // "CP": the ring's hops (the group's own communicator)
constexpr int kTagRingGrads = 0x4351;  // the backward hops' dK/dV, behind their K/V

int64_t bytes_of(int64_t floats) {
  return floats * static_cast<int64_t>(sizeof(float));
}

// n floats into `wire` at e bytes each (2: rounded to bf16, to nearest even), and back.
void to_wire(uint8_t* wire, const float* src, int64_t n, int64_t e) {
  if (e == 2) {
    std::vector<bf16> rounded(static_cast<size_t>(n));
    to_bf16(src, rounded.data(), n);
    std::memcpy(wire, rounded.data(), static_cast<size_t>(n) * sizeof(bf16));
  } else {
    std::memcpy(wire, src, static_cast<size_t>(n) * sizeof(float));
  }
}
void from_wire(float* dst, const uint8_t* wire, int64_t n, int64_t e) {
  if (e == 2) {
    std::vector<bf16> rounded(static_cast<size_t>(n));
    std::memcpy(rounded.data(), wire, static_cast<size_t>(n) * sizeof(bf16));
    to_float(rounded.data(), dst, n);
  } else {
    std::memcpy(dst, wire, static_cast<size_t>(n) * sizeof(float));
  }
}

// [K|V] (B, T, 2 KV) packed from qkv (B, T, C + 2 KV): one message per ring hop, one gather's
// input. Grouped-query attention's K/V heads only: KV < C.
void pack_kv(float* kv, const float* qkv, const Dims& d) {
  for (int64_t r = 0; r < d.B * d.T; ++r) {
    std::memcpy(kv + r * 2 * d.KV, qkv + r * d.W() + d.C,
                static_cast<size_t>(2 * d.KV) * sizeof(float));
  }
}

// dqkv's K and V columns += dkv (B, T, 2 KV).
void add_dkv(float* dqkv, const float* dkv, const Dims& d) {
  for (int64_t r = 0; r < d.B * d.T; ++r) {
    float* dst = dqkv + r * d.W() + d.C;
    const float* src = dkv + r * 2 * d.KV;
    for (int64_t i = 0; i < 2 * d.KV; ++i) dst[i] += src[i];
  }
}

// The local shape: NKV_local 0 means as many K/V heads as query heads.
Dims dims_of(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV) {
  return {B, T, C, NH, (NKV > 0 ? NKV : NH) * (C / NH)};
}

}  // namespace

ContextParallelGroup::ContextParallelGroup(comm::Communicator& comm, plan::CpAlgorithm algorithm,
                                           MemoryTracker* tracker, model::CpTokenSplit split,
                                           CpWire wire)
    : comm_(comm),
      algorithm_(algorithm),
      tracker_(tracker),
      split_(algorithm == plan::CpAlgorithm::ulysses ? model::CpTokenSplit::contiguous : split),
      wire_(wire) {
  DTRAIN_CHECK(algorithm != plan::CpAlgorithm::automatic,
               "ContextParallelGroup: resolve --cp-algo auto before building the group");
}

// K and V (and Ulysses's Q and O) go on the wire at plan::cp_wire_bytes's element size for the
// run's precision: bf16 when the model computes in bf16, whose products round them to bf16
// anyway (blockwise_attention.cc's sgemm calls with cx.precision), so the bf16 wire changes no
// bit. Gradients stay fp32 (cost/context_parallel.h says why).
int64_t ContextParallelGroup::activation_wire_bytes(const model::Compute& cx) const {
  if (wire_ == CpWire::fp32) return static_cast<int64_t>(sizeof(float));
  return plan::cp_wire_bytes(cx.precision == model::Precision::bf16 ? plan::Precision::bf16
                                                                    : plan::Precision::fp32)
      .activations;
}

model::CpTokenSplit ContextParallelGroup::split() const {
  return split_;
}

void ContextParallelGroup::count_message(const char* what, double start_us, int64_t sent_before) {
  ++current_->calls;
  if (spans_ == nullptr) return;
  const char* pass = current_ == &counters_.forward    ? "forward"
                     : current_ == &counters_.backward ? "backward"
                                                       : "recompute";
  spans_->push_back({what, pass, start_us, now_us(), bytes_sent() - sent_before});
}

std::vector<int64_t> ContextParallelGroup::positions(int owner, int64_t T) const {
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    pos[static_cast<size_t>(t)] = model::cp_global_position(t, T * size(), size(), owner, split());
  }
  return pos;
}

void ContextParallelGroup::attention_forward(float* out, const float* qkv, const void* key,
                                             int64_t B, int64_t T_local, int64_t C_local,
                                             int64_t NH_local, const model::Compute& cx,
                                             int64_t NKV_local) {
  const Dims d = dims_of(B, T_local, C_local, NH_local, NKV_local);
  // A null key keeps nothing: the state lives for this call only. Otherwise a key's earlier
  // state (an evaluation's, or a rerun's predecessor) is freed before the new one is allocated.
  Saved transient;
  Saved& s = key == nullptr ? transient : saved_[key];
  s = Saved{};
  current_ = recomputing_ ? &counters_.recompute : &counters_.forward;
  const comm::Traffic before = comm_.traffic();
  switch (algorithm_) {
    case plan::CpAlgorithm::ring:
      ring_forward(s, out, qkv, d, cx);
      break;
    case plan::CpAlgorithm::all_gather:
      all_gather_forward(s, out, qkv, d, cx);
      break;
    case plan::CpAlgorithm::ulysses:
    case plan::CpAlgorithm::automatic:
      ulysses_forward(s, out, qkv, d, cx);
      break;
  }
  current_->traffic += comm_.traffic() - before;
}

void ContextParallelGroup::attention_backward(float* dqkv, const float* dout, const float* qkv,
                                              const float* out, const void* key, int64_t B,
                                              int64_t T_local, int64_t C_local, int64_t NH_local,
                                              const model::Compute& cx, int64_t NKV_local) {
  const auto it = saved_.find(key);
  DTRAIN_CHECK(it != saved_.end(), "context parallel attention: a backward without its forward");
  const Dims d = dims_of(B, T_local, C_local, NH_local, NKV_local);
  current_ = &counters_.backward;
  const comm::Traffic before = comm_.traffic();
  switch (algorithm_) {
    case plan::CpAlgorithm::ring:
      ring_backward(it->second, dqkv, dout, qkv, out, d, cx);
      break;
    case plan::CpAlgorithm::all_gather:
      all_gather_backward(it->second, dqkv, dout, qkv, out, d, cx);
      break;
    case plan::CpAlgorithm::ulysses:
    case plan::CpAlgorithm::automatic:
      ulysses_backward(it->second, dqkv, dout, d, cx);
      break;
  }
  current_->traffic += comm_.traffic() - before;
  saved_.erase(it);
}

int64_t ContextParallelGroup::kept_bytes_per_block(int64_t B, int64_t T_local, int64_t C_local,
                                                   int64_t NH_local, Recompute recompute,
                                                   int64_t NKV_local) const {
  if (recompute == Recompute::full) return 0;  // the rerun keeps it, one block at a time
  const Dims d = dims_of(B, T_local, C_local, NH_local, NKV_local);
  const int64_t lse = B * NH_local * T_local;  // every algorithm: one per query row and head
  switch (algorithm_) {
    case plan::CpAlgorithm::ring:
      return bytes_of(lse);
    case plan::CpAlgorithm::all_gather:
      return bytes_of(lse + size() * B * T_local * 2 * d.KV);  // + the gathered [K|V]
    case plan::CpAlgorithm::ulysses:
    case plan::CpAlgorithm::automatic:
      return bytes_of(lse + B * T_local * (2 * d.C + 2 * d.KV));  // + Q, K, V, O by heads
  }
  return 0;
}

void ContextParallelGroup::release_all() {
  saved_.clear();
}

std::vector<double> ContextParallelGroup::gather_routing(std::span<const double> values) {
  const double start = span_start();
  const comm::Traffic t0 = comm_.traffic();
  std::vector<double> all = comm::gather_in_rank_order(comm_, values);
  ++counters_.routing.calls;
  counters_.routing.traffic += comm_.traffic() - t0;
  if (spans_ != nullptr) {
    spans_->push_back(
        {"all_gather MoE routing", "forward", start, now_us(), (comm_.traffic() - t0).bytes_sent});
  }
  return all;
}

// --- ring -----------------------------------------------------------------------------------
// Forward: hop i (1..N-1) passes on the block received at hop i-1 while this rank merges it; the
// rank's queries see its own block first, then rank r-i's.
void ContextParallelGroup::ring_forward(Saved& s, float* out, const float* qkv, const Dims& d,
                                        const model::Compute& cx) {
  const int N = size(), r = rank();
  const int64_t block = d.B * d.T * 2 * d.KV;  // floats of one [K|V]
  const BlockShape shape{d.B, d.NH, d.C / d.NH, d.group()};
  std::vector<float> cur(static_cast<size_t>(block)), next(static_cast<size_t>(block));
  const int64_t e = activation_wire_bytes(cx), wire_bytes = block * e;
  std::vector<uint8_t> send_wire(static_cast<size_t>(wire_bytes)),
      recv_wire(static_cast<size_t>(wire_bytes));
  pack_kv(cur.data(), qkv, d);
  const std::vector<int64_t> mine = positions(r, d.T);
  const ConstTokenBlock q{qkv, d.W(), d.T * d.W(), mine.data(), d.T};
  const TokenBlock o{out, d.C, d.T * d.C};
  s.lse = Buffer<float>(d.B * d.NH * d.T, MemoryTag::activations, tracker_);
  std::vector<float> l(static_cast<size_t>(d.B * d.NH * d.T));
  float* m = s.lse.data();
  model::attention_merge_init(m, l.data(), o, shape, d.T);
  for (int i = 0; i < N; ++i) {
    const std::vector<int64_t> pos = positions((r - i + N) % N, d.T);
    comm::RequestPtr send, recv;
    const double hop_start = span_start();
    const int64_t sent_before = bytes_sent();
    if (i + 1 < N) {
      to_wire(send_wire.data(), cur.data(), block, e);
      send = comm_.isend(send_wire.data(), wire_bytes, (r + 1) % N, kTagRing);
      recv = comm_.irecv(recv_wire.data(), wire_bytes, (r - 1 + N) % N, kTagRing);
    }
    const ConstTokenBlock k{cur.data(), 2 * d.KV, d.T * 2 * d.KV, pos.data(), d.T};
    const ConstTokenBlock v{cur.data() + d.KV, 2 * d.KV, d.T * 2 * d.KV, pos.data(), d.T};
    const double start = now_us();
    const int64_t pairs = model::attention_merge_block(o, m, l.data(), q, k, v, shape, cx);
    if (current_ == &counters_.forward) {
      counters_.attention_pairs += pairs * d.B * d.NH;
      counters_.attention_us += now_us() - start;
    }
    if (i + 1 < N) {
      send->wait();
      recv->wait();
      comm_.add_steps(1);
      count_message("ring hop K/V", hop_start, sent_before);
      from_wire(next.data(), recv_wire.data(), block, e);
      std::swap(cur, next);
    }
  }
  model::attention_merge_finish(o, m, m, l.data(), shape, d.T);
}

// Backward: the rank's own block first, then the blocks arriving from r-1 with the dK, dV every
// rank before has added; the last block's finished [dK|dV] goes home (to r+1, its owner) in one
// more hop, while this rank's own arrives from r-1. A hop's K/V leave as the block's backward
// starts (they do not change in it) and travel while it runs; its dK/dV follow once the block
// has added to them. One hop is one message pair to the counters, as before: the same bytes.
void ContextParallelGroup::ring_backward(const Saved& s, float* dqkv, const float* dout,
                                         const float* qkv, const float* out, const Dims& d,
                                         const model::Compute& cx) {
  const int N = size(), r = rank();
  const int64_t block = d.B * d.T * 2 * d.KV;
  const BlockShape shape{d.B, d.NH, d.C / d.NH, d.group()};
  std::vector<float> cur(static_cast<size_t>(2 * block), 0.0f),
      next(static_cast<size_t>(2 * block));
  // A hop: [K|V] at the wire's element size, then [dK|dV] in fp32.
  const int64_t e = activation_wire_bytes(cx), kv_bytes = block * e;
  std::vector<uint8_t> send_wire(static_cast<size_t>(kv_bytes)),
      recv_wire(static_cast<size_t>(kv_bytes));
  pack_kv(cur.data(), qkv, d);
  const std::vector<int64_t> mine = positions(r, d.T);
  const ConstTokenBlock q{qkv, d.W(), d.T * d.W(), mine.data(), d.T};
  const ConstTokenBlock go{dout, d.C, d.T * d.C, mine.data(), d.T};
  const ConstTokenBlock o{out, d.C, d.T * d.C, mine.data(), d.T};
  std::vector<float> rowdot(static_cast<size_t>(d.B * d.NH * d.T));
  model::attention_row_dot(rowdot.data(), go, o, shape);
  const TokenBlock dq{dqkv, d.W(), d.T * d.W()};
  for (int i = 0; i < N; ++i) {
    comm::RequestPtr kv_send, kv_recv;
    double hop_start = 0;
    int64_t sent_before = 0;
    if (i + 1 < N) {
      hop_start = span_start();
      sent_before = bytes_sent();
      to_wire(send_wire.data(), cur.data(), block, e);
      kv_send = comm_.isend(send_wire.data(), kv_bytes, (r + 1) % N, kTagRing);
      kv_recv = comm_.irecv(recv_wire.data(), kv_bytes, (r - 1 + N) % N, kTagRing);
    }
    const std::vector<int64_t> pos = positions((r - i + N) % N, d.T);
    const ConstTokenBlock k{cur.data(), 2 * d.KV, d.T * 2 * d.KV, pos.data(), d.T};
    const ConstTokenBlock v{cur.data() + d.KV, 2 * d.KV, d.T * 2 * d.KV, pos.data(), d.T};
    const TokenBlock dk{cur.data() + block, 2 * d.KV, d.T * 2 * d.KV};
    const TokenBlock dv{cur.data() + block + d.KV, 2 * d.KV, d.T * 2 * d.KV};
    model::attention_block_backward(dq, dk, dv, go, q, k, v, s.lse.data(), rowdot.data(), shape,
                                    cx);
    if (i + 1 < N) {
      comm_.send_recv(cur.data() + block, bytes_of(block), (r + 1) % N, next.data() + block,
                      bytes_of(block), (r - 1 + N) % N, kTagRingGrads);
      kv_send->wait();
      kv_recv->wait();
      comm_.add_steps(1);
      count_message("ring hop K/V/dK/dV", hop_start, sent_before);
      from_wire(next.data(), recv_wire.data(), block, e);
      std::swap(cur, next);
    }
  }
  const double home_start = span_start();
  const int64_t home_before = bytes_sent();
  comm_.send_recv(cur.data() + block, bytes_of(block), (r + 1) % N, next.data(), bytes_of(block),
                  (r - 1 + N) % N, kTagRing);
  comm_.add_steps(1);
  count_message("ring hop dK/dV home", home_start, home_before);
  add_dkv(dqkv, next.data(), d);
}

// --- all-gather -----------------------------------------------------------------------------
void ContextParallelGroup::all_gather_forward(Saved& s, float* out, const float* qkv, const Dims& d,
                                              const model::Compute& cx) {
  const int N = size(), r = rank();
  const int64_t block = d.B * d.T * 2 * d.KV;
  const BlockShape shape{d.B, d.NH, d.C / d.NH, d.group()};
  std::vector<float> kv(static_cast<size_t>(block));
  pack_kv(kv.data(), qkv, d);
  s.gathered = Buffer<float>(N * block, MemoryTag::activations, tracker_);
  const double gather_start = span_start();
  const int64_t gather_before = bytes_sent();
  if (activation_wire_bytes(cx) == 2) {
    std::vector<bf16> mine_h(static_cast<size_t>(block)),
        gathered_h(static_cast<size_t>(N * block));
    to_bf16(kv.data(), mine_h.data(), block);
    comm::all_gather<bf16>(comm_, mine_h.data(), gathered_h.data(), N * block,
                           comm::Algorithm::ring);
    to_float(gathered_h.data(), s.gathered.data(), N * block);
  } else {
    comm::all_gather<float>(comm_, kv.data(), s.gathered.data(), N * block, comm::Algorithm::ring);
  }
  count_message("all_gather K/V", gather_start, gather_before);
  const std::vector<int64_t> mine = positions(r, d.T);
  const ConstTokenBlock q{qkv, d.W(), d.T * d.W(), mine.data(), d.T};
  const TokenBlock o{out, d.C, d.T * d.C};
  s.lse = Buffer<float>(d.B * d.NH * d.T, MemoryTag::activations, tracker_);
  std::vector<float> l(static_cast<size_t>(d.B * d.NH * d.T));
  model::attention_merge_init(s.lse.data(), l.data(), o, shape, d.T);
  for (int j = 0; j < N; ++j) {
    const std::vector<int64_t> pos = positions(j, d.T);
    const float* base = s.gathered.data() + j * block;
    const ConstTokenBlock k{base, 2 * d.KV, d.T * 2 * d.KV, pos.data(), d.T};
    const ConstTokenBlock v{base + d.KV, 2 * d.KV, d.T * 2 * d.KV, pos.data(), d.T};
    const double start = now_us();
    const int64_t pairs =
        model::attention_merge_block(o, s.lse.data(), l.data(), q, k, v, shape, cx);
    if (current_ == &counters_.forward) {
      counters_.attention_pairs += pairs * d.B * d.NH;
      counters_.attention_us += now_us() - start;
    }
  }
  model::attention_merge_finish(o, s.lse.data(), s.lse.data(), l.data(), shape, d.T);
}

void ContextParallelGroup::all_gather_backward(const Saved& s, float* dqkv, const float* dout,
                                               const float* qkv, const float* out, const Dims& d,
                                               const model::Compute& cx) {
  const int N = size(), r = rank();
  const int64_t block = d.B * d.T * 2 * d.KV;
  const BlockShape shape{d.B, d.NH, d.C / d.NH, d.group()};
  const std::vector<int64_t> mine = positions(r, d.T);
  const ConstTokenBlock q{qkv, d.W(), d.T * d.W(), mine.data(), d.T};
  const ConstTokenBlock go{dout, d.C, d.T * d.C, mine.data(), d.T};
  const ConstTokenBlock o{out, d.C, d.T * d.C, mine.data(), d.T};
  std::vector<float> rowdot(static_cast<size_t>(d.B * d.NH * d.T));
  model::attention_row_dot(rowdot.data(), go, o, shape);
  const TokenBlock dq{dqkv, d.W(), d.T * d.W()};
  std::vector<float> dkv_all(static_cast<size_t>(N * block), 0.0f), dkv(static_cast<size_t>(block));
  for (int j = 0; j < N; ++j) {
    const std::vector<int64_t> pos = positions(j, d.T);
    const float* base = s.gathered.data() + j * block;
    float* dbase = dkv_all.data() + j * block;
    const ConstTokenBlock k{base, 2 * d.KV, d.T * 2 * d.KV, pos.data(), d.T};
    const ConstTokenBlock v{base + d.KV, 2 * d.KV, d.T * 2 * d.KV, pos.data(), d.T};
    const TokenBlock dk{dbase, 2 * d.KV, d.T * 2 * d.KV};
    const TokenBlock dv{dbase + d.KV, 2 * d.KV, d.T * 2 * d.KV};
    model::attention_block_backward(dq, dk, dv, go, q, k, v, s.lse.data(), rowdot.data(), shape,
                                    cx);
  }
  const double scatter_start = span_start();
  const int64_t scatter_before = bytes_sent();
  comm::reduce_scatter<float>(comm_, dkv_all.data(), dkv.data(), N * block, comm::ReduceOp::sum,
                              comm::Algorithm::ring);
  count_message("reduce_scatter dK/dV", scatter_start, scatter_before);
  add_dkv(dqkv, dkv.data(), d);
}

// --- ulysses --------------------------------------------------------------------------------
namespace {

constexpr const char* kQkvToHeads[3] = {"all_to_all Q", "all_to_all K", "all_to_all V"};
constexpr const char* kGradsToTokens[3] = {"all_to_all dQ", "all_to_all dK", "all_to_all dV"};

// Sequence split -> head split: rank j gets this rank's T tokens of head group j (the `width`
// columns starting at column + j * width / N of src's rows), packed as (B, T, width / N) blocks
// in rank order.
void pack_head_groups(float* send, const float* src, int64_t src_stride, int64_t column,
                      int64_t width, int N, const Dims& d) {
  const int64_t Ch = width / N;
  for (int j = 0; j < N; ++j) {
    for (int64_t r = 0; r < d.B * d.T; ++r) {
      std::memcpy(send + (j * d.B * d.T + r) * Ch, src + r * src_stride + column + j * Ch,
                  static_cast<size_t>(Ch) * sizeof(float));
    }
  }
}

// Head split -> sequence split: block j (this rank's tokens, head group j) added or copied into
// columns [column + j * width / N, ...) of dst's rows.
void unpack_head_groups(float* dst, int64_t dst_stride, int64_t column, int64_t width,
                        const float* recv, int N, const Dims& d, bool add) {
  const int64_t Ch = width / N;
  for (int j = 0; j < N; ++j) {
    for (int64_t r = 0; r < d.B * d.T; ++r) {
      float* o = dst + r * dst_stride + column + j * Ch;
      const float* in = recv + (j * d.B * d.T + r) * Ch;
      for (int64_t c = 0; c < Ch; ++c) o[c] = add ? o[c] + in[c] : in[c];
    }
  }
}

// Ulysses' head-split tensors of this rank: Q and O (C / N columns each, (B, T) per source rank),
// K and V (KV / N); their offsets in one buffer, Q, K, V, O.
struct HeadSplit {
  int64_t q = 0, kv = 0;            // floats of one tensor on this rank (all N sources)
  int64_t q_part = 0, kv_part = 0;  // of one source rank's block
  int64_t k_at = 0, v_at = 0, o_at = 0, total = 0;
};
HeadSplit head_split(const Dims& d, int N) {
  HeadSplit h;
  h.q = d.B * d.T * d.C;
  h.kv = d.B * d.T * d.KV;
  h.q_part = h.q / N;
  h.kv_part = h.kv / N;
  h.k_at = h.q;
  h.v_at = h.k_at + h.kv;
  h.o_at = h.v_at + h.kv;
  h.total = h.o_at + h.q;
  return h;
}

}  // namespace

void ContextParallelGroup::exchange_activations(const float* send, float* recv, int64_t part,
                                                const model::Compute& cx) {
  if (activation_wire_bytes(cx) != 2) {
    comm::all_to_all<float>(comm_, send, recv, part, comm::Algorithm::pairwise);
    return;
  }
  const int64_t n = part * size();
  std::vector<bf16> send_h(static_cast<size_t>(n)), recv_h(static_cast<size_t>(n));
  to_bf16(send, send_h.data(), n);
  comm::all_to_all<bf16>(comm_, send_h.data(), recv_h.data(), part, comm::Algorithm::pairwise);
  to_float(recv_h.data(), recv, n);
}

void ContextParallelGroup::ulysses_forward(Saved& s, float* out, const float* qkv, const Dims& d,
                                           const model::Compute& cx) {
  const int N = size();
  const HeadSplit h = head_split(d, N);
  // This rank's NH / N query heads read their NKV / N K/V heads (cp divides both: checked).
  const BlockShape shape{d.B, d.NH / N, d.C / d.NH, d.group()};
  s.heads = Buffer<float>(h.total, MemoryTag::activations, tracker_);
  float* heads = s.heads.data();
  std::vector<float> send(static_cast<size_t>(h.q));
  const int64_t columns[3] = {0, d.C, d.C + d.KV}, widths[3] = {d.C, d.KV, d.KV};
  const int64_t at[3] = {0, h.k_at, h.v_at}, parts[3] = {h.q_part, h.kv_part, h.kv_part};
  for (int x = 0; x < 3; ++x) {  // Q, K, V
    pack_head_groups(send.data(), qkv, d.W(), columns[x], widths[x], N, d);
    const double start = span_start();
    const int64_t before = bytes_sent();
    exchange_activations(send.data(), heads + at[x], parts[x], cx);
    count_message(kQkvToHeads[x], start, before);
  }
  std::vector<std::vector<int64_t>> pos;
  for (int j = 0; j < N; ++j) pos.push_back(positions(j, d.T));
  auto block = [&](const float* base, int j, int64_t part) {
    const int64_t width = part / (d.B * d.T);
    return ConstTokenBlock{base + j * part, width, d.T * width, pos[static_cast<size_t>(j)].data(),
                           d.T};
  };
  const int64_t stats = d.B * shape.NH * d.T;  // per query block
  s.lse = Buffer<float>(N * stats, MemoryTag::activations, tracker_);
  std::vector<float> l(static_cast<size_t>(stats));
  float* oh = heads + h.o_at;
  const int64_t Ch = d.C / N;
  for (int jq = 0; jq < N; ++jq) {
    const TokenBlock o{oh + jq * h.q_part, Ch, d.T * Ch};
    float* m = s.lse.data() + jq * stats;
    model::attention_merge_init(m, l.data(), o, shape, d.T);
    for (int jk = 0; jk < N; ++jk) {
      const double start = now_us();
      const int64_t pairs = model::attention_merge_block(
          o, m, l.data(), block(heads, jq, h.q_part), block(heads + h.k_at, jk, h.kv_part),
          block(heads + h.v_at, jk, h.kv_part), shape, cx);
      if (current_ == &counters_.forward) {
        counters_.attention_pairs += pairs * d.B * shape.NH;
        counters_.attention_us += now_us() - start;
      }
    }
    model::attention_merge_finish(o, m, m, l.data(), shape, d.T);
  }
  const double out_start = span_start();
  const int64_t out_before = bytes_sent();
  exchange_activations(oh, send.data(), h.q_part, cx);
  count_message("all_to_all O", out_start, out_before);
  unpack_head_groups(out, d.C, 0, d.C, send.data(), N, d, false);
}

void ContextParallelGroup::ulysses_backward(const Saved& s, float* dqkv, const float* dout,
                                            const Dims& d, const model::Compute& cx) {
  const int N = size();
  const HeadSplit h = head_split(d, N);
  const BlockShape shape{d.B, d.NH / N, d.C / d.NH, d.group()};
  const float* heads = s.heads.data();
  const float* oh = heads + h.o_at;
  std::vector<float> send(static_cast<size_t>(h.q)), doh(static_cast<size_t>(h.q));
  pack_head_groups(send.data(), dout, d.C, 0, d.C, N, d);
  const double dout_start = span_start();
  const int64_t dout_before = bytes_sent();
  comm::all_to_all<float>(comm_, send.data(), doh.data(), h.q_part, comm::Algorithm::pairwise);
  count_message("all_to_all dO", dout_start, dout_before);
  std::vector<std::vector<int64_t>> pos;
  for (int j = 0; j < N; ++j) pos.push_back(positions(j, d.T));
  auto block = [&](const float* base, int j, int64_t part) {
    const int64_t width = part / (d.B * d.T);
    return ConstTokenBlock{base + j * part, width, d.T * width, pos[static_cast<size_t>(j)].data(),
                           d.T};
  };
  auto out_block = [&](float* base, int j, int64_t part) {
    const int64_t width = part / (d.B * d.T);
    return TokenBlock{base + j * part, width, d.T * width};
  };
  const int64_t stats = d.B * shape.NH * d.T;
  std::vector<float> rowdot(static_cast<size_t>(N * stats));
  // dQ, dK, dV in the head split, laid out as Q, K, V are.
  std::vector<float> grads(static_cast<size_t>(h.o_at), 0.0f);
  float* dh = grads.data();
  for (int jq = 0; jq < N; ++jq) {
    float* dj = rowdot.data() + jq * stats;
    model::attention_row_dot(dj, block(doh.data(), jq, h.q_part), block(oh, jq, h.q_part), shape);
    for (int jk = 0; jk < N; ++jk) {
      model::attention_block_backward(
          out_block(dh, jq, h.q_part), out_block(dh + h.k_at, jk, h.kv_part),
          out_block(dh + h.v_at, jk, h.kv_part), block(doh.data(), jq, h.q_part),
          block(heads, jq, h.q_part), block(heads + h.k_at, jk, h.kv_part),
          block(heads + h.v_at, jk, h.kv_part), s.lse.data() + jq * stats, dj, shape, cx);
    }
  }
  const int64_t columns[3] = {0, d.C, d.C + d.KV}, widths[3] = {d.C, d.KV, d.KV};
  const int64_t at[3] = {0, h.k_at, h.v_at}, parts[3] = {h.q_part, h.kv_part, h.kv_part};
  for (int x = 0; x < 3; ++x) {  // dQ, dK, dV back to the sequence split
    const double start = span_start();
    const int64_t before = bytes_sent();
    comm::all_to_all<float>(comm_, dh + at[x], send.data(), parts[x], comm::Algorithm::pairwise);
    count_message(kGradsToTokens[x], start, before);
    unpack_head_groups(dqkv, d.W(), columns[x], widths[x], send.data(), N, d, true);
  }
}

}  // namespace dtrain::parallel
