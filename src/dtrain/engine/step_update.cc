// check_not_diverged and adamw_update_on_team: one loop over the pieces for every layout.
#include "dtrain/engine/step_update.h"

#include <cmath>

#include "dtrain/core/check.h"

namespace dtrain::train {

void check_not_diverged(const StepStats& stats) {
  DTRAIN_CHECK(std::isfinite(stats.loss) && std::isfinite(stats.grad_norm),
               "training diverged: loss ", stats.loss, ", gradient norm ", stats.grad_norm,
               " (try a smaller --lr)");
}

namespace {

void update_range(optim::AdamW& adamw, const parallel::UpdatePiece& p, size_t at, size_t n,
                  float lr, float grad_scale) {
  adamw.update(p.params.subspan(at, n), p.grads.subspan(at, n), p.moment + static_cast<int64_t>(at),
               lr, grad_scale);
}

void update_range(optim::AdamW& adamw, const parallel::MixedUpdate& p, size_t at, size_t n,
                  float lr, float grad_scale) {
  adamw.update_mixed(p.master.subspan(at, n), p.grads.subspan(at, n), p.params.subspan(at, n),
                     p.moment + static_cast<int64_t>(at), lr, grad_scale);
}

template <typename Piece>
void update_pieces(model::ThreadTeam* team, optim::AdamW& adamw, std::span<const Piece> pieces,
                   float lr, float grad_scale) {
  for (const Piece& p : pieces) {
    DTRAIN_CHECK(p.params.size() == p.grads.size(), "AdamW: ", p.params.size(), " parameters but ",
                 p.grads.size(), " gradients");
  }
  adamw.advance();
  for (const Piece& p : pieces) {
    model::parallel_ranges(team, static_cast<int64_t>(p.grads.size()), 1024, [&](model::Range r) {
      update_range(adamw, p, static_cast<size_t>(r.begin), static_cast<size_t>(r.end - r.begin), lr,
                   grad_scale);
    });
  }
}

}  // namespace

void adamw_update_on_team(model::ThreadTeam* team, optim::AdamW& adamw,
                          std::span<const parallel::UpdatePiece> pieces, float lr,
                          float grad_scale) {
  update_pieces(team, adamw, pieces, lr, grad_scale);
}

void adamw_update_on_team(model::ThreadTeam* team, optim::AdamW& adamw,
                          std::span<const parallel::MixedUpdate> pieces, float lr,
                          float grad_scale) {
  for (const parallel::MixedUpdate& p : pieces) {
    DTRAIN_CHECK(p.master.size() == p.params.size(), "AdamW: ", p.master.size(),
                 " master weights but ", p.params.size(), " parameters");
  }
  update_pieces(team, adamw, pieces, lr, grad_scale);
}

void adamw_update_on_team(model::ThreadTeam* team, optim::AdamW& adamw, std::span<float> params,
                          std::span<float> grads, float lr, float grad_scale) {
  const parallel::UpdatePiece whole{0, 0, params, grads};
  update_pieces(team, adamw, std::span<const parallel::UpdatePiece>(&whole, 1), lr, grad_scale);
}

}  // namespace dtrain::train
