// run_clock_bench: the published rows, the parameter fit and the vTrain validation set.
#include "bench/clock_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <map>
#include <ostream>
#include <sstream>

#include "dtrain/core/check.h"
#include "dtrain/machine/format.h"

namespace dtrain::bench {
namespace {

// Korthikanti et al. 2022 Table 3 (shapes and layouts; s = 2048, V = 51200, data parallel
// size 1; the 175B and 530B runs interleave 3 chunks per stage) and Table 5 (seconds per
// iteration: full recompute; sequence parallelism with selective recompute).
struct KorthikantiRow {
  const char* label;
  int64_t heads, hidden, layers;
  int tp, pp, vp, gpus;
  int64_t global_batch, micro_batch;
  double full_s, present_s;
};
constexpr KorthikantiRow kKorthikanti[] = {
    {"22B", 64, 6144, 48, 8, 1, 1, 8, 4, 4, 1.42, 1.10},
    {"175B", 96, 12288, 96, 8, 8, 3, 64, 64, 1, 18.13, 13.75},
    {"530B", 128, 20480, 105, 8, 35, 3, 280, 280, 1, 49.05, 37.83},
    {"1T", 160, 25600, 128, 8, 64, 1, 512, 512, 1, 94.42, 71.49},
};

plan::ModelShape gpt_shape(std::string name, int64_t heads, int64_t hidden, int64_t layers,
                           int64_t seq, int64_t vocab) {
  plan::ModelShape m;
  m.name = std::move(name);
  m.family = plan::ModelFamily::gpt;
  m.heads = heads;
  m.hidden = hidden;
  m.layers = layers;
  m.seq = seq;
  m.vocab = vocab;
  return m;
}

plan::Cluster a100_cluster(int gpus, const plan::Rates& rates) {
  plan::Cluster c = gpus >= 8 ? plan::parse_cluster(std::to_string(gpus / 8) + "x8xA100")
                              : plan::parse_cluster("1x" + std::to_string(gpus) + "xA100");
  c.gpu.rates = rates;
  return c;
}

plan::PlanInput megatron_input(const plan::ModelShape& m, const plan::Cluster& c,
                               int64_t global_batch) {
  plan::PlanInput in;
  in.model = m;
  in.cluster = c;
  in.training.global_batch = global_batch;
  in.training.activation_bytes = 2;
  in.training.activation_count = plan::ActivationCount::paper;
  return in;
}

struct PublishedCase {
  std::string source, label;
  plan::PlanInput input;
  plan::Layout layout;
  std::string unit;
  double published = 0;
  double published_tflops = 0;  // Narayanan's rows: the table's per-GPU figure
  double flops = 0;             // Narayanan's rows: Eq. 3's FLOPs per iteration
  bool fit = false;
};

// Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
// Megatron-LM" (https://arxiv.org/abs/2104.04473), §5.1 Table 1: the weak-scaling runs on Selene
// (DGX A100 80GB, 8 x 200 Gb/s HDR per node), s = 2048, V = 51200, mixed precision, end-to-end
// throughput (data loading, optimizer and logging included). Every row as the table prints it;
// read from a text transcription of the paper (found by code search, its repository unnamed)
// and checked by narayanan_check below against the paper's own arithmetic, so a mistyped figure
// stops the benchmark: the parameter count by Eq. 2, aggregate = per-GPU x GPUs, % of peak =
// per-GPU / 312, and the layout's divisibility. Heads, hidden size, layers and batch must equal
// the preset of the same name (cost/model_presets.cc, from the same table).
struct NarayananRow {
  const char* preset;
  const char* label;
  double params_billion;  // the table's count, Eq. 2
  int64_t heads, hidden, layers;
  int tp, pp, gpus;
  int64_t batch;
  double tflops_per_gpu;    // achieved teraFLOP/s per GPU (rounded to 1)
  double percent_of_peak;   // of 312 TFLOP/s (rounded to 1)
  double aggregate_pflops;  // achieved aggregate petaFLOP/s (to 0.1: the most digits)
};
constexpr NarayananRow kNarayanan[] = {
    {"megatron-1.7b", "1.7B", 1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44, 4.4},
    {"megatron-3.6b", "3.6B", 3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44, 8.8},
    {"megatron-7.5b", "7.5B", 7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46, 18.2},
    {"megatron-18.4b", "18.4B", 18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43, 34.6},
    {"megatron-39.1b", "39.1B", 39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44, 70.8},
    {"megatron-76.1b", "76.1B", 76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45, 143.8},
    {"megatron-145.6b", "145.6B", 145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47, 227.1},
    {"megatron-310.1b", "310.1B", 310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50, 297.4},
    {"megatron-529.6b", "529.6B", 529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52, 410.2},
    {"megatron-1t", "1T", 1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52, 502.0},
};

// The table's figures against each other and the preset; throws naming the row and figure.
void narayanan_check(const NarayananRow& r, const plan::ModelShape& m) {
  DTRAIN_CHECK(m.heads == r.heads && m.hidden == r.hidden && m.layers == r.layers &&
                   m.seq == 2048 && m.vocab == 51200 && m.default_global_batch == r.batch,
               "Narayanan T1 ", r.label, ": preset ", r.preset, " differs from the table");
  const double params = static_cast<double>(plan::shape_param_count(m)) * 1e-9;
  DTRAIN_CHECK(std::fabs(params - r.params_billion) < 0.05, "Narayanan T1 ", r.label,
               ": Eq. 2 gives ", params, "B parameters");
  // The per-GPU figure is rounded to 1 TFLOP/s: the aggregate may differ by 0.5 x GPUs TFLOP/s.
  const double gpus = r.gpus;
  DTRAIN_CHECK(
      std::fabs(r.tflops_per_gpu * gpus * 1e-3 - r.aggregate_pflops) <= 0.5 * gpus * 1e-3 + 0.05,
      "Narayanan T1 ", r.label, ": aggregate ", r.aggregate_pflops,
      " PFLOP/s is not per-GPU x GPUs");
  DTRAIN_CHECK(std::fabs(100 * r.tflops_per_gpu / 312 - r.percent_of_peak) <= 0.5 + 50.0 / 312,
               "Narayanan T1 ", r.label, ": ", r.percent_of_peak, "% is not ", r.tflops_per_gpu,
               " / 312");
  DTRAIN_CHECK(r.gpus % (r.tp * r.pp) == 0 && r.batch % (r.gpus / (r.tp * r.pp)) == 0,
               "Narayanan T1 ", r.label, ": layout does not divide");
}

// One Table 1 row as an iteration time: Eq. 3's FLOPs (full recompute) over the aggregate
// throughput, the figure with the most digits (the paper computed its throughput from the same
// Eq. 3, so this is its measured iteration time up to the rounding of the aggregate). The
// layout, as §5.1 states it: tensor, pipeline and data parallelism "picked using heuristics
// described in §3", the interleaved schedule and the scatter/gather optimisation
// (pp_bytes_per_microbatch's b s h / t). What the table does not give, assumed
// (docs/clock-validation.md):
// - the micro-batch by §3.4's rule, the b that minimises (B/(d b) + p - 1)(t_f(b) + t_b(b))
//   among those that fit in 80 GB, with the clock's own times as t_f and t_b (the whole
//   predicted step, communication included): a choice made on the prediction, never on the
//   published time;
// - the fewest chunks per stage above 1 that divide its layers (2, or 3 where a stage holds 15
//   or 3 layers): the paper names no count;
// - full recompute (Eq. 3 counts it), fp16 gradients all-reduced once after the backward
//   (Megatron's data parallelism of 2021: no buckets, no overlap).
PublishedCase narayanan_case(const NarayananRow& r, const plan::Rates& rates) {
  const plan::ModelShape& m = plan::model_preset(r.preset);
  narayanan_check(r, m);
  PublishedCase pc;
  pc.source = "Narayanan 2021 T1 (held out)";
  pc.label = r.label;
  pc.input = megatron_input(m, a100_cluster(r.gpus, rates), r.batch);
  pc.input.training.bucket_bytes = 1e18;
  pc.layout.tp = r.tp;
  pc.layout.pp = r.pp;
  pc.layout.dp = r.gpus / (r.tp * r.pp);
  if (r.pp > 1) {
    const int64_t per_stage = r.layers / r.pp;
    int vp = 2;
    while (per_stage % vp != 0) ++vp;
    pc.layout.vp = vp;
    pc.layout.schedule = plan::ScheduleKind::interleaved;
  }
  pc.layout.recompute = plan::Recompute::full;
  const int64_t per_replica = r.batch / pc.layout.dp;
  double best = 0;
  for (int64_t b = 1; b <= per_replica; ++b) {
    plan::Layout l = pc.layout;
    l.micro_batch = b;
    if (per_replica % b != 0 || !plan::layout_error(pc.input, l).empty()) continue;
    const plan::Plan p = plan::evaluate(pc.input, l);
    if (!p.memory.fits() || (best > 0 && p.time.step_s >= best)) continue;
    best = p.time.step_s;
    pc.layout.micro_batch = b;
  }
  DTRAIN_CHECK(best > 0, "Narayanan T1 ", r.label, ": no micro-batch fits");
  pc.unit = "s/iter";
  const double flops = plan::training_flops(m, static_cast<double>(r.batch), plan::Recompute::full,
                                            plan::FlopsConvention::narayanan)
                           .hardware();
  pc.flops = flops;
  pc.published = flops / (r.aggregate_pflops * 1e15);
  pc.published_tflops = r.tflops_per_gpu;
  return pc;
}

std::vector<PublishedCase> published_cases(const plan::Rates& rates) {
  std::vector<PublishedCase> cases;
  for (bool full : {true, false}) {
    for (const KorthikantiRow& r : kKorthikanti) {
      PublishedCase pc;
      pc.source = full ? "Korthikanti 2022 T5 full recompute (fit)"
                       : "Korthikanti 2022 T5 SP + selective (held out)";
      pc.label = r.label;
      pc.input = megatron_input(gpt_shape(r.label, r.heads, r.hidden, r.layers, 2048, 51200),
                                a100_cluster(r.gpus, rates), r.global_batch);
      pc.layout.tp = r.tp;
      pc.layout.pp = r.pp;
      pc.layout.vp = r.vp;
      pc.layout.schedule =
          r.vp > 1 ? plan::ScheduleKind::interleaved : plan::ScheduleKind::one_f_one_b;
      pc.layout.dp = r.gpus / (r.tp * r.pp);
      pc.layout.micro_batch = r.micro_batch;
      pc.layout.recompute = full ? plan::Recompute::full : plan::Recompute::selective;
      pc.layout.sequence_parallel = !full;
      pc.unit = "s/iter";
      pc.published = full ? r.full_s : r.present_s;
      pc.fit = full;
      cases.push_back(pc);
    }
  }
  for (const NarayananRow& r : kNarayanan) cases.push_back(narayanan_case(r, rates));
  return cases;
}

double predict(const PublishedCase& pc, const plan::Rates& rates) {
  plan::PlanInput in = pc.input;
  in.cluster.gpu.rates = rates;
  const plan::Plan p = plan::evaluate(in, pc.layout);
  return p.time.step_s;
}

plan::Rates a100_rates() {
  return plan::parse_cluster("1x8xA100").gpu.rates;
}

std::string fmt_pct(double x) {
  std::ostringstream o;
  o << std::showpos << std::fixed << std::setprecision(1) << 100 * x << "%";
  return o.str();
}

std::string layout_text(const plan::Layout& l) {
  std::ostringstream o;
  o << "tp" << l.tp << " pp" << l.pp << " dp" << l.dp << " b" << l.micro_batch;
  if (l.vp > 1) o << " v" << l.vp;
  return o.str();
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  return out;
}

}  // namespace

ErrorSummary summarize_errors(const std::vector<double>& errors) {
  ErrorSummary s;
  s.rows = static_cast<int>(errors.size());
  if (errors.empty()) return s;
  std::vector<double> abs;
  for (double e : errors) {
    abs.push_back(std::fabs(e));
    s.mean_abs += std::fabs(e);
    s.mean_signed += e;
  }
  s.mean_abs /= s.rows;
  s.mean_signed /= s.rows;
  std::sort(abs.begin(), abs.end());
  // The 90th percentile: the smallest value at least 90% of the rows do not exceed.
  const size_t k = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(abs.size()))) - 1;
  s.p90_abs = abs[std::min(k, abs.size() - 1)];
  s.max_abs = abs.back();
  return s;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  DTRAIN_CHECK(a.size() == b.size(), "spearman: sizes differ");
  const size_t n = a.size();
  if (n < 2) return 1;
  // Ranks with ties averaged, then Pearson's correlation of the ranks.
  auto ranks = [n](const std::vector<double>& v) {
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return v[x] < v[y]; });
    std::vector<double> r(n);
    for (size_t i = 0; i < n;) {
      size_t j = i;
      while (j + 1 < n && v[order[j + 1]] == v[order[i]]) ++j;
      for (size_t k = i; k <= j; ++k) r[order[k]] = (static_cast<double>(i + j) / 2) + 1;
      i = j + 1;
    }
    return r;
  };
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  double ma = 0, mb = 0;
  for (size_t i = 0; i < n; ++i) ma += ra[i], mb += rb[i];
  ma /= static_cast<double>(n);
  mb /= static_cast<double>(n);
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < n; ++i) {
    cov += (ra[i] - ma) * (rb[i] - mb);
    va += (ra[i] - ma) * (ra[i] - ma);
    vb += (rb[i] - mb) * (rb[i] - mb);
  }
  return va > 0 && vb > 0 ? cov / std::sqrt(va * vb) : 1;
}

