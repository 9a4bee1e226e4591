// The tied-embedding sum, the sequence-parallel LayerNorm all-reduce, the ownership rule and the
// global norm: the one copy every engine calls.
#include "dtrain/parallel/finalize_grads.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/rank_order.h"
#include "dtrain/core/check.h"
#include "dtrain/model/moe_dispatch.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/optim/grad_clip.h"

namespace dtrain::parallel {

comm::Traffic sum_tied_embedding_grads(std::span<float> dwte, comm::Communicator* embedding) {
  if (embedding == nullptr || embedding->size() == 1) return {};
  return comm::all_reduce<float>(*embedding, dwte.data(), static_cast<int64_t>(dwte.size()),
                                 comm::ReduceOp::sum, kTiedEmbeddingAlgorithm);
}

namespace {

bool is_layernorm(const std::string& name) {
  return name.find("ln1.") != std::string::npos || name.find("ln2.") != std::string::npos ||
         name.starts_with("lnf.");
}

// `reduce(lo, n)` for each selected part of a tensor inside [first, first + size): `part(t)` is
// the part's (offset, count) within tensor t, count 0 for none.
template <typename Part, typename Reduce>
comm::Traffic for_each_part(const model::ParamTable& table, int64_t first, int64_t size, Part part,
                            Reduce reduce) {
  comm::Traffic traffic;
  const int64_t end = first + size;
  for (const model::ParamTensor& t : table.tensors()) {
    const auto [offset, count] = part(t);
    if (count == 0) continue;
    const int64_t lo = std::max(first, t.offset + offset);
    const int64_t hi = std::min(end, t.offset + offset + count);
    if (lo >= hi) continue;
    traffic += reduce(lo - first, hi - lo);
  }
  return traffic;
}

// One ring all-reduce (sum) over `group` of each selected part, fp32 on the wire (a bf16
// gradient is widened and rounded once).
template <typename T, typename Part>
comm::Traffic all_reduce_parts(const model::ParamTable& table, std::span<T> grads, int64_t first,
                               comm::Communicator& group, Part part) {
  std::vector<float> wide;
  return for_each_part(
      table, first, static_cast<int64_t>(grads.size()), part, [&](int64_t at, int64_t n) {
        if constexpr (std::is_same_v<T, float>) {
          return comm::all_reduce<float>(group, grads.data() + at, n, comm::ReduceOp::sum,
                                         comm::Algorithm::ring);
        } else {
          wide.resize(static_cast<size_t>(n));
          to_float(grads.data() + at, wide.data(), n);
          const comm::Traffic t = comm::all_reduce<float>(
              group, wide.data(), n, comm::ReduceOp::sum, comm::Algorithm::ring);
          to_bf16(wide.data(), grads.data() + at, n);
          return t;
        }
      });
}

std::pair<int64_t, int64_t> layernorm_part(const model::ParamTensor& t) {
  return {0, is_layernorm(t.name) ? t.count : 0};
}

}  // namespace

comm::Traffic all_reduce_sequence_parallel_norm_grads(const model::ParamTable& table,
                                                      std::span<float> grads, int64_t first,
                                                      comm::Communicator* tp,
                                                      bool sequence_parallel) {
  if (tp == nullptr || tp->size() == 1 || !sequence_parallel) return {};
  return all_reduce_parts(table, grads, first, *tp, layernorm_part);
}

comm::Traffic all_reduce_sequence_parallel_norm_grads(const model::ParamTable& table,
                                                      std::span<bf16> grads, int64_t first,
                                                      comm::Communicator* tp,
                                                      bool sequence_parallel) {
  if (tp == nullptr || tp->size() == 1 || !sequence_parallel) return {};
  return all_reduce_parts(table, grads, first, *tp, layernorm_part);
}

KvCopyRows kv_copy_rows(const model::GptConfig& c, int tp) {
  if (c.kv_head_copies(tp) == 1) return {};
  const int64_t HS = c.head_size(), C = c.channels;
  return {c.heads / tp * HS * C, 2 * HS * C};  // after the rank's query rows: K's, then V's
}

std::pair<int64_t, int64_t> kv_copy_part(const model::ParamTensor& t, KvCopyRows rows) {
  return {rows.offset, t.name.ends_with("attn.qkv.w") ? rows.count : 0};
}

comm::Traffic all_reduce_kv_copy_grads(const model::ParamTable& table, std::span<float> grads,
                                       int64_t first, comm::Communicator* copies, KvCopyRows rows) {
  if (copies == nullptr || copies->size() == 1 || rows.count == 0) return {};
  return all_reduce_parts(table, grads, first, *copies,
                          [rows](const model::ParamTensor& t) { return kv_copy_part(t, rows); });
}

comm::Traffic all_reduce_kv_copy_grads(const model::ParamTable& table, std::span<bf16> grads,
                                       int64_t first, comm::Communicator* copies, KvCopyRows rows) {
  if (copies == nullptr || copies->size() == 1 || rows.count == 0) return {};
  return all_reduce_parts(table, grads, first, *copies,
                          [rows](const model::ParamTensor& t) { return kv_copy_part(t, rows); });
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
  }
  std::vector<comm::Chunk> out;
  for (const model::ParamTensor& t : table.tensors()) {
    if (owner.zero_stage == 0) {
      // A DP replica of DP rank 0's averaged gradient (of the expert-DP group's first replica's).
      const bool expert = owner.ep > 1 && model::is_expert_tensor(t.name);
      if (owner.coord.dp >= (expert ? owner.ep : 1)) continue;
    }
    if (owner.coord.tp != 0 && model::tp_split_of(t.name) == model::TpSplit::replicated) continue;
    if (owner.tied_copy && t.name == "wte") continue;
    const auto add = [&](int64_t from, int64_t to) {
      const int64_t lo = std::max(from, begin), hi = std::min(to, end);
      if (lo >= hi) return;
      if (!out.empty() && out.back().offset + out.back().count == lo) {
        out.back().count += hi - lo;
      } else {
        out.push_back({lo, hi - lo});
      }
    };
    const auto [kv_offset, kv_count] = kv_copy_part(t, owner.kv_copy);
    if (!owner.counts_kv_copy && kv_count > 0) {  // another copy of the K/V head counts them
      add(t.offset, t.offset + kv_offset);
      add(t.offset + kv_offset + kv_count, t.offset + t.count);
    } else {
      add(t.offset, t.offset + t.count);
    }
  }
  return out;
}

namespace {

template <typename T>
double owned_squares(const model::ParamTable& table, const GradOwnership& owner,
                     std::span<const T> grads, int64_t grads_first) {
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

}  // namespace

double owned_sum_of_squares(const model::ParamTable& table, const GradOwnership& owner,
                            std::span<const float> grads, int64_t grads_first) {
  return owned_squares(table, owner, grads, grads_first);
}

double owned_sum_of_squares(const model::ParamTable& table, const GradOwnership& owner,
                            std::span<const bf16> grads, int64_t grads_first) {
  return owned_squares(table, owner, grads, grads_first);
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
