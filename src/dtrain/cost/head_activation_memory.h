// Activation memory outside the transformer blocks, for one micro-batch: what the model keeps
// for the head (final LayerNorm, logits, losses, token ids) and the backward workspace it
// shares between blocks. Together with L * activation_bytes_per_layer this is every byte the
// engine charges to the activations tag; the model tests compare the tracker with both.
//
// Head (b = micro-batch, s = sequence, h = hidden, v = vocabulary, e = bytes per element):
//   last block output = final LN input    s*b*h elements
//   final LN output                       s*b*h
//   final LN mean and 1/std               2*s*b floats (4 bytes)
//   logits (then probabilities, then their gradient, in place)   s*b*v
//   per-position losses                   s*b floats
//   token ids and targets                 2*s*b int32 (4 bytes)
// The embedding output is not here: it is block 0's LayerNorm-1 input, counted in that block.
//
// Workspace (shared by all blocks and micro-batches of one rank):
//   residual-stream gradient              s*b*h elements
//   two (s, b, h) activation gradients    2*s*b*h   (LN output; attention output)
//   qkv gradient                          3*s*b*h/t (a TP rank's Q, K, V columns)
//   MLP gradients, GELU input and output  2*f*s*b   (f = 4h)
//   attention-score gradients             n*s*s     (one (batch row, head) at a time on each
//                                                    of the rank's n compute threads; none with
//                                                    blockwise attention under CP, whose
//                                                    backward works on block pairs in temporaries)
//
// Pipeline-stage boundaries (the engine's count; per micro-batch in flight, all v chunks of one
// rank of a P-stage pipeline; none when P = 1, where the head holds the ids):
//   each chunk's output but the last virtual stage's   s*b*h elements per chunk (the tensor it
//                                                       sends on, kept until its backward)
//   token ids, on the first stage                      s*b int32
#pragma once

#include <cstdint>

namespace dtrain::plan {

struct HeadActivationShape {
  int64_t seq = 0;          // s
  int64_t micro_batch = 0;  // b
  int64_t hidden = 0;       // h
  int64_t vocab = 0;        // v
  int64_t ffn_hidden = 0;   // f; 0 means 4*h
  int64_t bytes_per_element = 4;
  int64_t threads = 1;  // n: compute threads of the rank (workspace only)
  // t: TP ranks, for the qkv gradient (workspace only; vocab and ffn_hidden above are given
  // per rank already). Appended, so existing initialisers keep their meaning.
  int64_t tp = 1;
  bool blockwise_attention = false;  // CP: no attention-score gradients (workspace only)
  // Llama (appended): the final RMSNorm keeps 1/rms alone (1 statistic, not 2); the qkv gradient
  // holds heads + 2 kv_heads heads of h / heads (0: kv_heads = heads); the SwiGLU's gradients are
  // [gate | up] and the down input's, 3*f*s*b in place of 2*f*s*b.
  bool rms_norm = false;
  int64_t heads = 0, kv_heads = 0;
  bool gated_mlp = false;
};

// Bytes of the head's activations (see the list above).
double head_activation_bytes(const HeadActivationShape& shape);

// Bytes of the backward workspace (see the list above).
double workspace_activation_bytes(const HeadActivationShape& shape);

// Bytes of pipeline stage `stage`'s boundary tensors for one micro-batch (see the list above).
double stage_boundary_activation_bytes(const HeadActivationShape& shape, int stages, int chunks,
                                       int stage);

}  // namespace dtrain::plan