std::vector<VtrainRow> read_vtrain_csv(const std::string& path, bool multi_node) {
  std::ifstream in(path);
  DTRAIN_CHECK(in.good(), "--vtrain: cannot read '", path, "'");
  std::string line;
  std::getline(in, line);  // the header
  const size_t columns = multi_node ? 12 : 11;
  std::vector<VtrainRow> rows;
  int line_number = 1;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::vector<std::string> c = split_csv(line);
    DTRAIN_CHECK(c.size() == columns, "--vtrain: '", path, "' line ", line_number, " has ",
                 c.size(), " columns, expected ", columns);
    const size_t o = multi_node ? 1 : 0;
    VtrainRow r;
    try {
      r.gpus = std::stoi(c[o + 0]);
      r.global_batch = std::stoll(c[o + 1]);
      r.layout.micro_batch = std::stoll(c[o + 2]);
      const int64_t hidden = std::stoll(c[o + 3]), heads = std::stoll(c[o + 4]);
      const int64_t layers = std::stoll(c[o + 5]), seq = std::stoll(c[o + 6]);
      r.layout.tp = std::stoi(c[o + 7]);
      r.layout.dp = std::stoi(c[o + 8]);
      r.layout.pp = std::stoi(c[o + 9]);
      r.measured_ms = std::stod(c[o + 10]);
      r.model = multi_node ? c[0] + "B" : "h" + c[o + 3] + " l" + c[o + 5];
      // Stash the shape in the label-free fields the prediction reads back.
      r.invalid = std::to_string(hidden) + " " + std::to_string(heads) + " " +
                  std::to_string(layers) + " " + std::to_string(seq);
    } catch (const std::exception&) {
      throw Error(
          str("--vtrain: '", path, "' line ", line_number, " has a field that is not a number"));
    }
    DTRAIN_CHECK(
        r.gpus > 0 && r.measured_ms > 0 && r.layout.tp * r.layout.dp * r.layout.pp == r.gpus,
        "--vtrain: '", path, "' line ", line_number,
        ": tensor x data x pipeline parallelism must equal # GPUs, time positive");
    r.layout.recompute = plan::Recompute::full;
    rows.push_back(r);
  }
  return rows;
}

