// Context parallelism over a communicator: the model's ContextParallelHooks (model/cp_hooks.h)
// for a CP group of N ranks, each holding T/N tokens of every sequence, with attention computed
// across the group by one of cost/context_parallel.h's three algorithms, exactly (blockwise
// softmax merged with the running max and log-sum-exp, model/ops/blockwise_attention.h):
//   ring        [K|V] blocks passed to rank r+1 N-1 times in forward; in backward [K|V|dK|dV]
//               N-1 times and a last [dK|dV] hop home. Balanced split (chunks r and 2N-1-r).
// Under bf16 K and V (and Ulysses's Q, O) travel as bf16, the gradients as fp32
// (plan::cp_wire_bytes; cost/context_parallel.h says why).
//   all-gather  one all-gather of [K|V] per layer (kept for the backward), one reduce-scatter of
//               the whole sequence's [dK|dV] in backward. Balanced split.
//   ulysses     all-to-alls from the sequence split to a head split (Q, K, V), local attention on
//               the whole sequence for NH_local/N heads, the output back (4 per layer forward; dO,
//               dQ, dK, dV in backward). Contiguous split.
// Counters (bytes, steps, messages per pass; attention work) are what the tests set beside
// cost/context_parallel.h's formulas.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/core/buffer.h"
#include "dtrain/core/timer.h"
#include "dtrain/cost/context_parallel.h"
#include "dtrain/model/cp_hooks.h"
#include "dtrain/parallel/site_counter.h"

namespace dtrain::parallel {

struct ContextParallelCounters {
  SiteCounter forward;
  SiteCounter backward;
  SiteCounter recompute;  // full recompute's forward reruns (plan/ counts them in the backward)
  // The MoE router's gathers (one per routed block and forward, rerun included):
  // plan::cp_moe_routing_bytes. Apart from the attention's passes above.
  SiteCounter routing;
  // Score elements computed in forward: (query, key) pairs with key <= query, summed over the
  // batch rows and this rank's heads (plan::causal_attention_pairs per (row, head)).
  int64_t attention_pairs = 0;
  // Microseconds of forward attention compute (the blocks' merges, no communication): the
  // per-rank work the split balances, measured.
  double attention_us = 0;

  static constexpr SiteCounter ContextParallelCounters::*kSites[] = {
      &ContextParallelCounters::forward, &ContextParallelCounters::backward,
      &ContextParallelCounters::recompute, &ContextParallelCounters::routing};
  ContextParallelCounters& operator+=(const ContextParallelCounters& o) {
    for (SiteCounter ContextParallelCounters::*site : kSites) this->*site += o.*site;
    attention_pairs += o.attention_pairs;
    attention_us += o.attention_us;
    return *this;
  }
  ContextParallelCounters operator-(const ContextParallelCounters& o) const {  // since `o`
    ContextParallelCounters d;
    for (SiteCounter ContextParallelCounters::*site : kSites) d.*site = this->*site - o.*site;
    d.attention_pairs = attention_pairs - o.attention_pairs;
    d.attention_us = attention_us - o.attention_us;
    return d;
  }
};

// The element size K and V (and Ulysses's Q, O) travel at: the model's precision's
// (plan::cp_wire_bytes: bf16 under bf16), or fp32 whatever the precision (for the test that sets
// the bf16 wire beside it, bit for bit).
enum class CpWire { by_precision, fp32 };

class ContextParallelGroup final : public model::ContextParallelHooks {
 public:
  // `algorithm`: ring, all_gather or ulysses (automatic is resolved by the caller). `tracker` is
  // charged for what each layer keeps from its forward for its backward. `split`: which tokens
  // each rank holds (ulysses: contiguous, whatever is asked; ring and all-gather: balanced
  // unless contiguous is asked for, to measure the imbalance it removes).
  ContextParallelGroup(comm::Communicator& comm, plan::CpAlgorithm algorithm,
                       MemoryTracker* tracker,
                       model::CpTokenSplit split = model::CpTokenSplit::balanced,
                       CpWire wire = CpWire::by_precision);

  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  model::CpTokenSplit split() const override;
  plan::CpAlgorithm algorithm() const { return algorithm_; }

