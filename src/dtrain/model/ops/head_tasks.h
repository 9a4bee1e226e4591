// for_each_head: the (batch row, head) tasks of an attention op shared out across a compute
// team, each member counting its GEMMs apart; used by the dense attention and the blockwise one.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "dtrain/model/gemm.h"
#include "dtrain/model/thread_team.h"

namespace dtrain::model {

// Runs body(b, h, member, member_cx) for every (b, h), the pairs split across cx's team. Each
// member counts its GEMMs apart; the totals are added to cx's, with the slowest member's GEMM
// time as the wall time.
// A pair is worth about T*T*HS multiply-adds per GEMM; split only with 2^18 of them per member.
template <typename Body>
inline void for_each_head(const Compute& cx, int64_t B, int64_t NH, int64_t pair_work,
                          Body&& body) {
  const int64_t pairs = B * NH;
  ThreadTeam* team = pairs >= 2 ? cx.team_for(pairs * pair_work, int64_t{1} << 18) : nullptr;
  if (team == nullptr) {
    for (int64_t p = 0; p < pairs; ++p)
      body(p / NH, p % NH, 0, Compute{nullptr, cx.gemm_stats, cx.precision});
    return;
  }
  std::array<GemmStats, kMaxTeamSize> local{};
  team->run([&](int member) {
    const Range r = split_range(pairs, member, team->size());
    GemmStats* stats = cx.gemm_stats != nullptr ? &local[static_cast<size_t>(member)] : nullptr;
    for (int64_t p = r.begin; p < r.end; ++p)
      body(p / NH, p % NH, member, Compute{nullptr, stats, cx.precision});
  });
  if (cx.gemm_stats != nullptr) {
    double slowest_us = 0;
    for (int m = 0; m < team->size(); ++m) {
      cx.gemm_stats->calls += local[static_cast<size_t>(m)].calls;
      cx.gemm_stats->flops += local[static_cast<size_t>(m)].flops;
      slowest_us = std::max(slowest_us, local[static_cast<size_t>(m)].time_us);
    }
    cx.gemm_stats->time_us += slowest_us;
  }
}

}  // namespace dtrain::model
