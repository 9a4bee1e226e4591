// ExpertParallelGroup: the EP group's all-to-alls and their counters; the EP and expert-DP
// groups' members.
#include "dtrain/parallel/expert_parallel.h"

#include <algorithm>

#include "dtrain/comm/all_to_all.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"

namespace dtrain::parallel {

std::vector<int> ep_group_members(int dp, int ep, int dp_rank) {
  DTRAIN_CHECK(ep >= 1 && dp % ep == 0, "--ep ", ep, " does not divide --dp ", dp);
  std::vector<int> out;
  for (int i = 0; i < ep; ++i) out.push_back(dp_rank / ep * ep + i);
  return out;
}

std::vector<int> expert_dp_group_members(int dp, int ep, int dp_rank) {
  DTRAIN_CHECK(ep >= 1 && dp % ep == 0, "--ep ", ep, " does not divide --dp ", dp);
  std::vector<int> out;
  for (int r = dp_rank % ep; r < dp; r += ep) out.push_back(r);
  return out;
}

std::vector<BucketPiece> split_at_experts(comm::Chunk bucket,
                                          std::span<const comm::Chunk> expert_ranges) {
  // Expert elements of the whole buffer before flat element f.
  auto experts_before = [&](int64_t f) {
    int64_t n = 0;
    for (const comm::Chunk& e : expert_ranges) n += std::clamp<int64_t>(f - e.offset, 0, e.count);
    return n;
  };
  auto piece = [&](int64_t offset, int64_t count, bool expert) {
    const int64_t before = experts_before(offset);
    return BucketPiece{offset, count, expert, expert ? before : offset - before};
  };
  std::vector<BucketPiece> pieces;
  int64_t at = bucket.offset;
  const int64_t end = bucket.offset + bucket.count;
  for (const comm::Chunk& e : expert_ranges) {
    const int64_t lo = std::max(at, e.offset), hi = std::min(end, e.offset + e.count);
    if (lo >= hi) continue;
    if (lo > at) pieces.push_back(piece(at, lo - at, false));
    pieces.push_back(piece(lo, hi - lo, true));
    at = hi;
  }
  if (at < end) pieces.push_back(piece(at, end - at, false));
  return pieces;
}

comm::Traffic EpCounters::total() const {
  comm::Traffic t;
  for (SiteCounter EpCounters::*site : kSites) t += (this->*site).traffic;
  return t;
}

SiteCounter& ExpertParallelGroup::counter_of(Site site) {
  switch (site) {
    case Site::counts:
      return counters_.counts;
    case Site::dispatch_forward:
      return counters_.dispatch_forward;
    case Site::combine_forward:
      return counters_.combine_forward;
    case Site::combine_backward:
      return counters_.combine_backward;
    case Site::dispatch_backward:
      return counters_.dispatch_backward;
  }
  return counters_.counts;
}

namespace {

const char* label_of(model::ExpertParallelHooks::Site site) {
  using Site = model::ExpertParallelHooks::Site;
  switch (site) {
    case Site::counts:
      return "all_to_all EP row counts";
    case Site::dispatch_forward:
      return "all_to_all_v EP dispatch";
    case Site::combine_forward:
      return "all_to_all_v EP combine";
    case Site::combine_backward:
      return "all_to_all_v EP combine (backward)";
    case Site::dispatch_backward:
      return "all_to_all_v EP dispatch (backward)";
  }
  return "all_to_all EP";
}

}  // namespace

void ExpertParallelGroup::exchange_counts(int64_t* recv, const int64_t* send, int64_t per_rank) {
  const double start = spans_ != nullptr ? now_us() : 0;
  SiteCounter& counter = counter_of(Site::counts);
  counter.traffic +=
      comm::all_to_all<int64_t>(comm_, send, recv, per_rank, comm::Algorithm::pairwise);
  ++counter.calls;
  if (spans_ != nullptr) spans_->push_back({label_of(Site::counts), "", start, now_us()});
}

void ExpertParallelGroup::exchange_rows(float* recv, std::span<const int64_t> recv_rows,
                                        const float* send, std::span<const int64_t> send_rows,
                                        int64_t row_elems, Site site) {
  const int n = comm_.size();
  std::vector<comm::Chunk> send_parts(static_cast<size_t>(n)), recv_parts(static_cast<size_t>(n));
  int64_t s = 0, r = 0;
  for (int q = 0; q < n; ++q) {
    const int64_t sc = send_rows[static_cast<size_t>(q)] * row_elems;
    const int64_t rc = recv_rows[static_cast<size_t>(q)] * row_elems;
    send_parts[static_cast<size_t>(q)] = {s, sc};
    recv_parts[static_cast<size_t>(q)] = {r, rc};
    s += sc;
    r += rc;
  }
  const double start = spans_ != nullptr ? now_us() : 0;
  if (bf16_dispatch_ && site == Site::dispatch_forward) {
    std::vector<bf16> send16(static_cast<size_t>(s)), recv16(static_cast<size_t>(r));
    to_bf16(send, send16.data(), s);
    counter_of(site).traffic += comm::all_to_all_v<bf16>(
        comm_, send16.data(), send_parts, recv16.data(), recv_parts, comm::Algorithm::pairwise);
    to_float(recv16.data(), recv, r);
  } else {
    counter_of(site).traffic += comm::all_to_all_v<float>(comm_, send, send_parts, recv, recv_parts,
                                                          comm::Algorithm::pairwise);
  }
  ++counter_of(site).calls;
  if (spans_ != nullptr) spans_->push_back({label_of(site), "", start, now_us()});
}

}  // namespace dtrain::parallel
