// The text and JSON reports carry the plan's own figures.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dtrain/plan/report.h"

namespace dtrain::plan {
namespace {

PlanInput llama70b() {
  PlanInput in;
  in.model = model_preset("llama2-70b");
  in.cluster = parse_cluster("8x8xH100");
  in.training.global_batch = 1024;
  in.training.tokens = 2e12;
  return in;
}

TEST(Report, JsonHasThePlansNumbers) {
  const PlanInput in = llama70b();
  Layout l;
  l.tp = 8;
  l.pp = 2;
  l.dp = 4;
  l.zero_stage = 1;
  l.recompute = Recompute::selective;
  const Plan p = evaluate(in, l);
  const nlohmann::json j = nlohmann::json::parse(plan_json(p).dump());
  EXPECT_EQ(j.at("layout").at("tp"), 8);
  EXPECT_EQ(j.at("layout").at("recompute"), "selective");
  EXPECT_DOUBLE_EQ(j.at("memory").at("total_bytes").get<double>(), p.memory.total());
  EXPECT_EQ(j.at("memory").at("fits").get<bool>(), p.memory.fits());
  EXPECT_DOUBLE_EQ(j.at("time").at("step_s").get<double>(), p.time.step_s);
  EXPECT_DOUBLE_EQ(j.at("time").at("mfu").get<double>(), p.time.mfu);
  EXPECT_DOUBLE_EQ(j.at("bubble").at("fraction_of_ideal").get<double>(),
                   p.time.bubble.fraction_of_ideal);
  ASSERT_EQ(j.at("communication").size(), p.traffic.size());
  EXPECT_EQ(j.at("communication").at(0).at("group"), "TP");
  const nlohmann::json input = input_json(in);
  EXPECT_EQ(input.at("model").at("params").get<int64_t>(), param_count(in.model));
  EXPECT_EQ(input.at("cluster").at("nodes"), 8);
}

TEST(Report, TextSaysWhetherItFits) {
  const PlanInput in = llama70b();
  Layout fits;
  fits.tp = 8;
  fits.pp = 2;
  fits.dp = 4;
  fits.zero_stage = 1;
  fits.recompute = Recompute::selective;
  fits.sequence_parallel = true;
  const std::string a = format_plan(in, evaluate(in, fits));
  EXPECT_NE(a.find("fits,"), std::string::npos) << a;
  EXPECT_NE(a.find("Communication per step"), std::string::npos);
  EXPECT_NE(a.find("MFU"), std::string::npos);
  Layout too_big;
  too_big.dp = 64;
  const std::string b = format_plan(in, evaluate(in, too_big));
  EXPECT_NE(b.find("DOES NOT FIT, over by"), std::string::npos) << b;
}

TEST(Report, SearchJsonAndText) {
  const PlanInput in = llama70b();
  const SearchResult r = search(in, {3});
  const nlohmann::json j = nlohmann::json::parse(search_json(in, r).dump());
  EXPECT_EQ(j.at("top").size(), 3u);
  EXPECT_EQ(j.at("evaluated").get<int64_t>(), r.evaluated);
  EXPECT_FALSE(j.at("top").at(0).at("why").get<std::string>().empty());
  const std::string text = format_search(in, r);
  EXPECT_NE(text.find("Why not the alternatives"), std::string::npos);
  EXPECT_NE(text.find("crosses the node boundary"), std::string::npos);
}

}  // namespace
}  // namespace dtrain::plan
