// deepspeed_offload_estimates: DeepSpeed's estimator formulas, row by row (offload.h).
#include "dtrain/cost/offload.h"

#include <algorithm>
#include <cmath>

#include "dtrain/core/check.h"

namespace dtrain::plan {

int64_t largest_module_params(const ModelShape& m) {
  const int64_t h = m.hidden, ffn = m.ffn_or_default();
  const bool gpt = m.family == ModelFamily::gpt;
  const int64_t kv = m.kv_heads_or_heads() * (h / m.heads);
  const int64_t embedding = m.vocab * h;
  const int64_t mlp = ffn * h + (gpt ? ffn : 0);
  const int64_t qkv = h * (h + 2 * kv) + (gpt ? h + 2 * kv : 0);
  return std::max({embedding, mlp, qkv});
}

std::vector<OffloadEstimate> deepspeed_offload_estimates(int64_t params, int64_t largest_layer,
                                                         int gpus_per_node, int nodes,
                                                         double buffer_factor) {
  DTRAIN_CHECK(params > 0, "--params must be positive, got ", params);
  DTRAIN_CHECK(largest_layer > 0 && largest_layer <= params, "--largest-layer must be in [1, ",
               params, "], got ", largest_layer);
  DTRAIN_CHECK(gpus_per_node >= 1 && nodes >= 1, "the cluster needs at least one GPU");
  const double psi = static_cast<double>(params), layer = static_cast<double>(largest_layer);
  const double gpus = static_cast<double>(gpus_per_node) * nodes, g = gpus_per_node;
  const double per_node = 1.0 / nodes;  // DeepSpeed's gpus_factor
  const double layer_bytes = 4 * layer;
  std::vector<OffloadEstimate> rows;
  auto add = [&](int stage, bool p, bool o, bool init, double cpu, double gpu) {
    OffloadEstimate e;
    e.zero_stage = stage;
    e.offload_params = p;
    e.offload_optimizer = o;
    e.zero_init = init;
    e.cpu_bytes = cpu;
    e.gpu_bytes = gpu;
    e.options = stage == 2 ? std::string("offload_optimizer=") + (o ? "cpu" : "none")
                           : std::string("offload_param=") + (p ? "cpu" : "none") +
                                 ", offload_optimizer=" + (o ? "cpu" : "none") +
                                 ", zero_init=" + (init ? "1" : "0");
    rows.push_back(e);
  };
  add(2, false, true, true, psi * std::max(4 * gpus, 16.0) * buffer_factor, 2 * psi);
  add(2, false, false, true, psi * 4 * g * buffer_factor, 4 * psi + 16 * psi / gpus);
  for (bool init : {true, false}) {
    add(3, true, true, init,
        psi * (init ? 18 * per_node : std::max(4 * g, 18 * per_node)) * buffer_factor, layer_bytes);
  }
  for (bool init : {true, false}) {
    add(3, false, true, init,
        psi * (init ? 16 * per_node : std::max(4 * g, 16 * per_node)) * buffer_factor,
        layer_bytes + 2 * psi / gpus);
  }
  for (bool init : {true, false}) {
    add(3, false, false, init, (init ? layer : psi) * 4 * g * buffer_factor,
        layer_bytes + 18 * psi / gpus);
  }
  return rows;
}

std::vector<OffloadEstimate> deepspeed_zero2_code_estimates(int64_t params, int gpus_per_node,
                                                            int nodes, double buffer_factor) {
  DTRAIN_CHECK(params > 0, "--params must be positive, got ", params);
  DTRAIN_CHECK(gpus_per_node >= 1 && nodes >= 1, "the cluster needs at least one GPU");
  const double psi = static_cast<double>(params);
  const int64_t total_gpus = static_cast<int64_t>(gpus_per_node) * nodes;
  const double gpus = static_cast<double>(total_gpus);
  const double cpu_no_offload = psi * 4 * gpus_per_node * buffer_factor;
  auto row = [](bool offload, double cpu, double gpu, const char* options) {
    OffloadEstimate e;
    e.zero_stage = 2;
    e.offload_optimizer = offload;
    e.cpu_bytes = cpu;
    e.gpu_bytes = gpu;
    e.options = options;
    return e;
  };
  // int(18 * total_params / total_gpus): Python's true division, then truncation toward zero;
  // params up to 2^53 / 18 are exact in a double, far beyond any model.
  const double code_gpu = 2 * psi + std::trunc(18 * psi / gpus);
  return {row(true, psi * std::max(4 * gpus, 16.0) * buffer_factor, 2 * psi,
              "offload_optimizer=cpu (code and docs agree: 2 Psi)"),
          row(false, cpu_no_offload, code_gpu,
              "offload_optimizer=none, code: 2 Psi + int(18 Psi / GPUs)"),
          row(false, cpu_no_offload, 4 * psi + 16 * psi / gpus,
              "offload_optimizer=none, docs: 4 Psi + 16 Psi / GPUs")};
}

OffloadEstimate zero_offload_paper_estimate(int64_t params, int gpus_per_node, int nodes) {
  DTRAIN_CHECK(params > 0, "--params must be positive, got ", params);
  DTRAIN_CHECK(gpus_per_node >= 1 && nodes >= 1, "the cluster needs at least one GPU");
  const double psi = static_cast<double>(params);
  const double gpus = static_cast<double>(gpus_per_node) * nodes;
  OffloadEstimate r;
  r.zero_stage = 2;
  r.offload_optimizer = true;
  r.zero_init = false;
  r.gpu_bytes = 2 * psi;                                       // fp16 weights
  r.cpu_bytes = (2 + 4 + 4 + 4) * psi / gpus * gpus_per_node;  // fp16 grads, fp32 master, m, v
  r.options =
      "ZeRO-Offload: fp16 weights on GPU; fp16 gradients, fp32 weights and Adam moments on CPU";
  return r;
}

}  // namespace dtrain::plan
