// The tied-embedding sum, the sequence-parallel LayerNorm all-reduce, the ownership rule and the
// global norm: the one copy every engine calls.
#include "dtrain/parallel/finalize_grads.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/rank_order.h"
#include "dtrain/core/check.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/optim/grad_clip.h"

namespace dtrain::parallel {

comm::Traffic sum_tied_embedding_grads(std::span<float> dwte, comm::Communicator* embedding) {
  if (embedding == nullptr || embedding->size() == 1) return {};
  return comm::all_reduce<float>(*embedding, dwte.data(), static_cast<int64_t>(dwte.size()),
                                 comm::ReduceOp::sum, kTiedEmbeddingAlgorithm);
}

comm::Traffic all_reduce_sequence_parallel_norm_grads(const model::ParamTable& table,
                                                      std::span<float> grads, int64_t first,
                                                      comm::Communicator* tp,
                                                      bool sequence_parallel) {
  comm::Traffic traffic;
  if (tp == nullptr || tp->size() == 1 || !sequence_parallel) return traffic;
  const int64_t end = first + static_cast<int64_t>(grads.size());
  for (const model::ParamTensor& t : table.tensors()) {
    const bool layernorm = t.name.find("ln1.") != std::string::npos ||
                           t.name.find("ln2.") != std::string::npos || t.name.starts_with("lnf.");
    const int64_t lo = std::max(first, t.offset), hi = std::min(end, t.offset + t.count);
    if (!layernorm || lo >= hi) continue;
    traffic += comm::all_reduce<float>(*tp, grads.data() + (lo - first), hi - lo,
                                       comm::ReduceOp::sum, comm::Algorithm::ring);
  }
  return traffic;
}

bool holds_tied_copy(const model::GptStage& stage) {
  return stage.head && !stage.embedding;
}

std::vector<comm::Chunk> counted_grad_ranges(const model::ParamTable& table,
                                             const GradOwnership& owner) {
  int64_t begin = 0, end = table.total_count();
  if (owner.zero_stage > 0) {
    begin = owner.zero_shard.offset;
    end = owner.zero_shard.offset + owner.zero_shard.count;
  } else if (owner.coord.dp != 0) {
    return {};  // a DP replica of DP rank 0's averaged gradient
  }
  std::vector<comm::Chunk> out;
  for (const model::ParamTensor& t : table.tensors()) {
    if (owner.coord.tp != 0 && model::tp_split_of(t.name) == model::TpSplit::replicated) continue;
    if (owner.tied_copy && t.name == "wte") continue;
    const int64_t lo = std::max(t.offset, begin), hi = std::min(t.offset + t.count, end);
    if (lo >= hi) continue;
    if (!out.empty() && out.back().offset + out.back().count == lo) {
      out.back().count += hi - lo;
    } else {
      out.push_back({lo, hi - lo});
    }
  }
  return out;
}

double owned_sum_of_squares(const model::ParamTable& table, const GradOwnership& owner,
                            std::span<const float> grads, int64_t grads_first) {
  double sum = 0;
  for (const comm::Chunk& r : counted_grad_ranges(table, owner)) {
    DTRAIN_CHECK(r.offset >= grads_first &&
                     r.offset + r.count <= grads_first + static_cast<int64_t>(grads.size()),
                 "gradient norm: counted elements [", r.offset, ", ", r.offset + r.count,
                 ") lie outside the gradient held, [", grads_first, ", ",
                 grads_first + static_cast<int64_t>(grads.size()), ")");
    sum += optim::sum_of_squares(
        grads.subspan(static_cast<size_t>(r.offset - grads_first), static_cast<size_t>(r.count)));
  }
  return sum;
}

GradNorm global_grad_norm(double owned_squares, comm::Communicator* world, float max_norm) {
  double squares = owned_squares;
  if (world != nullptr && world->size() > 1) {
    squares = comm::sum_in_rank_order(*world, std::span<const double>(&owned_squares, 1))[0];
  }
  GradNorm g;
  g.norm = std::sqrt(squares);
  g.clip_scale = optim::clip_scale(g.norm, max_norm);
  return g;
}

}  // namespace dtrain::parallel
