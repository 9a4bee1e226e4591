// `dtrain bench clock`: the clock (clock/time_model.h) against published GPU runs and against
// the vTrain set of measured A100 iteration times. Korthikanti et al. 2022 Table 5's
// full-recompute column is what the four GPU efficiency parameters were fitted on (`--fit`
// refits them and prints the result); its other column and Narayanan et al. 2021 Table 1 are
// held out. vTrain's rows (a CSV directory given with --vtrain) are a validation set: nothing
// is fitted to them. Each prediction is printed beside the datasheet-only one (every efficiency
// 1, no kernel cost).
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/plan/planner.h"

namespace dtrain::bench {

struct ClockBenchConfig {
  std::string vtrain_dir;  // holds ground_truth_multi.csv and ground_truth_single.csv; "" none
  bool fit = false;        // refit the four parameters on the fit column and print them
  bool all_rows = false;   // print every single-node row (the multi-node rows always)
  // With fit: called as the grid search advances (it takes minutes), with a line to show.
  std::function<void(const std::string&)> progress;
};

struct PublishedRow {
  std::string source;  // "Korthikanti 2022 Table 5 (fit)", "... (held out)", "Narayanan ..."
  std::string label;   // "22B full recompute"
  plan::Layout layout;
  int gpus = 0;
  std::string unit;      // "s/iter"
  double published = 0;  // in `unit`
  double predicted = 0;  // with the frozen parameters
  double datasheet = 0;  // every efficiency 1
  // Narayanan's rows: the table's achieved TFLOP/s per GPU and the predicted one (Eq. 3's FLOPs
  // over the predicted iteration); 0 elsewhere.
  double published_tflops = 0, predicted_tflops = 0;
  double error() const { return predicted / published - 1; }
  double datasheet_error() const { return datasheet / published - 1; }
};

struct VtrainRow {
  std::string model;  // "3.6B" or "h2048 l24"
  int gpus = 0;
  int64_t global_batch = 0;
  plan::Layout layout;
  double measured_ms = 0;
  double predicted_ms = 0;  // 0 when the layout is not valid for the planner
  std::string invalid;      // why not
  double error() const { return predicted_ms / measured_ms - 1; }
};

struct VtrainGroup {
  std::string key;  // "175B on 512 GPUs, B 1536"
  int rows = 0;
  double rank_correlation = 0;  // Spearman's, predicted vs measured
  double pick_slowdown = 0;     // measured time of the predicted best / measured best - 1
};

struct ErrorSummary {
  int rows = 0;
  double mean_abs = 0, p90_abs = 0, max_abs = 0, mean_signed = 0;
};

struct VtrainSet {
  std::string name;  // "multi-node", "single-node"
  std::vector<VtrainRow> rows;
  std::vector<VtrainGroup> groups;
  ErrorSummary summary;
  double mean_pick_slowdown = 0, worst_pick_slowdown = 0, min_rank_correlation = 0;
};

struct FitResult {
  double gemm_efficiency = 0, kernel_overhead_us = 0, memory_efficiency = 0, link_efficiency = 0;
  double mean_abs_error = 0;
};

struct ClockBenchReport {
  ClockBenchConfig config;
  plan::Rates rates;  // the frozen A100 rates used
  std::vector<PublishedRow> published;
  ErrorSummary korthikanti_fit, korthikanti_held_out, narayanan;
  std::vector<FitResult> fit;  // with --fit: the best grid point
  std::vector<VtrainSet> vtrain;
};

ClockBenchReport run_clock_bench(const ClockBenchConfig& config);
void print_report(const ClockBenchReport& report, std::ostream& out);
nlohmann::json to_json(const ClockBenchReport& report);

// Pieces the tests reach: vTrain CSV rows (the byte-order mark skipped), Spearman's rank
// correlation, and the error summary.
std::vector<VtrainRow> read_vtrain_csv(const std::string& path, bool multi_node);
void predict_vtrain(std::vector<VtrainRow>* rows);
VtrainSet summarize_vtrain(std::string name, std::vector<VtrainRow> rows);
double spearman(const std::vector<double>& a, const std::vector<double>& b);
ErrorSummary summarize_errors(const std::vector<double>& errors);

}  // namespace dtrain::bench
