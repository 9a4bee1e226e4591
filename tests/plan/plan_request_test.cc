// plan_request.h: `dtrain plan`'s flags as a JSON object. A request answers what evaluate and
// search answer for the same inputs, reads a cluster file inline, and fails with the command's
// messages (the page in web/ shows them as they are).
#include "dtrain/plan/plan_request.h"

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "dtrain/core/check.h"
#include "dtrain/plan/report.h"

namespace dtrain::plan {
namespace {

using nlohmann::json;

json request(const std::string& text) {
  return json::parse(plan_request(text));
}

TEST(PlanRequest, OneLayoutIsEvaluateReport) {
  PlanInput in;
  in.model = model_preset("llama2-7b");
  in.cluster = parse_cluster("1x8xH100");
  in.training.global_batch = in.model.default_global_batch;
  in.training.tokens = in.model.default_tokens;
  Layout l;
  l.dp = 4;
  l.tp = 2;
  l.zero_stage = 1;
  json want = input_json(in);
  want["plan"] = plan_json(evaluate(in, l));
  want["request"] = {{"model", "llama2-7b"}, {"cluster", "1x8xH100"}, {"tp", 2}, {"zero", 1}};
  EXPECT_EQ(request(R"({"model": "llama2-7b", "cluster": "1x8xH100", "tp": 2, "zero": 1})"), want);
}

// A report echoes the flags it answers ("request"), and given back whole it answers itself
// again: what `dtrain plan --json` prints is a request the page (and this function) take.
TEST(PlanRequest, AReportAnswersItselfAgain) {
  for (const char* flags :
       {R"({"model": "llama2-7b", "cluster": "1x8xH100", "tp": 2, "zero": 1})",
        R"({"model": "deepseek-v3", "cluster": "32x8xH100", "tp": 8, "pp": 8, "ep": 4,
            "zero": 1, "recompute": "full"})",
        R"({"model": "llama2-7b", "cluster": "1x8xH100", "search": true, "top": 3})"}) {
    const std::string report = plan_request(flags);
    ASSERT_FALSE(json::parse(report).contains("error")) << report;
    EXPECT_EQ(json::parse(report)["request"], json::parse(flags));
    EXPECT_EQ(plan_request(report), report) << flags;
  }
}

TEST(PlanRequest, SearchHoldsTheAxesGiven) {
  const json r = request(R"({"model": "llama2-7b", "cluster": "1x8xH100", "search": true,
                             "tp": 2, "top": 3})");
  ASSERT_FALSE(r.contains("error")) << r.dump();
  ASSERT_EQ(r["top"].size(), 3u);
  for (const json& p : r["top"]) EXPECT_EQ(p["layout"]["tp"], 2);
  EXPECT_EQ(r["fixed"], "tp=2");
}

TEST(PlanRequest, ClusterFileInline) {
  json flags = {{"model", "llama2-13b"}, {"tp", 4}};
  flags["cluster"] = to_json(parse_cluster("2x8xA100"));
  const json inline_file = json::parse(plan_request(flags.dump()));
  flags["cluster"] = "2x8xA100";
  const json spec = json::parse(plan_request(flags.dump()));
  ASSERT_FALSE(inline_file.contains("error")) << inline_file.dump();
  EXPECT_EQ(inline_file["plan"], spec["plan"]);
}

TEST(PlanRequest, ErrorsAreTheCommands) {
  EXPECT_EQ(request(R"({"model": "llama2-7b", "cluster": "1x8xH100", "tp": 3})")["error"],
            "--tp 3 x --pp 1 does not divide the cluster's 8 GPUs");
  EXPECT_EQ(request(R"({"model": "llama2-7b", "cluster": "1x8xH100", "top": 3})")["error"],
            "--top sets how many layouts --search prints: add --search, or drop --top");
  const std::string unknown = request(R"({"model": "nope", "cluster": "1x8xH100"})")["error"];
  EXPECT_EQ(unknown.rfind("--model: unknown preset 'nope'", 0), 0u) << unknown;
  EXPECT_EQ(request(R"({"model": "llama2-7b"})")["error"],
            "--cluster is required: NODESxGPUSxTYPE (e.g. 8x8xH100) or a .json file");
  EXPECT_EQ(request(R"({"model": "llama2-7b", "cluster": "1x8xH100", "tp": "two"})")["error"],
            "--tp must be a whole number, got \"two\"");
  EXPECT_EQ(request(R"({"model": "llama2-7b", "cluster": "1x8xH100", "tp": 2.5})")["error"],
            "--tp must be a whole number, got 2.5");
  EXPECT_EQ(request("{not json")["error"], "the plan request is not valid JSON");
  EXPECT_EQ(request("[1, 2]")["error"],
            "a plan request is a JSON object of dtrain plan's flags, got [1,2]");
}

TEST(PlanRequest, ReadersThrowTheSameMessages) {
  EXPECT_THROW(
      {
        try {
          model_from_flags(json{{"layers", 4}});
        } catch (const Error& e) {
          EXPECT_STREQ(e.what(),
                       "give --model PRESET, or a custom shape with --layers, --hidden, --heads, "
                       "--vocab and --seq-length");
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace dtrain::plan
