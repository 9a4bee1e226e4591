// The model's one door for context parallelism (CP), beside tp_hooks.h's for TP: with size() N > 1
// every tensor of the model holds this CP rank's T/N tokens of each sequence, the token-local ops
// (embeddings, LayerNorms, linears, MLP, head, loss) run on them unchanged, the position embedding
// is read at each token's GLOBAL position, and the attention core runs across the group through
// attention_forward / attention_backward (parallel/context_parallel.h implements them over a
// communicator: ring, all-gather or Ulysses). The base class is the serial implementation (N = 1),
// which the model never calls for attention, so a serial model is CP = 1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dtrain/core/recompute.h"
#include "dtrain/model/gemm.h"

namespace dtrain::model {

// Which tokens a CP rank holds. balanced: the sequence cut into 2N chunks of T/(2N), rank r
// holding chunks r and 2N-1-r (every rank the same causal work); contiguous: tokens
// [rT/N, (r+1)T/N).
enum class CpTokenSplit { balanced, contiguous };

// Global position of the CP rank's local token t (0 <= t < T/N) of a T-token sequence.
inline int64_t cp_global_position(int64_t t, int64_t T, int cp, int rank, CpTokenSplit split) {
  const int64_t local = T / cp;
  if (split == CpTokenSplit::contiguous) return rank * local + t;
  const int64_t chunk = T / (2 * cp);
  return t < chunk ? rank * chunk + t : (2 * cp - 1 - rank) * chunk + (t - chunk);
}

class ContextParallelHooks {
 public:
  virtual ~ContextParallelHooks() = default;
  virtual int size() const { return 1; }  // N, the CP group's size
  virtual int rank() const { return 0; }  // cp_rank
  virtual CpTokenSplit split() const { return CpTokenSplit::balanced; }
  int64_t position(int64_t t, int64_t T_local) const {
    return cp_global_position(t, T_local * size(), size(), rank(), split());
  }

  // Attention across the group on this rank's T_local tokens: qkv (B, T_local, C_local + 2 KV)
  // as the model's ([q | k | v]; KV = NKV_local heads of C_local / NH_local, NKV_local 0 meaning
  // NH_local: grouped-query attention sends only the K/V heads), out (B, T_local, C_local). `key`
  // names the (block, micro-batch) whose backward will follow: what the algorithm keeps for it
  // (log-sum-exp, gathered K/V, head-split tensors) is held under that key until attention_backward
  // takes it; a null key keeps nothing (a forward no backward reads: full recompute's first pass,
  // which the rerun repeats). dqkv accumulates.
  virtual void attention_forward(float* /*out*/, const float* /*qkv*/, const void* /*key*/,
                                 int64_t /*B*/, int64_t /*T_local*/, int64_t /*C_local*/,
                                 int64_t /*NH_local*/, const Compute& /*cx*/,
                                 int64_t /*NKV_local*/ = 0) {}
  virtual void attention_backward(float* /*dqkv*/, const float* /*dout*/, const float* /*qkv*/,
                                  const float* /*out*/, const void* /*key*/, int64_t /*B*/,
                                  int64_t /*T_local*/, int64_t /*C_local*/, int64_t /*NH_local*/,
                                  const Compute& /*cx*/, int64_t /*NKV_local*/ = 0) {}
  // Full recompute's rerun of a block forward is on between set_recomputing(true) and (false),
  // so an implementation can count its communication apart.
  virtual void set_recomputing(bool /*on*/) {}
  // Bytes attention_forward keeps (charged to the activations tag) per block and micro-batch for
  // the backward under `recompute`, at this local shape: the engine's per-micro-batch figure adds
  // them to the blocks' own tensors (plan::cp_activation_bytes_per_layer is tested against both).
  virtual int64_t kept_bytes_per_block(int64_t /*B*/, int64_t /*T_local*/, int64_t /*C_local*/,
                                       int64_t /*NH_local*/, Recompute /*recompute*/,
                                       int64_t /*NKV_local*/ = 0) const {
    return 0;
  }
  // Drops whatever forwards have kept (an evaluation's, which no backward takes).
  virtual void release_all() {}
  // The MoE router's one exchange per routed block and forward (model/cp_route_group.h): every
  // rank's `values` (n each), rank r's at [r n, (r + 1) n), bit for bit. Serial: a copy.
  virtual std::vector<double> gather_routing(std::span<const double> values) {
    return {values.begin(), values.end()};
  }
};

}  // namespace dtrain::model
