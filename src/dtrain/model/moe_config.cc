// Validation and capacity of MoeConfig.
#include "dtrain/model/moe_config.h"

#include <cmath>

#include "dtrain/core/check.h"

namespace dtrain::model {

void validate(const MoeConfig& m, int64_t layers) {
  DTRAIN_CHECK(m.experts >= 0, "--experts must be 0 (dense) or positive (got ", m.experts, ")");
  if (!m.enabled()) return;
  DTRAIN_CHECK(m.top_k >= 1 && m.top_k <= m.experts, "--top-k must be in [1, --experts ", m.experts,
               "] (got ", m.top_k, ")");
  DTRAIN_CHECK(m.every >= 1 && m.every <= layers, "--moe-every must be in [1, --layers ", layers,
               "] (got ", m.every, ")");
  DTRAIN_CHECK(m.capacity_factor >= 0 && std::isfinite(m.capacity_factor),
               "--capacity-factor must be 0 (dropless) or positive (got ", m.capacity_factor, ")");
  DTRAIN_CHECK(m.aux_loss_coef >= 0 && std::isfinite(m.aux_loss_coef),
               "--aux-loss-coef must be non-negative (got ", m.aux_loss_coef, ")");
}

int64_t moe_capacity(const MoeConfig& m, int64_t N) {
  // N k assignments in all: a capacity past them drops nothing, so it saturates there (and a
  // factor like 1e17 never overflows the integer).
  const int64_t all = N * m.top_k;
  if (m.capacity_factor <= 0) return all;
  const double exact =
      m.capacity_factor * static_cast<double>(all) / static_cast<double>(m.experts);
  if (!(exact < static_cast<double>(all))) return all;
  return static_cast<int64_t>(std::ceil(exact));
}

}  // namespace dtrain::model
