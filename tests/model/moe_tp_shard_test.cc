// The expert tensors' cut across EP and TP (model::expert_slice_ranges / expert_slice, on
// tp_shard.h's expert_rows and expert_columns): over every (ep_rank, tp_rank) each serial element
// is held exactly once (moe.proj.b once per TP rank), each rank's share is its local table's count,
// and a slice puts each expert's TP part where the local shapes say (fc rows, proj columns, proj
// bias whole).
#include <gtest/gtest.h>

#include <vector>

#include "dtrain/model/gpt_config.h"
#include "dtrain/model/moe_dispatch.h"
#include "dtrain/model/param_table.h"
#include "dtrain/model/tp_shard.h"

namespace dtrain::model {
namespace {

GptConfig moe_model() {
  GptConfig c = gpt_preset("tiny").config;
  c.layers = 1;
  c.moe = {.experts = 4, .top_k = 2, .every = 1};
  return c;
}

TEST(ExpertShard, EveryElementOnceOverEpAndTp) {
  const GptConfig c = moe_model();
  const ParamTable serial = gpt_param_table(c);
  for (int ep : {1, 2, 4}) {
    for (int tp : {1, 2, 4}) {
      const ParamTable local = ep_local_table(tp_local_table(serial, c, tp), c.moe, ep);
      for (const ParamTensor& t : serial.tensors()) {
        if (!is_expert_tensor(t.name)) continue;
        SCOPED_TRACE(testing::Message() << t.name << " ep " << ep << " tp " << tp);
        std::vector<int> held(static_cast<size_t>(t.count), 0);
        for (int e = 0; e < ep; ++e) {
          for (int r = 0; r < tp; ++r) {
            int64_t n = 0;
            for (const FlatRange& f : expert_slice_ranges(t, c, tp, r, ep, e)) {
              for (int64_t i = 0; i < f.count; ++i) ++held[static_cast<size_t>(f.offset + i)];
              n += f.count;
            }
            EXPECT_EQ(n, local[static_cast<size_t>(local.index_of(t.name))].count);
          }
        }
        // moe.proj.b is added after the experts' all-reduce: whole on every TP rank.
        const int copies = tp_split_of(t.name) == TpSplit::replicated ? tp : 1;
        for (int h : held) ASSERT_EQ(h, copies);
      }
    }
  }
}

TEST(ExpertShard, SliceTakesEachExpertsTpPart) {
  const GptConfig c = moe_model();
  const ParamTable serial = gpt_param_table(c);
  const int64_t C = c.channels, H = 4 * C;
  const ParamTensor& fc = serial[static_cast<size_t>(serial.index_of("h.0.moe.fc.w"))];
  const ParamTensor& proj = serial[static_cast<size_t>(serial.index_of("h.0.moe.proj.w"))];
  std::vector<float> values(static_cast<size_t>(fc.count));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  // ep 2, tp 2, ep_rank 1, tp_rank 1: experts 2 and 3, rows [H/2, H) of each: fc (E, H, C).
  const std::vector<float> s = expert_slice(fc, values, c, 2, 1, 2, 1);
  ASSERT_EQ(static_cast<int64_t>(s.size()), 2 * (H / 2) * C);
  EXPECT_EQ(s[0], static_cast<float>((2 * H + H / 2) * C));
  EXPECT_EQ(s[static_cast<size_t>((H / 2) * C)], static_cast<float>((3 * H + H / 2) * C));
  // proj (E, C, H): each of the experts' C rows keeps columns [H/2, H).
  const std::vector<float> p = expert_slice(proj, values, c, 2, 1, 2, 1);
  ASSERT_EQ(static_cast<int64_t>(p.size()), 2 * C * (H / 2));
  EXPECT_EQ(p[0], static_cast<float>(2 * C * H + H / 2));
  EXPECT_EQ(p[static_cast<size_t>(H / 2)], static_cast<float>(2 * C * H + H + H / 2));
}

}  // namespace
}  // namespace dtrain::model
