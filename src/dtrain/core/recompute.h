// Activation recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models"): what a transformer block keeps for its backward. One enum, here below
// both users: the model drops and recomputes (model/), the planner prices it (plan/).
#pragma once

#include <string_view>

namespace dtrain {

// none: every tensor the backward reads is kept. selective: the attention core's B*NH*T*T
// softmax output is dropped and recomputed from the kept Q and K. full: only each block's
// input is kept and the block's forward reruns before its backward.
enum class Recompute { none, selective, full };

// "none", "selective", "full": the spelling of --recompute and of the reports.
constexpr std::string_view name(Recompute r) {
  switch (r) {
    case Recompute::none:
      return "none";
    case Recompute::selective:
      return "selective";
    case Recompute::full:
      return "full";
  }
  return "?";
}

}  // namespace dtrain
