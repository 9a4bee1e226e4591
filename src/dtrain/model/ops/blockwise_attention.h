// Blockwise causal attention with a log-sum-exp merge (Milakov & Gimelshein 2018's online
// softmax, as ring attention and FlashAttention use it): the queries of one block of tokens
// against the keys and values of another, the causal mask given by each token's GLOBAL position
// (key position <= query position), so blocks may hold any tokens of the sequence (context
// parallelism's balanced chunks). Forward merges block after block into an unnormalised output
// with the running max m and sum l per (batch row, head, query); finishing divides by l and keeps
// lse = m + log l, from which the backward recomputes each block's probabilities (no scores are
// kept). Exact: the same softmax as attention.h's, summed in another order.
#pragma once

#include <cstdint>

#include "dtrain/model/gemm.h"

namespace dtrain::model {

// A block of tokens' per-head vectors: head h of token t in batch row b starts at
// data + b * batch_stride + t * row_stride + h * HS. `pos` holds the tokens' global positions.
struct ConstTokenBlock {
  const float* data = nullptr;
  int64_t row_stride = 0, batch_stride = 0;
  const int64_t* pos = nullptr;
  int64_t tokens = 0;
};
struct TokenBlock {
  float* data = nullptr;
  int64_t row_stride = 0, batch_stride = 0;
};

// The shape every call shares: B batch rows, NH query heads of HS; query head h reads K/V head
// h / group of the key and value blocks (grouped-query attention; 1: multi-head).
struct BlockShape {
  int64_t B = 0, NH = 0, HS = 0;
  int64_t group = 1;
};

// Running state of a forward over blocks, (B, NH, Tq) each: m = -inf and l = 0 to start, the
// output block zeroed.
void attention_merge_init(float* m, float* l, TokenBlock out, const BlockShape& s, int64_t Tq);
// out += softmax-weighted v for the (q, k) pairs this block unmasks, rescaling what was merged
// before; returns the number of unmasked (query, key) pairs per head (the causal work).
int64_t attention_merge_block(TokenBlock out, float* m, float* l, ConstTokenBlock q,
                              ConstTokenBlock k, ConstTokenBlock v, const BlockShape& s,
                              const Compute& cx);
// out /= l; lse (B, NH, Tq) = m + log l (m and l may be lse's storage: lse may alias m).
void attention_merge_finish(TokenBlock out, float* lse, const float* m, const float* l,
                            const BlockShape& s, int64_t Tq);

// d (B, NH, Tq) = rowsum over each head of dout * out: the softmax backward's row term.
void attention_row_dot(float* d, ConstTokenBlock dout, ConstTokenBlock out, const BlockShape& s);
// One block's backward, accumulating: dq += of the queries, dk and dv += of the keys and values,
// with the probabilities recomputed from q, k and lse.
void attention_block_backward(TokenBlock dq, TokenBlock dk, TokenBlock dv, ConstTokenBlock dout,
                              ConstTokenBlock q, ConstTokenBlock k, ConstTokenBlock v,
                              const float* lse, const float* d, const BlockShape& s,
                              const Compute& cx);

}  // namespace dtrain::model
