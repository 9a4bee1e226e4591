// Activation memory of one transformer layer, by component, after Korthikanti et al. 2022
// ("Reducing Activation Recomputation in Large Transformer Models", §4, Table 2). The engine
// keeps exactly these tensors for backward, so its measured activation bytes per layer are
// tested against this function, and the planner uses the same function at cluster scale.
//
// Components per layer (s = sequence, b = micro-batch, h = hidden, a = heads, t = TP size;
// "elements" are bytes_per_element each, masks 1 byte each):
//   LayerNorm 1 input         s*b*h           (split by t under sequence parallelism)
//   QKV input (LN1 output)    s*b*h           (split by t under SP)
//   Q and K                   2*s*b*h / t
//   softmax output            a*s*s*b / t
//   softmax dropout mask      a*s*s*b / t bytes   (dropout only)
//   dropout output            a*s*s*b / t         (dropout only; else the softmax output is used)
//   V                         s*b*h / t
//   projection input          s*b*h / t
//   attention dropout mask    s*b*h bytes         (dropout only; split by t under SP)
//   LayerNorm 2 input         s*b*h           (split by t under SP)
//   MLP input (LN2 output)    s*b*h           (split by t under SP)
//   GELU input                ffn*s*b / t     (ffn = 4h for GPT)
//   second linear input       ffn*s*b / t
//   MLP dropout mask          s*b*h bytes         (dropout only; split by t under SP)
//   LayerNorm statistics      4*s*b floats (mean and 1/std of both LNs; Korthikanti omits
//                             them, the engine keeps them: count_layernorm_stats)
// With 2-byte elements, dropout, ffn = 4h and t = 1 this is s*b*h*(34 + 5*a*s/h) bytes, the
// paper's Eq. 1; with t and no SP, s*b*h*(10 + 24/t + 5*a*s/(h*t)) (Eq. 2); with SP,
// s*b*h/t*(34 + 5*a*s/h) (Eq. 4). Selective recompute drops the a*s*s terms (Eq. 6); full
// recompute keeps only the layer input, 2*s*b*h (s*b*h/t with SP).
// The engine's variant (bytes_per_element 4, dropout false, count_layernorm_stats true) is what
// model::GptActivations allocates in each mode: none all of the above; selective all but the
// softmax output; full the LayerNorm 1 input alone (its statistics are recomputed too). What a
// mode drops is re-created one layer at a time into a scratch the rank holds once:
// recompute_scratch_bytes.
//
// Llama-style layers (extension): with kv_heads < heads, K and V are each
// s*b*h*kv_heads/(heads*t); with gated_mlp the MLP keeps the gate and up projections' outputs
// and the down projection's input, 3*ffn*s*b/t, in place of GELU's 2*ffn*s*b/t.
#pragma once

#include <cstdint>
#include <string_view>

#include "dtrain/core/recompute.h"

namespace dtrain::plan {

// The one enum (core/recompute.h), under the planner's names as well.
using dtrain::name;
using dtrain::Recompute;

struct ActivationShape {
  int64_t seq = 0;          // s
  int64_t micro_batch = 0;  // b
  int64_t hidden = 0;       // h
  int64_t heads = 0;        // a
  int64_t ffn_hidden = 0;   // 0 means 4*h
  int64_t tp = 1;           // t
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  int64_t bytes_per_element = 2;  // 2 for fp16/bf16 activations, 4 for fp32
  bool dropout = true;            // 1-byte masks and the dropout output
  bool count_layernorm_stats = false;
  // Extensions for Llama-style layers (appended, so existing initialisers keep their meaning):
  int64_t kv_heads = 0;    // grouped-query attention: K and V are kv_heads/heads of Q; 0 = heads
  bool gated_mlp = false;  // SwiGLU: gate output, up output and down input, 3*ffn*s*b/t
  // Bytes per element of the tensors an elementwise backward reads (the LayerNorm inputs, the
  // softmax output, the GELU input; SwiGLU's gate and up outputs) when they differ from those
  // only matrix products read (0: bytes_per_element). The engine's mixed precision keeps the
  // former fp32 and the latter bf16, as autocast saves a bf16 matmul's inputs.
  int64_t elementwise_bytes_per_element = 0;
  // RMSNorm (Llama) keeps 1/rms alone: 2 statistics per token with count_layernorm_stats, not
  // LayerNorm's 4 (mean and 1/std of both norms).
  bool rms_norm = false;
};

// Bytes of activations one layer keeps for its backward pass, for one micro-batch.
double activation_bytes_per_layer(const ActivationShape& shape);

// Bytes of the tensors `shape.recompute` drops from one layer (0 for none): the backward
// re-creates them one layer at a time, so a rank holds them once, in a scratch shared by all its
// layers and micro-batches (the engine's GptWorkspace; the planner's temporary memory).
// activation_bytes_per_layer(shape with none) - activation_bytes_per_layer(shape).
double recompute_scratch_bytes(const ActivationShape& shape);

// Bytes one layer keeps between a split backward's B and W (ZB-H1) for one micro-batch: the
// output gradient of each of its four linears, s*b*(3h/t + h + ffn/t + h) elements (qkv and fc
// are column-parallel, TP-sharded; the two projections' output gradients are whole (s, b, h));
// with grouped-query attention qkv's width is h + 2*h*kv_heads/a, with SwiGLU fc is 2*ffn/t. The
// linears' inputs are activations activation_bytes_per_layer already counts. Dense (no SP, no
// recompute) layers.
double weight_grad_stash_bytes_per_layer(const ActivationShape& shape);

}  // namespace dtrain::plan
