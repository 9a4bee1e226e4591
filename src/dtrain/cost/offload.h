// Memory with the model states offloaded to CPU (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity,
// Rajbhandari et al. 2021), in DeepSpeed's estimator convention: what
// estimate_zero2_model_states_mem_needs and estimate_zero3_model_states_mem_needs
// (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py) print, per option, for Psi parameters
// whose largest layer has `largest_layer` of them, on `nodes` x `gpus_per_node` GPUs:
//   ZeRO-2, optimizer on CPU:     GPU 2 Psi (fp16 weights);
//                                 CPU max(4 x GPUs, 16) Psi x buffer
//   ZeRO-2, nothing offloaded:    GPU 4 Psi + 16 Psi / GPUs;  CPU 4 x GPUs per node Psi x buffer
//                                 (the form DeepSpeed's docs give and its code had until it
//                                 changed: deepspeed_zero2_code_estimates has the current one)
//   ZeRO-3, params and optimizer: GPU 4 largest_layer;
//                                 CPU 18 Psi / nodes x buffer (zero_init), else
//                                 max(4 x GPUs per node, 18 / nodes) Psi x buffer
//   ZeRO-3, optimizer only:       GPU 4 largest_layer + 2 Psi / GPUs;
//                                 CPU 16 Psi / nodes x buffer (zero_init), else max(4 x G, 16/n)
//   ZeRO-3, nothing offloaded:    GPU 4 largest_layer + 18 Psi / GPUs;
//                                 CPU 4 x G largest_layer x buffer (zero_init), else 4 x G Psi
// where buffer = additional_buffer_factor (1.5) and "CPU" is one node's. The bytes per parameter
// (18, 16, 4 x GPUs) are the estimators' code, taken as they are: they are not the 16 of
// mixed-precision Adam's model states, and the docs' prose rounds them otherwise. DeepSpeed
// prints GiB as "GB"; the report says which.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/cost/model_presets.h"

namespace dtrain::plan {

// The parameters of the shape's largest module (what DeepSpeed's "largest layer" counts: one
// module's own weights and biases): the word embedding (V h), the MLP's widest linear
// (ffn h, + ffn biases for GPT) or attention's qkv projection, whichever is larger.
int64_t largest_module_params(const ModelShape& m);

struct OffloadEstimate {
  int zero_stage = 2;              // 2 or 3
  bool offload_params = false;     // ZeRO-3's offload_param=cpu
  bool offload_optimizer = false;  // offload_optimizer=cpu
  bool zero_init = true;           // ZeRO-3: zero.Init builds the model partitioned
  double cpu_bytes = 0;            // per node
  double gpu_bytes = 0;            // per GPU
  std::string options;             // DeepSpeed's option line, e.g. "offload_param=cpu, ..."
};

inline constexpr double kDeepSpeedBufferFactor = 1.5;  // additional_buffer_factor's default

// Every row of DeepSpeed's two estimators, in their order: ZeRO-2 with and without the
// optimizer offloaded, then ZeRO-3's six (params+optimizer, optimizer, none; zero_init 1 and 0).
std::vector<OffloadEstimate> deepspeed_offload_estimates(
    int64_t params, int64_t largest_layer, int gpus_per_node, int nodes,
    double buffer_factor = kDeepSpeedBufferFactor);

// DeepSpeed's ZeRO-2 estimator as its current code computes it (deepspeedai/DeepSpeed
// deepspeed/runtime/zero/stage_1_and_2.py, estimate_zero2_model_states_mem_needs, at commit
// 02aa38c3a551), beside the form its docs give (docs/code-docs/source/memory.rst, "Memory
// Requirements"). The no-offload row, as the code has it:
//     # GPU's total_params multipliers: 2 = params_16bit,
//     # 18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit(...)
//     gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
//     cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
// and as the docs write it: `"offload_optimizer": {"device": "none"}`: 4 * params + 16 * params
// / (total number of gpus). The offload row is the same in both (GPU 2 Psi; CPU max(4 x GPUs,
// 16) Psi x buffer). Three rows: offload, no offload (code, int() truncation included), no
// offload (docs). Bytes; DeepSpeed prints them in GiB as "GB".
std::vector<OffloadEstimate> deepspeed_zero2_code_estimates(
    int64_t params, int gpus_per_node, int nodes, double buffer_factor = kDeepSpeedBufferFactor);

// ZeRO-Offload's own convention (Ren et al. 2021, §4, its data-flow graph and §4.2's multi-GPU
// schedule): mixed-precision Adam's 16 bytes per parameter split as the paper places them. Each
// GPU keeps the fp16 weights (2 Psi) for forward and backward and sends each fp16 gradient to
// CPU as it is produced; CPU memory holds the fp16 gradients (2), the fp32 master weights (4)
// and Adam's two moments (4 + 4), 14 Psi in all, split over the N data-parallel ranks (the
// ZeRO-2 partition), so a node holds 14 Psi x G / N. Activations and buffers come on top. GB =
// 10^9 bytes here (the paper's convention). One row: zero_stage 2, offload_optimizer.
OffloadEstimate zero_offload_paper_estimate(int64_t params, int gpus_per_node, int nodes);

}  // namespace dtrain::plan