void predict_vtrain(std::vector<VtrainRow>* rows) {
  const plan::Rates rates = a100_rates();
  for (VtrainRow& r : *rows) {
    std::istringstream shape(r.invalid);
    int64_t hidden = 0, heads = 0, layers = 0, seq = 0;
    shape >> hidden >> heads >> layers >> seq;
    r.invalid.clear();
    // GPT-2's vocabulary, padded by Megatron to a multiple of 128 x TP.
    const int64_t pad = 128 * r.layout.tp;
    const int64_t vocab = (50257 + pad - 1) / pad * pad;
    plan::Cluster c = a100_cluster(r.gpus, rates);
    // vTrain's README: 4 x 200 Gb/s HDR per node of 8 GPUs: 100 GB/s per node, 12.5 per GPU.
    c.inter_node.bandwidth_bytes_per_s = 100e9 / 8;
    plan::PlanInput in =
        megatron_input(gpt_shape(r.model, heads, hidden, layers, seq, vocab), c, r.global_batch);
    // One fp16 gradient all-reduce after backward, no buckets.
    in.training.bucket_bytes = 1e18;
    const std::string error = plan::layout_error(in, r.layout);
    if (!error.empty()) {
      r.invalid = error;
      continue;
    }
    r.predicted_ms = plan::evaluate(in, r.layout).time.step_s * 1e3;
  }
}

