// Where a matrix product's operands live when the engine runs it (cache or memory), from the
// operands' bytes and the machine's cache sizes: the share of the way from the product's cold
// (from memory) measured time to its warm (in cache) one that the clock charges. The rule and
// its assumptions are stated in docs/clock.md, "Cache or memory".
#pragma once

#include "dtrain/machine/measured_rates.h"

namespace dtrain::plan {

// A product's operand bytes (A, B and C together), by when they were last touched:
//   fresh: written or read by the kernel just before (the activation a forward product reads,
//          its output, the gradient flowing back and what it is written into);
//   stale: last touched about one pass ago (weights, the forward's saved activations that the
//          backward reads, the weight gradients accumulated into).
struct ProductOperands {
  double fresh_bytes = 0;
  double stale_bytes = 0;
};

// L3 caches' sharing: the node's ranks spread evenly over its last-level caches (cores /
// l3_shared_by of them); the ranks on the busiest one. At least 1.
int ranks_per_l3(const CacheSizes& c, int cores, int ranks_on_node);

// Bytes of cache one rank keeps its data in: the larger of its threads' private L2s (threads x
// l2_bytes) and its share of the last-level cache (l3_bytes / ranks_sharing_l3). 0 when the
// sizes are unknown.
double rank_cache_bytes(const CacheSizes& c, int threads, int ranks_sharing_l3);

// The share of a product's operand bytes found in cache, with resident(S) = min(1, cache / S):
// the part of a working set of S bytes that a cache of `cache_bytes` keeps.
//   fresh bytes: resident(product bytes);
//   stale bytes: resident(product bytes) x resident(pass_bytes), pass_bytes being what the rank
//   touched since (one pass over its stage).
// (fresh x resident + stale x resident x resident(pass)) / (fresh + stale); 0 without a cache.
double warm_share(const ProductOperands& p, double cache_bytes, double pass_bytes);

}  // namespace dtrain::plan
