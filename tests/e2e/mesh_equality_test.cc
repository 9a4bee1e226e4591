// 3D parallelism end to end: MeshEngine on dp x tp x pp rank threads, for the layouts (2,2,2),
// (4,2,1), (1,2,4), (2,1,4), (8,1,1), (1,8,1), (1,1,8) at ZeRO stages 0, 1 and 2, trains
// K = 3 steps and equals SerialEngine on the same batches: the loss of every step and the
// evaluation loss after the last, and every parameter tensor on every rank against the matching
// TP slice of the serial model's tensor of the same name. The max |difference| per layout is
// printed. The model is the tiny preset with 8 blocks and 8 heads (the preset's 2 and 4 cannot
// be cut 8 ways by PP or TP).
//
// Tolerance, and why it is not zero: the ranks compute the same sums in other orders - the
// DP average of B/dp-row gradients, the M micro-batches' gradient accumulation, TP's
// row-parallel partial sums and f/g all-reduces, the tied wte's two halves added by the
// embedding group, the norm summed per rank - so gradients differ by float rounding (~1e-7
// relative). AdamW's first steps move a weight by about lr * g / (|g| + eps); with lr = 1e-3
// such a difference moves a parameter by a small fraction of lr. We allow 1e-5 on the
// parameters (as the TP test) and 4e-6 on the losses (about 8 float ulps at ln 256 = 5.5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/model/gpt_config.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/train/mesh_engine.h"
#include "dtrain/train/serial_engine.h"
#include "e2e/equality_support.h"