VtrainSet summarize_vtrain(std::string name, std::vector<VtrainRow> rows) {
  VtrainSet set;
  set.name = std::move(name);
  std::vector<double> errors;
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].invalid.empty()) continue;
    errors.push_back(rows[i].error());
    groups[str(rows[i].model, " on ", rows[i].gpus, " GPUs, B ", rows[i].global_batch)].push_back(
        i);
  }
  set.summary = summarize_errors(errors);
  set.min_rank_correlation = 1;
  for (const auto& [key, index] : groups) {
    VtrainGroup g;
    g.key = key;
    g.rows = static_cast<int>(index.size());
    std::vector<double> predicted, measured;
    for (size_t i : index) {
      predicted.push_back(rows[i].predicted_ms);
      measured.push_back(rows[i].measured_ms);
    }
    g.rank_correlation = spearman(predicted, measured);
    const size_t pick = static_cast<size_t>(std::min_element(predicted.begin(), predicted.end()) -
                                            predicted.begin());
    g.pick_slowdown = measured[pick] / *std::min_element(measured.begin(), measured.end()) - 1;
    set.mean_pick_slowdown += g.pick_slowdown;
    set.worst_pick_slowdown = std::max(set.worst_pick_slowdown, g.pick_slowdown);
    if (g.rows >= 2)
      set.min_rank_correlation = std::min(set.min_rank_correlation, g.rank_correlation);
    set.groups.push_back(g);
  }
  if (!set.groups.empty()) set.mean_pick_slowdown /= static_cast<double>(set.groups.size());
  set.rows = std::move(rows);
  return set;
}

