// ExpertParallelGroup: the model's expert-parallel hooks (model/ep_hooks.h) over the EP group's
// communicator. Each exchange is an all_to_all_v (comm/all_to_all.h, pairwise, so a rank's
// counted bytes are what it sends to and receives from its peers) and is counted by site, for
// the engine to set beside plan::ep_exchange_bytes with the routing the run measured.
//
// EP is carved from DP (cost/moe.h): the dp ranks of a stage form dp/ep EP groups of ep
// consecutive DP ranks (ep_rank = dp_rank % ep); the dp/ep ranks with the same ep_rank hold the
// same experts and form the expert-data-parallel group over which their gradients are reduced.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dtrain/comm/chunks.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/model/ep_hooks.h"
#include "dtrain/parallel/site_counter.h"
#include "dtrain/parallel/tensor_parallel.h"

namespace dtrain::parallel {

// The DP ranks (indices into the DP group) of dp_rank's EP group and of its expert-DP group.
std::vector<int> ep_group_members(int dp, int ep, int dp_rank);
std::vector<int> expert_dp_group_members(int dp, int ep, int dp_rank);

// A gradient bucket [offset, offset + count) cut at the edges of the expert tensors' flat ranges
// (ascending): its pieces in flat order, each dense (averaged over DP) or expert (over the
// expert-DP group). DataParallel syncs these pieces; the report's DP formula prices them.
// `packed` is where the piece starts among the flat buffer's dense (or expert) elements taken in
// flat order: the index space ZeRO shards each kind over its own group in (dense over DP,
// experts over the expert-DP group), so a piece is contiguous in both spaces.
struct BucketPiece {
  int64_t offset = 0, count = 0;
  bool expert = false;
  int64_t packed = 0;
};
std::vector<BucketPiece> split_at_experts(comm::Chunk bucket,
                                          std::span<const comm::Chunk> expert_ranges);

// Bytes (and calls) of each exchange site on this rank, summed over the calls.
struct EpCounters {
  SiteCounter counts, dispatch_forward, combine_forward, combine_backward, dispatch_backward;
  // Every site, for the loops below: a new site is one more member and one more entry here.
  static constexpr SiteCounter EpCounters::*kSites[] = {
      &EpCounters::counts, &EpCounters::dispatch_forward, &EpCounters::combine_forward,
      &EpCounters::combine_backward, &EpCounters::dispatch_backward};
  comm::Traffic total() const;
  EpCounters& operator+=(const EpCounters& o) {
    for (SiteCounter EpCounters::*site : kSites) this->*site += o.*site;
    return *this;
  }
  EpCounters operator-(const EpCounters& o) const {  // the share since snapshot `o`
    EpCounters d;
    for (SiteCounter EpCounters::*site : kSites) d.*site = this->*site - o.*site;
    return d;
  }
};

class ExpertParallelGroup final : public model::ExpertParallelHooks {
 public:
  explicit ExpertParallelGroup(comm::Communicator& ep) : comm_(ep) {}
  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  void exchange_counts(int64_t* recv, const int64_t* send, int64_t per_rank) override;
  void exchange_rows(float* recv, std::span<const int64_t> recv_rows, const float* send,
                     std::span<const int64_t> send_rows, int64_t row_elems, Site site) override;
  const EpCounters& counters() const { return counters_; }
  // --precision bf16: the dispatch forward's rows travel as bf16 (plan::ep_row_wire_bytes). The
  // experts' fc rounds them to bf16 as its operand anyway (model/bf16_gemm.h), and the rows are
  // read nowhere else, so the run is the one without EP; every other exchange carries fp32 values
  // the serial run keeps in fp32 (outputs, gradients, and dy, whose sum is proj's bias gradient).
  void set_bf16_dispatch(bool on) { bf16_dispatch_ = on; }
  // While set, every exchange is appended there (for traces: dispatch and combine on the
  // compute thread's communication track); null stops recording.
  void record_spans(std::vector<SiteSpan>* spans) { spans_ = spans; }

 private:
  SiteCounter& counter_of(Site site);
  comm::Communicator& comm_;
  EpCounters counters_;
  std::vector<SiteSpan>* spans_ = nullptr;
  bool bf16_dispatch_ = false;
};

}  // namespace dtrain::parallel
