// Cluster presets and parsing: "NxGxTYPE" strings, the JSON round trip, and file errors that
// name the file and the field.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dtrain/core/check.h"
#include "dtrain/machine/hardware.h"
#include "error_text.h"

namespace dtrain::plan {
namespace {

using dtrain::test_support::error_of;

TEST(Hardware, ParsesPresetStrings) {
  const Cluster c = parse_cluster("8x8xH100");
  EXPECT_EQ(c.nodes, 8);
  EXPECT_EQ(c.gpus_per_node, 8);
  EXPECT_EQ(c.world(), 64);
  EXPECT_EQ(c.gpu.peak_flops, 989e12);
  EXPECT_EQ(c.intra_node.bandwidth_bytes_per_s, 450e9);  // 900 GB/s counting both directions
  EXPECT_EQ(c.inter_node.bandwidth_bytes_per_s, 50e9);   // 400 Gb/s NDR per GPU
  const Cluster a = parse_cluster("2xA100-80GB");
  EXPECT_EQ(a.nodes, 2);
  EXPECT_EQ(a.gpus_per_node, 8);
  EXPECT_EQ(a.gpu.peak_flops, 312e12);
  EXPECT_EQ(a.intra_node.bandwidth_bytes_per_s, 300e9);  // 600 GB/s counting both directions
  EXPECT_EQ(a.inter_node.bandwidth_bytes_per_s, 25e9);   // 200 Gb/s HDR per GPU
  EXPECT_EQ(parse_cluster("4x2xa100").world(), 8);
  // The H200: the H100's compute and links, 141 GB of HBM3e at 4.8 TB/s (SXM datasheet).
  const Cluster h = parse_cluster("1x8xH200");
  EXPECT_EQ(h.gpu.peak_flops, 989e12);
  EXPECT_EQ(h.gpu.memory_bytes, 141e9);
  EXPECT_EQ(h.gpu.rates.memory_bytes_per_s, 4.8e12);
  EXPECT_EQ(h.gpu.rates.gemm_efficiency, c.gpu.rates.gemm_efficiency);  // one frozen fit
  EXPECT_EQ(h.intra_node.bandwidth_bytes_per_s, c.intra_node.bandwidth_bytes_per_s);
  EXPECT_EQ(parse_cluster("2xdgx-h200").world(), 16);
}

TEST(Hardware, BadStringsNameTheFlag) {
  for (const char* bad : {"", "8x8", "0x8xH100", "8x8xB300", "axbxc", "-1x8xH100"}) {
    const std::string e = error_of([&] { parse_cluster(bad); });
    EXPECT_NE(e.find("--cluster"), std::string::npos) << bad << ": " << e;
  }
  EXPECT_NE(error_of([] { parse_cluster("8x8xB300"); }).find("unknown node type 'B300'"),
            std::string::npos);
}

TEST(Hardware, JsonRoundTrip) {
  const Cluster c = parse_cluster("3x4xH100");
  const Cluster back = cluster_from_json(to_json(c), "memory");
  EXPECT_EQ(back.name, c.name);
  EXPECT_EQ(back.nodes, 3);
  EXPECT_EQ(back.gpus_per_node, 4);
  EXPECT_EQ(back.gpu.memory_bytes, c.gpu.memory_bytes);
  EXPECT_EQ(back.gpu.compute_efficiency, c.gpu.compute_efficiency);
  EXPECT_EQ(back.intra_node.latency_us, c.intra_node.latency_us);
  EXPECT_EQ(back.inter_node.bandwidth_bytes_per_s, c.inter_node.bandwidth_bytes_per_s);
}

TEST(Hardware, PresetInFileFillsTheRest) {
  const nlohmann::json j = {
      {"preset", "A100"}, {"nodes", 2}, {"inter_node", {{"bandwidth_bytes_per_s", 12.5e9}}}};
  const Cluster c = cluster_from_json(j, "calibrated.json");
  EXPECT_EQ(c.world(), 16);
  EXPECT_EQ(c.inter_node.bandwidth_bytes_per_s, 12.5e9);
  EXPECT_EQ(c.inter_node.latency_us, parse_cluster("1xA100").inter_node.latency_us);
}

TEST(Hardware, FileErrorsNameFileAndField) {
  const std::string path = testing::TempDir() + "dtrain_cluster_test.json";
  auto write = [&](const std::string& text) {
    std::ofstream out(path);
    out << text;
  };
  write("{ not json");
  std::string e = error_of([&] { read_cluster_file(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;

  nlohmann::json j = to_json(parse_cluster("1x8xH100"));
  j["gpu"].erase("peak_flops");
  write(j.dump());
  e = error_of([&] { read_cluster_file(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("gpu.peak_flops"), std::string::npos) << e;

  j = to_json(parse_cluster("1x8xH100"));
  j["inter_node"]["bandwidth_bytes_per_s"] = -1;
  write(j.dump());
  e = error_of([&] { read_cluster_file(path); });
  EXPECT_NE(e.find("inter_node.bandwidth_bytes_per_s"), std::string::npos) << e;
  EXPECT_NE(e.find("positive"), std::string::npos) << e;

  j = to_json(parse_cluster("1x8xH100"));
  j["nodes"] = "eight";
  write(j.dump());
  EXPECT_NE(error_of([&] { read_cluster_file(path); }).find("'nodes' must be a number"),
            std::string::npos);

  j = to_json(parse_cluster("2x8xH100"));
  write(j.dump());
  EXPECT_EQ(parse_cluster(path).world(), 16);  // a .json path goes to the reader
  std::remove(path.c_str());

  e = error_of([&] { read_cluster_file(path); });
  EXPECT_NE(e.find("--cluster " + path + ": no such file"), std::string::npos) << e;

  // A directory named like a cluster file is said to be one (not a C library read error).
  const std::string dir = ::testing::TempDir() + "dtrain_cluster_dir.json";
  std::filesystem::create_directory(dir);
  e = error_of([&] { read_cluster_file(dir); });
  EXPECT_NE(e.find("is a directory"), std::string::npos) << e;
  std::filesystem::remove(dir);
}

// A cluster file's figure in the wrong unit is refused with the field and its unit: the
// issue's `"peak_flops": 312` (meant as 312 TFLOP/s, the A100's dense bf16 peak, NVIDIA A100
// datasheet) used to print 0 TFLOP/s and 6e14 days.
TEST(Hardware, ImplausibleFileFiguresNameTheFieldAndUnit) {
  const std::string path = testing::TempDir() + "dtrain_cluster_units.json";
  const std::pair<const char*, std::function<void(nlohmann::json&)>> cases[] = {
      {"gpu.peak_flops", [](nlohmann::json& j) { j["gpu"]["peak_flops"] = 312; }},
      {"gpu.memory_bytes", [](nlohmann::json& j) { j["gpu"]["memory_bytes"] = 80; }},
      {"intra_node.bandwidth_bytes_per_s",
       [](nlohmann::json& j) { j["intra_node"]["bandwidth_bytes_per_s"] = 450; }},
      {"inter_node.latency_us", [](nlohmann::json& j) { j["inter_node"]["latency_us"] = 1e9; }},
  };
  for (const auto& [field, edit] : cases) {
    nlohmann::json j = to_json(parse_cluster("1x8xA100"));
    edit(j);
    {
      std::ofstream out(path);
      out << j.dump();
    }
    const std::string e = error_of([&] { read_cluster_file(path); });
    EXPECT_NE(e.find(std::string("field '") + field + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("outside"), std::string::npos) << e;
  }
  // The presets themselves are plausible: every one reads back from its own JSON.
  for (const char* spec : {"1x8xA100", "2x8xH100"}) {
    std::ofstream(path) << to_json(parse_cluster(spec)).dump();
    EXPECT_EQ(read_cluster_file(path).world(), parse_cluster(spec).world());
  }
  std::remove(path.c_str());
}

// Found by fuzz/cluster_fuzz: a count beyond int's range was cast to int (undefined behaviour)
// before the integer check; now it is an error like any other non-integer.
TEST(Hardware, HugeOrFractionalNodeCountsAreRejected) {
  for (const double nodes : {1e43, 3e9, 2.5}) {
    nlohmann::json j = to_json(parse_cluster("1x8xH100"));
    j["nodes"] = nodes;
    EXPECT_NE(error_of([&] { cluster_from_json(j, "fuzz.json"); }).find("must be integers"),
              std::string::npos)
        << nodes;
  }
}

TEST(Hardware, ValidateNamesTheField) {
  Cluster c = parse_cluster("1x8xH100");
  c.gpu.memory_bytes = 0;
  EXPECT_NE(error_of([&] { validate(c); }).find("--gpu-memory"), std::string::npos);
  c = parse_cluster("1x8xH100");
  c.gpu.compute_efficiency = 1.5;
  EXPECT_NE(error_of([&] { validate(c); }).find("--compute-efficiency"), std::string::npos);
}

}  // namespace
}  // namespace dtrain::plan
