// The model's one narrow door for expert parallelism (EP), as tp_hooks.h is for TP: the
// all-to-all exchanges of a routed layer's rows between the ranks of an EP group, each of which
// holds experts [rank * E/size, (rank + 1) * E/size). The base class is the serial
// implementation (size 1), under which the model runs the serial MoE layer and never calls it.
// parallel/expert_parallel.h implements it over a communicator and counts each site's bytes.
#pragma once

#include <cstdint>
#include <span>

namespace dtrain::model {

class ExpertParallelHooks {
 public:
  virtual ~ExpertParallelHooks() = default;
  virtual int size() const { return 1; }  // EP group size
  virtual int rank() const { return 0; }  // ep_rank

  // Where a routed layer's exchange runs. The combine's gradient (dy to the experts) moves as the
  // dispatch does, the dispatch's gradient (dx back to the tokens) as the combine does.
  enum class Site {
    counts,             // rows per (source, expert): E/size int64 to every rank, per exchange
    dispatch_forward,   // token rows to their experts' ranks
    combine_forward,    // expert outputs back
    combine_backward,   // the outputs' gradients to the experts' ranks
    dispatch_backward,  // the inputs' gradients back
  };
  // all_to_all of equal blocks: `per_rank` int64 for each rank from `send`, into `recv` (size()
  // blocks each, in rank order).
  virtual void exchange_counts(int64_t* recv, const int64_t* send, int64_t per_rank) {
    for (int64_t i = 0; i < per_rank; ++i) recv[i] = send[i];
  }
  // all_to_all_v of rows of `row_elems` floats: send_rows[q] rows for rank q back to back in
  // `send`, recv_rows[q] rows from rank q back to back into `recv`; any count may be zero.
  virtual void exchange_rows(float* recv, std::span<const int64_t> recv_rows, const float* send,
                             std::span<const int64_t> send_rows, int64_t row_elems, Site /*site*/) {
    for (int64_t i = 0; i < send_rows[0] * row_elems; ++i) recv[i] = send[i];
    (void)recv_rows;
  }
};

}  // namespace dtrain::model