ClockBenchReport run_clock_bench(const ClockBenchConfig& config) {
  ClockBenchReport r;
  r.config = config;
  r.rates = a100_rates();
  const std::vector<PublishedCase> cases = published_cases(r.rates);
  std::vector<double> fit_err, held_err, nar_err;
  for (const PublishedCase& pc : cases) {
    PublishedRow row;
    row.source = pc.source;
    row.label = pc.label;
    row.layout = pc.layout;
    row.gpus = pc.input.cluster.world();
    row.unit = pc.unit;
    row.published = pc.published;
    row.predicted = predict(pc, r.rates);
    row.datasheet = predict(pc, plan::datasheet_only(r.rates));
    if (pc.published_tflops > 0) {
      row.published_tflops = pc.published_tflops;
      row.predicted_tflops = pc.flops / (row.predicted * row.gpus) * 1e-12;
    }
    (pc.fit ? fit_err : pc.published_tflops > 0 ? nar_err : held_err).push_back(row.error());
    r.published.push_back(row);
  }
  r.korthikanti_fit = summarize_errors(fit_err);
  r.korthikanti_held_out = summarize_errors(held_err);
  r.narayanan = summarize_errors(nar_err);
  if (config.fit) {
    // Grid search on the fit column only, least mean squared relative error, within what each
    // parameter can physically be: products 50-100% of peak, 0-50 us per kernel call, memory
    // kernels and links 30-100% of their datasheet bandwidth.
    FitResult best;
    double best_loss = 1e300;
    std::vector<const PublishedCase*> fit_cases;
    for (const PublishedCase& pc : cases) {
      if (pc.fit) fit_cases.push_back(&pc);
    }
    constexpr int kGemmSteps = 51;  // gemm_efficiency 0.50, 0.51, ..., 1.00
    int gemm_step = 0;
    for (double g = 0.50; g <= 1.0001; g += 0.01) {
      if (config.progress) {
        char line[160];
        std::snprintf(line, sizeof line, "gemm_efficiency %.2f (%d of %d; 26 x 8 x 15 points each)",
                      g, ++gemm_step, kGemmSteps);
        std::string text = line;
        if (best_loss < 1e300) {
          std::snprintf(line, sizeof line, ", best so far: mean |error| %.1f%%",
                        100 * best.mean_abs_error);
          text += line;
        }
        config.progress(text);
      }
      for (double k = 0; k <= 50.0001; k += 2) {
        for (double mem = 0.3; mem <= 1.0001; mem += 0.1) {
          for (double link = 0.3; link <= 1.0001; link += 0.05) {
            plan::Rates rates = r.rates;
            rates.gemm_efficiency = g;
            rates.kernel_overhead_us = k;
            rates.memory_efficiency = mem;
            rates.link_efficiency = link;
            double loss = 0, abs = 0;
            for (const PublishedCase* pc : fit_cases) {
              const double e = predict(*pc, rates) / pc->published - 1;
              loss += e * e;
              abs += std::fabs(e);
            }
            if (loss < best_loss) {
              best_loss = loss;
              best = {g, k, mem, link, abs / static_cast<double>(fit_cases.size())};
            }
          }
        }
      }
    }
    r.fit.push_back(best);
  }
  if (!config.vtrain_dir.empty()) {
    for (bool multi : {true, false}) {
      std::vector<VtrainRow> rows = read_vtrain_csv(
          config.vtrain_dir + (multi ? "/ground_truth_multi.csv" : "/ground_truth_single.csv"),
          multi);
      predict_vtrain(&rows);
      r.vtrain.push_back(summarize_vtrain(multi ? "multi-node" : "single-node", std::move(rows)));
    }
  }
  return r;
}

