// The gradient finalization of parallel/finalize_grads.h. The ownership rule, as pure data, over
// a grid of (dp, tp, pp, chunks, zero) layouts: every element of the serial model is counted by
// exactly one rank (padded vocabulary rows, which hold no serial element and no gradient, may be
// counted too), and the ranks' owned sums of squares add up to the serial model's, also through
// global_grad_norm over rank threads, where every rank gets the same bits. The tied-embedding
// sum and the sequence-parallel LayerNorm all-reduce on small integers, so sums are exact.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/rng.h"
#include "dtrain/cost/collective_cost.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/gpt_stage.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/optim/grad_clip.h"
#include "dtrain/parallel/finalize_grads.h"
#include "dtrain/parallel/pipeline_executor.h"
#include "dtrain/parallel/tensor_parallel.h"
#include "dtrain/parallel/zero.h"

namespace dtrain::parallel {
namespace {

// 4 blocks (cut 4 ways by PP, or 2 x 2 chunks), 4 heads and 4C = 64 (cut 4 ways by TP), and a
// vocabulary of 255 rows, which TP 2 and 4 pad.
model::GptConfig small_config() {
  return {.vocab = 255, .context = 16, .layers = 4, .heads = 4, .channels = 16};
}

struct Layout {
  int dp, tp, pp, chunks;
};

std::string name_of(const Layout& l, int zero) {
  return "dp " + std::to_string(l.dp) + " tp " + std::to_string(l.tp) + " pp " +
         std::to_string(l.pp) + " v " + std::to_string(l.chunks) + " zero " + std::to_string(zero);
}

std::vector<Layout> layouts() {
  std::vector<Layout> out;
  for (int dp : {1, 2, 3}) {
    for (int tp : {1, 2, 4}) {
      for (int pp : {1, 2, 4}) out.push_back({dp, tp, pp, 1});
      out.push_back({dp, tp, 2, 2});  // interleaved: the stages hold two chunks each
    }
  }
  return out;
}

// One rank of a layout: its stage's table cut for its TP rank, and its ownership.
struct RankView {
  model::ParamTable table;
  GradOwnership owner;
};

RankView view_of(const model::GptConfig& g, const Layout& l, int zero, MeshCoord c) {
  const StagePartition partition = balanced_partition(static_cast<int>(g.layers), l.pp, l.chunks);
  const model::GptStage stage = stage_of(partition, c.pp);
  RankView v;
  v.table = model::tp_local_table(model::gpt_stage_param_table(g, stage), g, l.tp);
  v.owner.coord = c;
  v.owner.zero_stage = zero;
  v.owner.zero_shard = shard_layout(v.table.total_count(), l.dp).owned(c.dp);
  v.owner.tied_copy = holds_tied_copy(stage);
  return v;
}

template <typename Fn>
void for_each_rank(const Layout& l, Fn&& fn) {
  for (int pp = 0; pp < l.pp; ++pp) {
    for (int dp = 0; dp < l.dp; ++dp) {
      for (int tp = 0; tp < l.tp; ++tp) fn(MeshCoord{dp, tp, pp});
    }
  }
}

TEST(GradOwnership, EverySerialElementIsCountedByExactlyOneRank) {
  const model::GptConfig g = small_config();
  const model::ParamTable serial = model::gpt_param_table(g);
  for (const Layout& l : layouts()) {
    for (int zero = 0; zero <= 3; ++zero) {
      SCOPED_TRACE(name_of(l, zero));
      std::vector<int> counted(static_cast<size_t>(serial.total_count()), 0);
      for_each_rank(l, [&](MeshCoord c) {
        const RankView v = view_of(g, l, zero, c);
        for (const comm::Chunk& r : counted_grad_ranges(v.table, v.owner)) {
          for (const model::ParamTensor& t : v.table.tensors()) {
            const int64_t lo = std::max(r.offset, t.offset);
            const int64_t hi = std::min(r.offset + r.count, t.offset + t.count);
            if (lo >= hi) continue;
            const model::ParamTensor& whole = serial[static_cast<size_t>(serial.index_of(t.name))];
            // The shard's element k is the serial element the slice ranges put at k.
            const std::vector<model::FlatRange> ranges =
                model::tp_slice_ranges(whole, g, l.tp, c.tp);
            int64_t at = 0;
            for (const model::FlatRange& fr : ranges) {
              const int64_t a = std::max(lo - t.offset, at);
              const int64_t b = std::min(hi - t.offset, at + fr.count);
              for (int64_t k = a; k < b; ++k) {
                ++counted[static_cast<size_t>(whole.offset + fr.offset + (k - at))];
              }
              at += fr.count;
            }
            // Past the ranges: padded vocabulary rows only.
            if (hi - t.offset > at) {
              EXPECT_EQ(t.name, "wte");
            }
          }
        }
      });
      int64_t wrong = 0, first_wrong = -1;
      for (size_t e = 0; e < counted.size(); ++e) {
        if (counted[e] == 1) continue;
        ++wrong;
        if (first_wrong < 0) first_wrong = static_cast<int64_t>(e);
      }
      EXPECT_EQ(wrong, 0) << "first at serial element " << first_wrong << ", counted "
                          << (first_wrong < 0 ? 0 : counted[static_cast<size_t>(first_wrong)])
                          << " times";
    }
  }
}

// The serial model's gradient, and a rank's local gradient cut from it as the engines hold it
// (tp_slice per tensor, the stage's tensors only; padded rows 0).
std::vector<float> local_grads(const model::GptConfig& g, const model::ParamTable& serial,
                               const std::vector<float>& whole, const RankView& v, int tp) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(v.table.total_count()));
  for (const model::ParamTensor& t : v.table.tensors()) {
    const model::ParamTensor& s = serial[static_cast<size_t>(serial.index_of(t.name))];
    const std::vector<float> slice =
        model::tp_slice(s,
                        std::span<const float>(whole).subspan(static_cast<size_t>(s.offset),
                                                              static_cast<size_t>(s.count)),
                        g, tp, v.owner.coord.tp);
    out.insert(out.end(), slice.begin(), slice.end());
  }
  return out;
}

