// Vocabulary-parallel token embedding and cross-entropy (Megatron, Shoeybi et al. 2019, §3):
// each TP rank holds V_local rows of wte from vocab_begin (the last rank's may run past V into
// padding), so the full logits are never gathered: the softmax max and sum-exp and the target
// logit are reduced across the TP group through the hooks. Padded columns are left out of every
// max and sum and get probability and gradient 0.
#pragma once

#include <cstdint>

#include "dtrain/model/gemm.h"
#include "dtrain/model/tp_hooks.h"

namespace dtrain::model {

// out[b, t] = wte_local[tokens[b, t] - vocab_begin] for this rank's tokens, 0 for the others
// (the caller all-reduces the sum, then adds wpe).
void vocab_embedding_forward(float* out,              // (B, T, C)
                             const int32_t* tokens,   // (B, T)
                             const float* wte_local,  // (V_local, C)
                             int64_t vocab_begin, int64_t V_local, int64_t BT, int64_t C);

// Accumulates: dwte_local[tokens - vocab_begin] += dout for this rank's tokens; dwpe[t] += dout
// (skipped when dwpe is null: a model with rotary positions).
void vocab_embedding_backward(float* dwte_local,      // (V_local, C)
                              float* dwpe,            // (context, C)
                              const float* dout,      // (B, T, C)
                              const int32_t* tokens,  // (B, T)
                              int64_t vocab_begin, int64_t V_local, int64_t B, int64_t T,
                              int64_t C);

// In place: logits_local becomes this rank's columns of softmax(logits) (padded columns 0);
// losses[r] = log(sum exp) - (logit[target] - max), the same on every rank. Three reductions
// over the group: max (BT), then sum-exp and target logit together (2*BT). Returns the mean.
float vocab_parallel_crossentropy_forward(float* logits_local,     // (BT, V_local)
                                          float* losses,           // (BT)
                                          const int32_t* targets,  // (BT), each in [0, V)
                                          int64_t BT, int64_t vocab_begin, int64_t V_local,
                                          int64_t V, TensorParallelHooks& tp,
                                          const Compute& cx = {});

// probs_local becomes d(dloss * mean loss)/dlogits_local (overwrites, as the serial in-place op).
void vocab_parallel_crossentropy_backward(float* probs_local,      // (BT, V_local)
                                          const int32_t* targets,  // (BT)
                                          float dloss, int64_t BT, int64_t vocab_begin,
                                          int64_t V_local);

}  // namespace dtrain::model
