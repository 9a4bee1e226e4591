// CpRouteGroup: a CP rank's runs are its split's chunks (every rank of the group has the same,
// so rank q's starts are computed here from cp_global_position without an exchange).
#include "dtrain/model/cp_route_group.h"

#include "dtrain/core/check.h"

namespace dtrain::model {

CpRouteGroup::CpRouteGroup(ContextParallelHooks& cp, int64_t B, int64_t T_local)
    : cp_(cp), B_(B), T_local_(T_local) {
  // The split's chunks, whether or not two of them meet (rank N-1's chunks N-1 and N do), so
  // every rank has the same runs and its part of the gather the same length.
  run_first_.push_back(0);
  if (cp.split() == CpTokenSplit::balanced && cp.size() > 1) run_first_.push_back(T_local / 2);
  run_index_.resize(static_cast<size_t>(T_local));
  for (int64_t t = 0; t < T_local; ++t) {
    run_index_[static_cast<size_t>(t)] = run_first_.size() > 1 && t >= run_first_[1] ? 1 : 0;
  }
}

int64_t CpRouteGroup::run_of(int64_t n) const {
  DTRAIN_CHECK(n >= 0 && n < B_ * T_local_, "CpRouteGroup: token ", n, " outside ", B_ * T_local_);
  const int64_t per_row = static_cast<int64_t>(run_first_.size());
  return (n / T_local_) * per_row + run_index_[static_cast<size_t>(n % T_local_)];
}

int64_t CpRouteGroup::run_start(int q, int64_t j) const {
  const int64_t per_row = static_cast<int64_t>(run_first_.size());
  const int64_t b = j / per_row, t = run_first_[static_cast<size_t>(j % per_row)];
  const int64_t T = T_local_ * cp_.size();
  return b * T + cp_global_position(t, T, cp_.size(), q, cp_.split());
}

}  // namespace dtrain::model