// What a rank holds at its ZeRO stage: the whole local gradient, or (stages 2 and 3) its shard.
double rank_squares(const RankView& v, const std::vector<float>& local) {
  if (v.owner.zero_stage < 2) return owned_sum_of_squares(v.table, v.owner, local);
  const comm::Chunk own = v.owner.zero_shard;
  const std::span<const float> shard = std::span<const float>(local).subspan(
      static_cast<size_t>(own.offset), static_cast<size_t>(own.count));
  return owned_sum_of_squares(v.table, v.owner, shard, own.offset);
}

TEST(GradOwnership, OwnedSumsOfSquaresAddUpToTheSerialOne) {
  const model::GptConfig g = small_config();
  const model::ParamTable serial = model::gpt_param_table(g);
  std::vector<float> whole(static_cast<size_t>(serial.total_count()));
  Rng rng(7);
  for (float& x : whole) x = static_cast<float>(rng.normal());
  const double want = optim::sum_of_squares(whole);
  for (const Layout& l : layouts()) {
    for (int zero = 0; zero <= 3; ++zero) {
      double sum = 0;
      for_each_rank(l, [&](MeshCoord c) {
        const RankView v = view_of(g, l, zero, c);
        sum += rank_squares(v, local_grads(g, serial, whole, v, l.tp));
      });
      // The same squares in other groupings: a few double roundings apart.
      EXPECT_NEAR(sum, want, 1e-12 * want) << name_of(l, zero);
    }
  }
}

// The rule with the serial defaults counts the whole buffer in one range: the serial engine's
// norm is optim::sum_of_squares of its gradient, bit for bit.
TEST(GradOwnership, TheSerialModelIsOneRange) {
  const model::ParamTable serial = model::gpt_param_table(small_config());
  const std::vector<comm::Chunk> ranges = counted_grad_ranges(serial, {});
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].offset, 0);
  EXPECT_EQ(ranges[0].count, serial.total_count());
}