namespace dtrain::train {
namespace {

constexpr int kSteps = 3;
constexpr float kLr = 1e-3f;
constexpr double kParamTol = 1e-5;
constexpr double kLossTol = 4e-6;

SerialEngineConfig base_config() {
  SerialEngineConfig c;
  c.model = model::gpt_preset("tiny").config;
  c.model.layers = 8;
  c.model.heads = 8;
  c.batch = 8;
  c.seq = 16;
  c.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
  c.grad_clip = 1.0f;
  c.init_seed = 42;
  return c;
}

struct SerialRun {
  std::vector<float> losses;  // every step, then the evaluation loss
  std::map<std::string, std::pair<model::ParamTensor, std::vector<float>>> tensors;
};

SerialRun run_serial(const SerialEngineConfig& c, const std::vector<Batch>& data) {
  SerialEngine engine(c);
  SerialRun run;
  for (const Batch& b : data) run.losses.push_back(engine.train_step(b, kLr).loss);
  run.losses.push_back(engine.eval_loss(data[0]));
  const model::ParamTable& table = engine.model().param_table();
  for (size_t i = 0; i < table.size(); ++i) {
    std::span<float> p = engine.model().param(static_cast<int>(i));
    run.tensors[table[i].name] = {table[i], {p.begin(), p.end()}};
  }
  return run;
}

struct Layout {
  int dp, tp, pp, microbatches;
};

struct RankResult {
  std::vector<float> losses;
  double max_param_diff = 0;
  int tensors = 0;
  std::string problem;  // a tensor the serial model lacks, or a shard of the wrong size
};

MeshEngineConfig mesh_of(const SerialEngineConfig& base, const Layout& l, int zero) {
  MeshEngineConfig c;
  c.base = base;
  c.dp = l.dp;
  c.tp = l.tp;
  c.pp = l.pp;
  c.zero_stage = zero;
  c.microbatches = l.microbatches;
  c.partition = parallel::balanced_partition(static_cast<int>(base.model.layers), l.pp, 1);
  c.topology = comm::NodeTopology(l.dp * l.tp * l.pp, l.dp * l.tp * l.pp);
  return c;
}

TEST(MeshEquality, EveryLayoutAndZeroStageMatchesTheSerialRun) {
  const SerialEngineConfig base = base_config();
  const std::vector<Batch> data = e2e::random_batches(base, kSteps);
  const SerialRun serial = run_serial(base, data);
  const Layout layouts[] = {{2, 2, 2, 2}, {4, 2, 1, 2}, {1, 2, 4, 4}, {2, 1, 4, 2},
                            {8, 1, 1, 1}, {1, 8, 1, 1}, {1, 1, 8, 4}};
  for (const Layout& l : layouts) {
    for (int zero = 0; zero <= 2; ++zero) {
      const MeshEngineConfig config = mesh_of(base, l, zero);
      const int world = l.dp * l.tp * l.pp;
      std::vector<RankResult> results(static_cast<size_t>(world));
      comm::threads::run_ranks(world, [&](comm::Communicator& comm) {
        RankResult& r = results[static_cast<size_t>(comm.rank())];
        MeshEngine engine(config, comm);
        for (const Batch& b : data) r.losses.push_back(engine.train_step(b, kLr).loss);
        r.losses.push_back(engine.eval_loss(data[0]));
        const model::ParamTable& table = engine.model().param_table();
        for (size_t i = 0; i < table.size(); ++i) {
          const auto it = serial.tensors.find(table[i].name);
          if (it == serial.tensors.end()) {
            r.problem = table[i].name;
            continue;
          }
          const std::vector<float> want = model::tp_slice(it->second.first, it->second.second,
                                                          base.model, l.tp, engine.coord().tp);
          std::span<float> got = engine.model().param(static_cast<int>(i));
          if (got.size() != want.size()) {
            r.problem = table[i].name + " (size)";
            continue;
          }
          for (size_t j = 0; j < got.size(); ++j) {
            r.max_param_diff =
                std::max(r.max_param_diff, static_cast<double>(std::fabs(got[j] - want[j])));
          }
          ++r.tensors;
        }
      });
      double loss_diff = 0, param_diff = 0;
      int tensors = 0;
      for (int rank = 0; rank < world; ++rank) {
        const RankResult& r = results[static_cast<size_t>(rank)];
        EXPECT_EQ(r.problem, "") << "rank " << rank;
        ASSERT_EQ(r.losses.size(), serial.losses.size()) << "rank " << rank;
        for (size_t s = 0; s < r.losses.size(); ++s) {
          loss_diff =
              std::max(loss_diff, static_cast<double>(std::fabs(r.losses[s] - serial.losses[s])));
        }
        param_diff = std::max(param_diff, r.max_param_diff);
        tensors += r.tensors;
      }
      // Every serial tensor on every DP x TP replica of its stage, plus the last stage's wte.
      const int expected =
          static_cast<int>(serial.tensors.size() + (l.pp > 1 ? 1 : 0)) * l.dp * l.tp;
      EXPECT_EQ(tensors, expected);
      EXPECT_LE(loss_diff, kLossTol)
          << "dp " << l.dp << " tp " << l.tp << " pp " << l.pp << " zero " << zero;
      EXPECT_LE(param_diff, kParamTol)
          << "dp " << l.dp << " tp " << l.tp << " pp " << l.pp << " zero " << zero;
      std::printf(
          "DP %d TP %d PP %d M %d ZeRO-%d: %d tensors, max |dparam| %.3g, max |dloss| %.3g\n", l.dp,
          l.tp, l.pp, l.microbatches, zero, tensors, param_diff, loss_diff);
    }
  }
}

// The counters beside plan/: on every rank, the TP block bytes equal tp_traffic_per_layer x
// the stage's blocks x M, the pipeline bytes the schedule's sends x pp_bytes_per_microbatch,
// the embedding group's all-reduce its ring formula; the DP bytes summed over a DP group equal
// dp x dp_traffic_per_step (the formula is the group's mean; ranks differ by the ring's chunk
// rounding and ZeRO's padded last shard, so the sum is what is exact up to that padding).
// With --ranks-per-node 4 and the default order, TP groups stay in a node and each rank's
// intra- plus inter-node bytes are every byte it sent; with order dp-tp-pp and 2 ranks a node,
// the TP groups {0,2}... cross nodes and the report warns.
TEST(MeshCounters, MatchThePlanFormulasAndSplitByLink) {
  const SerialEngineConfig base = base_config();
  const std::vector<Batch> data = e2e::random_batches(base, 2);
  struct Case {
    Layout layout;
    int zero;
    std::string order;
    int ranks_per_node;
  };
  for (const Case& k : {Case{{2, 2, 2, 2}, 1, "tp-dp-pp", 4}, Case{{4, 2, 1, 2}, 0, "tp-dp-pp", 4},
                        Case{{2, 2, 2, 2}, 2, "dp-tp-pp", 2}}) {
    const Layout& l = k.layout;
    MeshEngineConfig config = mesh_of(base, l, k.zero);
    const int world = l.dp * l.tp * l.pp;
    config.rank_order = k.order;
    config.topology = comm::NodeTopology(world, k.ranks_per_node);
    MeshSetup setup;
    setup.rank_order = k.order;
    setup.ranks_per_node = k.ranks_per_node;
    MeshReport report;
    comm::threads::run_ranks(world, [&](comm::Communicator& comm) {
      MeshEngine engine(config, comm);
      for (const Batch& b : data) engine.train_step(b, kLr);
      MeshReport r = gather_mesh_report(engine, comm, config, setup);
      if (comm.rank() == 0) report = r;
    });
    ASSERT_EQ(report.ranks.size(), static_cast<size_t>(world));
    const parallel::DeviceMesh mesh(l.dp, l.tp, l.pp, k.order);
    for (const MeshRankRow& r : report.ranks) {
      SCOPED_TRACE("rank " + std::to_string(r.rank));
      EXPECT_GT(r.tp_bytes, 0);
      EXPECT_EQ(r.tp_bytes, r.tp_formula);
      EXPECT_EQ(r.pp_bytes, r.pp_formula);
      EXPECT_EQ(r.embedding_bytes, r.embedding_formula);
      EXPECT_EQ(r.tp_vocab_bytes, r.tp_vocab_formula);
      // The topology split of the model's traffic, predicted from the formulas and the
      // algorithms' peers, equals the per-peer counters' exactly.
      EXPECT_EQ(r.model_intra_node_bytes, r.predicted_intra_node_bytes);
      EXPECT_EQ(r.model_inter_node_bytes, r.predicted_inter_node_bytes);
      const double all = r.tp_bytes + r.tp_vocab_bytes + r.pp_bytes + r.dp_bytes +
                         r.embedding_bytes + r.other_bytes;
      EXPECT_EQ(r.intra_node_bytes + r.inter_node_bytes, all);
    }
    for (const std::vector<int>& group : mesh.groups(parallel::Axis::dp)) {
      double sum = 0;
      for (int g : group) sum += report.ranks[static_cast<size_t>(g)].dp_bytes;
      const double want = l.dp * report.ranks[static_cast<size_t>(group[0])].dp_formula;
      EXPECT_NEAR(sum, want, 2.0 * l.dp * l.dp * sizeof(float));  // ZeRO's padding at most
    }
    const bool tp_crosses = k.order == "dp-tp-pp";
    EXPECT_EQ(!report.warnings.empty(), tp_crosses);
    bool tp_crossing = false;
    for (const MeshGroupCrossing& c : report.crossings) tp_crossing = tp_crossing || c.axis == "tp";
    EXPECT_EQ(tp_crossing, tp_crosses);
    std::printf(
        "%s DP %d TP %d PP %d ZeRO-%d, %d ranks a node: rank 0 sends %.0f B/step "
        "intra-node, %.0f inter-node; %zu groups cross nodes\n",
        k.order.c_str(), l.dp, l.tp, l.pp, k.zero, k.ranks_per_node,
        report.ranks[0].intra_node_bytes, report.ranks[0].inter_node_bytes,
        report.crossings.size());
  }
}

}  // namespace
}  // namespace dtrain::train