void print_report(const ClockBenchReport& r, std::ostream& out) {
  const plan::Rates& k = r.rates;
  out << "clock: A100 rates: gemm_efficiency " << k.gemm_efficiency << ", kernel_overhead_us "
      << k.kernel_overhead_us << ", memory_efficiency " << k.memory_efficiency
      << ", link_efficiency " << k.link_efficiency << " (fitted on Korthikanti 2022 Table 5, full "
      << "recompute)\n\n";
  out << std::left << std::setw(46) << "source" << std::setw(8) << "model" << std::setw(22)
      << "layout" << std::right << std::setw(12) << "published" << std::setw(11) << "predicted"
      << std::setw(9) << "error" << std::setw(11) << "datasheet" << std::setw(9) << "error"
      << "  unit\n";
  for (const PublishedRow& p : r.published) {
    out << std::left << std::setw(46) << p.source << std::setw(8) << p.label << std::setw(22)
        << layout_text(p.layout) << std::right << std::fixed << std::setprecision(2)
        << std::setw(12) << p.published << std::setw(11) << p.predicted << std::setw(9)
        << fmt_pct(p.error()) << std::setw(11) << p.datasheet << std::setw(9)
        << fmt_pct(p.datasheet_error()) << "  " << p.unit;
    if (p.published_tflops > 0) {
      out << " (TFLOP/s/GPU " << std::setprecision(0) << p.published_tflops << " published, "
          << std::setprecision(1) << p.predicted_tflops << " predicted)";
    }
    out << "\n";
  }
  auto summary = [&out](const char* what, const ErrorSummary& s) {
    out << what << ": " << s.rows << " rows, mean |error| " << std::fixed << std::setprecision(1)
        << 100 * s.mean_abs << "%, p90 " << 100 * s.p90_abs << "%, worst " << 100 * s.max_abs
        << "%, mean signed " << fmt_pct(s.mean_signed) << "\n";
  };
  out << "\n";
  summary("Korthikanti full recompute (fit)", r.korthikanti_fit);
  summary("Korthikanti SP + selective (held out)", r.korthikanti_held_out);
  summary("Narayanan Table 1 (held out)", r.narayanan);
  for (const FitResult& f : r.fit) {
    out << std::setprecision(3) << "\nfit on the full-recompute column: gemm_efficiency "
        << f.gemm_efficiency << ", kernel_overhead_us " << f.kernel_overhead_us
        << ", memory_efficiency " << f.memory_efficiency << ", link_efficiency "
        << f.link_efficiency << "; mean |error| " << 100 * f.mean_abs_error << "%\n";
  }
  for (const VtrainSet& set : r.vtrain) {
    out << "\nvTrain " << set.name << " (validation only, nothing fitted)\n";
    if (set.name == "multi-node" || r.config.all_rows) {
      out << std::left << std::setw(14) << "model" << std::setw(6) << "GPUs" << std::setw(7) << "B"
          << std::setw(22) << "layout" << std::right << std::setw(12) << "measured ms"
          << std::setw(13) << "predicted ms" << std::setw(9) << "error\n";
      for (const VtrainRow& v : set.rows) {
        out << std::left << std::setw(14) << v.model << std::setw(6) << v.gpus << std::setw(7)
            << v.global_batch << std::setw(22) << layout_text(v.layout) << std::right << std::fixed
            << std::setprecision(1) << std::setw(12) << v.measured_ms;
        if (v.invalid.empty()) {
          out << std::setw(13) << v.predicted_ms << std::setw(9) << fmt_pct(v.error()) << "\n";
        } else {
          out << "  not a valid layout: " << v.invalid << "\n";
        }
      }
    }
    summary(set.name.c_str(), set.summary);
    out << "groups: " << set.groups.size() << "; rank correlation min " << std::setprecision(2)
        << set.min_rank_correlation << "; planner's pick slower than the measured best by "
        << std::setprecision(1) << 100 * set.mean_pick_slowdown << "% mean, "
        << 100 * set.worst_pick_slowdown << "% worst\n";
    if (set.name == "multi-node" || r.config.all_rows) {
      for (const VtrainGroup& g : set.groups) {
        out << "  " << std::left << std::setw(34) << g.key << std::right << std::setw(4) << g.rows
            << " rows  rank correlation " << std::setprecision(2) << std::setw(5)
            << g.rank_correlation << "  pick +" << std::setprecision(1) << 100 * g.pick_slowdown
            << "%\n";
      }
    }
  }
}