// Over rank threads in mesh order: global_grad_norm gives every rank the same bits, the serial
// norm up to rounding, and the clip scale of that norm.
TEST(GlobalGradNorm, SameBitsOnEveryRankAndTheSerialNorm) {
  const model::GptConfig g = small_config();
  const model::ParamTable serial = model::gpt_param_table(g);
  std::vector<float> whole(static_cast<size_t>(serial.total_count()));
  Rng rng(11);
  for (float& x : whole) x = static_cast<float>(rng.normal());
  const double want = std::sqrt(optim::sum_of_squares(whole));
  const float max_norm = 1.0f;
  for (const auto& [l, zero] :
       {std::pair{Layout{2, 2, 2, 1}, 1}, std::pair{Layout{1, 4, 2, 2}, 0},
        std::pair{Layout{3, 1, 2, 1}, 3}, std::pair{Layout{1, 1, 1, 1}, 0}}) {
    SCOPED_TRACE(name_of(l, zero));
    const DeviceMesh mesh(l.dp, l.tp, l.pp);
    std::vector<GradNorm> got(static_cast<size_t>(mesh.world_size()));
    comm::threads::run_ranks(mesh.world_size(), [&](comm::Communicator& world) {
      const RankView v = view_of(g, l, zero, mesh.coord_of(world.rank()));
      got[static_cast<size_t>(world.rank())] = global_grad_norm(
          rank_squares(v, local_grads(g, serial, whole, v, l.tp)), &world, max_norm);
    });
    for (const GradNorm& n : got) {
      EXPECT_EQ(std::bit_cast<uint64_t>(n.norm), std::bit_cast<uint64_t>(got[0].norm));
      EXPECT_EQ(n.clip_scale, optim::clip_scale(n.norm, max_norm));
    }
    EXPECT_NEAR(got[0].norm, want, 1e-12 * want);
  }
}

// Rank r's gradient element i: small integers, so any sum of them is exact.
float grad_value(int rank, int64_t i) {
  return static_cast<float>((rank + 1) * (i % 7 + 1));
}

void fill_grads(model::GptModel& m, int rank) {
  std::span<float> g = m.grads();
  for (size_t i = 0; i < g.size(); ++i) g[i] = grad_value(rank, static_cast<int64_t>(i));
}

// PP 2: the first stage holds wte for the embedding, the last for the head; after the sum both
// copies hold the whole, every other tensor is untouched, and the bytes are the formula's.
TEST(TiedEmbedding, SumsTheTwoCopiesAndNothingElse) {
  model::GptConfig g = small_config();
  const StagePartition partition = balanced_partition(static_cast<int>(g.layers), 2);
  comm::threads::run_ranks(2, [&](comm::Communicator& pp) {
    MemoryTracker tracker;
    model::GptModel m(g, stage_of(partition, pp.rank()), &tracker);
    fill_grads(m, pp.rank());
    const int members[] = {0, 1};
    std::unique_ptr<comm::Communicator> embedding = pp.subgroup(members, "embedding");
    // No group (a stage in between, or no pipeline): nothing moves.
    const model::ParamTable& table = m.param_table();
    const model::ParamTensor& wte = table[static_cast<size_t>(table.index_of("wte"))];
    std::span<float> dwte = m.grad(table.index_of("wte"));
    EXPECT_EQ(sum_tied_embedding_grads(dwte, nullptr).bytes_sent, 0);
    const comm::Traffic t = sum_tied_embedding_grads(dwte, embedding.get());
    std::span<const float> grads = m.grads();
    for (int64_t i = 0; i < table.total_count(); ++i) {
      const bool tied = i >= wte.offset && i < wte.offset + wte.count;
      // wte sits at the same offset on both stages (the table's first tensor).
      const float want = tied ? grad_value(0, i) + grad_value(1, i) : grad_value(pp.rank(), i);
      ASSERT_EQ(grads[static_cast<size_t>(i)], want) << "element " << i;
    }
    const double bytes = static_cast<double>(wte.count) * sizeof(float);
    EXPECT_EQ(
        static_cast<double>(t.bytes_sent),
        plan::collective_traffic(comm::CollectiveOp::all_reduce, kTiedEmbeddingAlgorithm, bytes, 2)
            .bytes_sent);
  });
}