  void attention_forward(float* out, const float* qkv, const void* key, int64_t B, int64_t T_local,
                         int64_t C_local, int64_t NH_local, const model::Compute& cx,
                         int64_t NKV_local = 0) override;
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                          const void* key, int64_t B, int64_t T_local, int64_t C_local,
                          int64_t NH_local, const model::Compute& cx,
                          int64_t NKV_local = 0) override;
  void set_recomputing(bool on) override { recomputing_ = on; }
  // Saved's buffers below for one block: lse, and all-gather's gathered or ulysses' heads.
  int64_t kept_bytes_per_block(int64_t B, int64_t T_local, int64_t C_local, int64_t NH_local,
                               Recompute recompute, int64_t NKV_local = 0) const override;
  void release_all() override;
  std::vector<double> gather_routing(std::span<const double> values) override;

  const ContextParallelCounters& counters() const { return counters_; }
  // While set, every exchange (one per counted message) is appended there; null stops it.
  void record_spans(std::vector<SiteSpan>* spans) { spans_ = spans; }
  comm::Communicator& communicator() { return comm_; }
  // The algorithm gather_routing's all-gather of `bytes` (its output size) runs: the group's
  // automatic choice, for the report's formula.
  comm::Algorithm routing_algorithm(long long bytes) const {
    return comm::resolve_algorithm(comm_, comm::Algorithm::automatic, bytes);
  }

  // One layer's local shape, as the algorithms see it.
  struct Dims {
    int64_t B = 0, T = 0, C = 0, NH = 0;      // T, C, NH: this rank's tokens, channels, heads
    int64_t KV = 0;                           // K's (and V's) columns: NKV_local heads of C / NH
    int64_t W() const { return C + 2 * KV; }  // a qkv row: [q | k | v]
    int64_t group() const { return C / KV; }  // query heads per K/V head
  };

 private:
  // What one (block, micro-batch)'s forward keeps for its backward.
  struct Saved {
    Buffer<float> lse;       // (B, NH, T) ring / all-gather; (N, B, NH/N, T) ulysses
    Buffer<float> gathered;  // all-gather: (N, B, T, 2C) every rank's [K|V]
    Buffer<float> heads;     // ulysses: qh, kh, vh, oh, each (N, B, T, C/N)
  };
  std::vector<int64_t> positions(int owner, int64_t T) const;

  void ring_forward(Saved& s, float* out, const float* qkv, const Dims& d,
                    const model::Compute& cx);
  void ring_backward(const Saved& s, float* dqkv, const float* dout, const float* qkv,
                     const float* out, const Dims& d, const model::Compute& cx);
  void all_gather_forward(Saved& s, float* out, const float* qkv, const Dims& d,
                          const model::Compute& cx);
  void all_gather_backward(const Saved& s, float* dqkv, const float* dout, const float* qkv,
                           const float* out, const Dims& d, const model::Compute& cx);
  void ulysses_forward(Saved& s, float* out, const float* qkv, const Dims& d,
                       const model::Compute& cx);
  void ulysses_backward(const Saved& s, float* dqkv, const float* dout, const Dims& d,
                        const model::Compute& cx);
  // Ulysses's all-to-all of Q, K, V or O (`part` floats per rank), in bf16 when the model
  // computes in bf16.
  void exchange_activations(const float* send, float* recv, int64_t part, const model::Compute& cx);

  comm::Communicator& comm_;
  plan::CpAlgorithm algorithm_;
  MemoryTracker* tracker_;
  model::CpTokenSplit split_;
  CpWire wire_;
  bool recomputing_ = false;
  std::map<const void*, Saved> saved_;
  ContextParallelCounters counters_;
  SiteCounter* current_ = nullptr;  // the pass being counted
  std::vector<SiteSpan>* spans_ = nullptr;

  // Counts one message of the current pass and, when recording, its span from `start_us` with
  // the bytes sent since `sent_before`.
  void count_message(const char* what, double start_us, int64_t sent_before);
  // Bytes per element of K and V on the wire for a pass computed with `cx`.
  int64_t activation_wire_bytes(const model::Compute& cx) const;
  double span_start() const { return spans_ != nullptr ? now_us() : 0; }
  int64_t bytes_sent() const { return comm_.traffic().bytes_sent; }
};

}  // namespace dtrain::parallel
