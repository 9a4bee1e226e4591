// The mixture-of-experts part of a model's shape: how many experts, how many each token goes
// to, which blocks' MLPs are routed, the capacity factor (0: dropless) and the load-balancing
// loss coefficient. Dense (experts = 0) unless --experts is given.
#pragma once

#include <cstdint>

namespace dtrain::model {

struct MoeConfig {
  int64_t experts = 0;          // E; 0 = a dense model
  int64_t top_k = 1;            // k: experts per token
  int64_t every = 1;            // every n-th block's MLP is routed (blocks n-1, 2n-1, ...)
  double capacity_factor = 0;   // c; 0 = dropless, else each expert takes ceil(c*N*k/E) rows
  double aux_loss_coef = 0.01;  // a: the loss trained is CE + a * sum over MoE blocks of aux
  bool enabled() const { return experts > 0; }
  bool operator==(const MoeConfig&) const = default;
};

// Whether block l's MLP is a mixture of experts.
inline bool is_moe_layer(const MoeConfig& m, int64_t l) {
  return m.enabled() && (l + 1) % m.every == 0;
}
// MoE blocks among blocks [0, l).
inline int64_t moe_layers_before(const MoeConfig& m, int64_t l) {
  return m.enabled() ? l / m.every : 0;
}

// Throws Error naming the flag (--experts, --top-k, --moe-every, --capacity-factor,
// --aux-loss-coef) when a value is out of range for a model of `layers` blocks.
void validate(const MoeConfig& m, int64_t layers);

// The most assignments an expert takes from N tokens: ceil(c * N * k / E), or N * k dropless
// (also the cap: a larger capacity drops nothing).
int64_t moe_capacity(const MoeConfig& m, int64_t N);

}  // namespace dtrain::model