// SP over TP 2: the LayerNorm gradients (ln1, ln2 of every block, lnf) summed over the TP ranks,
// nothing else; without sequence parallelism, or with no group, nothing moves.
TEST(SequenceParallelNorms, AllReducesTheLayerNormGradientsOnly) {
  const model::GptConfig g = small_config();
  for (bool sp : {true, false}) {
    comm::threads::run_ranks(2, [&](comm::Communicator& tp) {
      MemoryTracker tracker;
      TensorParallelGroup hooks(tp, sp);
      model::GptModel m(g, &tracker, &hooks);
      fill_grads(m, tp.rank());
      const model::ParamTable& table = m.param_table();
      // No group: a no-op.
      all_reduce_sequence_parallel_norm_grads(table, m.grads(), 0, nullptr, sp);
      all_reduce_sequence_parallel_norm_grads(table, m.grads(), 0, &tp, hooks.sequence_parallel());
      std::span<const float> grads = m.grads();
      int layernorms = 0;
      for (const model::ParamTensor& t : table.tensors()) {
        const bool ln = t.name.find(".ln1.") != std::string::npos ||
                        t.name.find(".ln2.") != std::string::npos || t.name.starts_with("lnf.");
        layernorms += ln ? 1 : 0;
        for (int64_t i = t.offset; i < t.offset + t.count; ++i) {
          const float want =
              sp && ln ? grad_value(0, i) + grad_value(1, i) : grad_value(tp.rank(), i);
          ASSERT_EQ(grads[static_cast<size_t>(i)], want) << t.name << " sp " << sp;
        }
      }
      EXPECT_EQ(layernorms, 4 * g.layers + 2);
    });
  }
}

// After a ZeRO reduce-scatter a rank holds a range of the flat buffer: only the LayerNorm
// elements inside it are reduced (both TP ranks hold the same range), the rest is untouched.
TEST(SequenceParallelNorms, ReducesOnlyTheLayerNormElementsOfAShard) {
  const model::GptConfig g = small_config();
  comm::threads::run_ranks(2, [&](comm::Communicator& tp) {
    MemoryTracker tracker;
    TensorParallelGroup hooks(tp, true);
    model::GptModel m(g, &tracker, &hooks);
    fill_grads(m, tp.rank());
    const model::ParamTable& table = m.param_table();
    // A range that starts inside h.0.ln1.b and ends inside h.1.ln2.w.
    const model::ParamTensor& ln1b = table[static_cast<size_t>(table.index_of("h.0.ln1.b"))];
    const model::ParamTensor& ln2w = table[static_cast<size_t>(table.index_of("h.1.ln2.w"))];
    const int64_t first = ln1b.offset + 3, end = ln2w.offset + 5;
    std::vector<float> shard(m.grads().begin() + first, m.grads().begin() + end);
    const comm::Traffic t = all_reduce_sequence_parallel_norm_grads(table, shard, first, &tp, true);
    int64_t reduced = 0;
    for (int64_t i = first; i < end; ++i) {
      bool ln = false;
      for (const model::ParamTensor& x : table.tensors()) {
        const bool is_ln =
            x.name.find(".ln1.") != std::string::npos || x.name.find(".ln2.") != std::string::npos;
        ln = ln || (is_ln && i >= x.offset && i < x.offset + x.count);
      }
      reduced += ln ? 1 : 0;
      const float want = ln ? grad_value(0, i) + grad_value(1, i) : grad_value(tp.rank(), i);
      ASSERT_EQ(shard[static_cast<size_t>(i - first)], want) << "element " << i;
    }
    // ln1.b's tail, ln2.w and ln2.b of block 0, ln1.w and ln1.b of block 1, ln2.w's head.
    EXPECT_EQ(reduced, (g.channels - 3) + 4 * g.channels + 5);
    EXPECT_GT(t.bytes_sent, 0);
  });
}

}  // namespace
}  // namespace dtrain::parallel