nlohmann::json to_json(const ClockBenchReport& r) {
  using nlohmann::json;
  auto summary = [](const ErrorSummary& s) {
    return json{{"rows", s.rows},
                {"mean_abs_error", s.mean_abs},
                {"p90_abs_error", s.p90_abs},
                {"max_abs_error", s.max_abs},
                {"mean_signed_error", s.mean_signed}};
  };
  json j;
  j["rates"] = plan::to_json(r.rates);
  for (const PublishedRow& p : r.published) {
    j["published"].push_back({{"source", p.source},
                              {"model", p.label},
                              {"layout", layout_text(p.layout)},
                              {"gpus", p.gpus},
                              {"unit", p.unit},
                              {"published", p.published},
                              {"predicted", p.predicted},
                              {"error", p.error()},
                              {"datasheet_only", p.datasheet},
                              {"datasheet_only_error", p.datasheet_error()}});
    if (p.published_tflops > 0) {
      j["published"].back()["published_tflops_per_gpu"] = p.published_tflops;
      j["published"].back()["predicted_tflops_per_gpu"] = p.predicted_tflops;
    }
  }
  j["korthikanti_fit"] = summary(r.korthikanti_fit);
  j["korthikanti_held_out"] = summary(r.korthikanti_held_out);
  j["narayanan"] = summary(r.narayanan);
  for (const FitResult& f : r.fit) {
    j["fit"] = {{"gemm_efficiency", f.gemm_efficiency},
                {"kernel_overhead_us", f.kernel_overhead_us},
                {"memory_efficiency", f.memory_efficiency},
                {"link_efficiency", f.link_efficiency},
                {"mean_abs_error", f.mean_abs_error}};
  }
  for (const VtrainSet& set : r.vtrain) {
    json s = summary(set.summary);
    s["name"] = set.name;
    s["mean_pick_slowdown"] = set.mean_pick_slowdown;
    s["worst_pick_slowdown"] = set.worst_pick_slowdown;
    s["min_rank_correlation"] = set.min_rank_correlation;
    for (const VtrainGroup& g : set.groups) {
      s["groups"].push_back({{"group", g.key},
                             {"rows", g.rows},
                             {"rank_correlation", g.rank_correlation},
                             {"pick_slowdown", g.pick_slowdown}});
    }
    for (const VtrainRow& v : set.rows) {
      json row = {{"model", v.model},
                  {"gpus", v.gpus},
                  {"global_batch", v.global_batch},
                  {"layout", layout_text(v.layout)},
                  {"measured_ms", v.measured_ms}};
      if (v.invalid.empty()) {
        row["predicted_ms"] = v.predicted_ms;
        row["error"] = v.error();
      } else {
        row["invalid"] = v.invalid;
      }
      s["per_row"].push_back(row);
    }
    j["vtrain"].push_back(s);
  }
  return j;
}

}  // namespace dtrain::bench
