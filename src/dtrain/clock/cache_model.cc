// The cache rule of the engine clock's products (cache_model.h): operand bytes against the
// rank's share of the caches.
#include "dtrain/clock/cache_model.h"

#include <algorithm>
#include <cmath>

namespace dtrain::plan {

namespace {

// The part of a working set of `bytes` that a cache of `cache_bytes` keeps.
double resident(double bytes, double cache_bytes) {
  if (cache_bytes <= 0) return 0;
  if (bytes <= cache_bytes) return 1;
  return cache_bytes / bytes;
}

}  // namespace

int ranks_per_l3(const CacheSizes& c, int cores, int ranks_on_node) {
  const int ranks = std::max(1, ranks_on_node);
  const int caches = std::max(1, cores / std::max(1, c.l3_shared_by));
  return std::max(1, (ranks + caches - 1) / caches);
}

double rank_cache_bytes(const CacheSizes& c, int threads, int ranks_sharing_l3) {
  const double l2 = c.l2_bytes * std::max(1, threads);
  const double l3 = c.l3_bytes / std::max(1, ranks_sharing_l3);
  return std::max(l2, l3);
}

double warm_share(const ProductOperands& p, double cache_bytes, double pass_bytes) {
  const double total = p.fresh_bytes + p.stale_bytes;
  if (total <= 0 || cache_bytes <= 0) return 0;
  const double own = resident(total, cache_bytes);
  const double since = resident(pass_bytes, cache_bytes);
  return (p.fresh_bytes * own + p.stale_bytes * own * since) / total;
}

}  // namespace dtrain::plan
