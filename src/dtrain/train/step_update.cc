// check_not_diverged and adamw_update_on_team.
#include "dtrain/train/step_update.h"

#include <cmath>

#include "dtrain/core/check.h"

namespace dtrain::train {

void check_not_diverged(const StepStats& stats) {
  DTRAIN_CHECK(std::isfinite(stats.loss) && std::isfinite(stats.grad_norm),
               "training diverged: loss ", stats.loss, ", gradient norm ", stats.grad_norm,
               " (try a smaller --lr)");
}

void adamw_update_on_team(model::ThreadTeam* team, optim::AdamW& adamw, std::span<float> params,
                          std::span<const float> grads, float lr, float grad_scale) {
  DTRAIN_CHECK(params.size() == grads.size(), "AdamW: ", params.size(), " parameters but ",
               grads.size(), " gradients");
  adamw.advance();
  model::parallel_ranges(team, static_cast<int64_t>(params.size()), 1024, [&](model::Range r) {
    const auto at = static_cast<size_t>(r.begin), n = static_cast<size_t>(r.end - r.begin);
    adamw.update(params.subspan(at, n), grads.subspan(at, n), r.begin, lr, grad_scale);
  });
}

void adamw_update_mixed_on_team(model::ThreadTeam* team, optim::AdamW& adamw,
                                std::span<float> master, std::span<const bf16> grads,
                                std::span<bf16> params, float lr, float grad_scale) {
  DTRAIN_CHECK(master.size() == grads.size() && master.size() == params.size(),
               "AdamW: ", master.size(), " master weights, ", grads.size(), " gradients, ",
               params.size(), " parameters");
  adamw.advance();
  model::parallel_ranges(team, static_cast<int64_t>(master.size()), 1024, [&](model::Range r) {
    const auto at = static_cast<size_t>(r.begin), n = static_cast<size_t>(r.end - r.begin);
    adamw.update_mixed(master.subspan(at, n), grads.subspan(at, n), params.subspan(at, n), r.begin,
                       lr, grad_scale);
  });
}

}  // namespace dtrain::train
