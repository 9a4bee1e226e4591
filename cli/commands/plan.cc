// `dtrain plan`: parses the model, training, cluster and layout flags into a plan::PlanInput and
// a plan::Layout, then prints plan::evaluate (one layout) or plan::search (--search) as a table
// or, with --json, as JSON. All checks and figures live in src/dtrain/plan.
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "build_info.h"
#include "command_registry.h"
#include "dtrain/clock/engine_clock.h"
#include "dtrain/core/check.h"
#include "dtrain/core/units.h"
#include "dtrain/cost/offload.h"
#include "dtrain/cost/pipeline_stages.h"
#include "dtrain/machine/format.h"
#include "dtrain/model/thread_team.h"
#include "dtrain/plan/largest_model.h"
#include "dtrain/plan/planner.h"
#include "dtrain/plan/report.h"
#include "dtrain/plan/sizing_report.h"
#include "renamed_flags.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct PlanFlags {
  // Model.
  std::string model;
  std::string family = "gpt";
  int threads = 1;  // --threads: the engine clock's compute threads per rank
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn_hidden = 0, vocab = 0, seq = 0;
  double params = 0;
  int64_t experts = 0, top_k = 0, moe_every = 1, first_dense = 0, shared_experts = 0,
          expert_ffn = 0;
  std::vector<double> tokens_per_expert;
  // Training.
  int64_t global_batch = 0;
  double tokens = 0;
  double achieved_tflops = 0;
  double step_time = 0;
  std::string precision = "mixed";
  int64_t activation_bytes = 2;
  std::string flops = "narayanan";
  std::string selective_flops = "eq8";
  std::string bucket = "25MiB";
  // Cluster.
  std::string cluster;
  int nodes = 0, gpus_per_node = 0;
  std::string gpu_memory;
  double peak_tflops = 0, efficiency = 0;
  double intra_bandwidth = 0, intra_latency_us = 0, inter_bandwidth = 0, inter_latency_us = 0;
  // Layout.
  int dp = 0, tp = 1, pp = 1, vp = 1, zero = 0;
  int cp = 1;
  std::string cp_algo = "auto";
  int ep = 1;
  int64_t micro_batch = 1;
  int64_t microbatches = 0;
  std::string recompute = "none";
  bool sequence_parallel = false;
  std::string schedule = "1f1b";
  std::string order = "tp-dp-pp";
  std::string stage_layers;  // --stage-layers 7,8,...,7; empty: the balanced split
  // Output.
  bool search = false;
  int top = 5;
  bool json = false;
  bool print_cluster = false;
  bool largest_model = false;
  bool offload = false;
  std::string offload_convention = "deepspeed";
  double largest_layer = 0;
};

// Bounds of the link and GPU overrides, far past any hardware: 1 GFLOP/s to 1 EFLOP/s and
// 1 KB/s to 1 PB/s per GPU, up to 1000 s per step. They keep TFLOP/s x 1e12 and GB/s x 1e9
// finite, and the step time and the days to train too (a 1e-300 TFLOP/s GPU trains in inf days).
constexpr double kMinTflops = 1e-3;
constexpr double kMaxTflops = 1e6;
constexpr double kMinGbps = 1e-6;
constexpr double kMaxGbps = 1e6;
constexpr double kMaxLatencyUs = 1e9;

bool given(CLI::App* app, const char* flag) {
  return app->count(flag) > 0;
}

plan::ModelShape model_from(const PlanFlags& f, CLI::App* app) {
  plan::ModelShape m;
  if (given(app, "--model")) {  // --model "" is an unknown preset, not "no preset"
    m = plan::model_preset(f.model);
  } else {
    DTRAIN_CHECK(given(app, "--layers") && given(app, "--hidden") && given(app, "--heads") &&
                     given(app, "--vocab") && given(app, "--seq-length"),
                 "give --model PRESET, or a custom shape with --layers, --hidden, --heads, "
                 "--vocab and --seq-length");
    m.name = "custom";
  }
  bool changed = false;
  auto set = [&](const char* flag, int64_t value, int64_t& field) {
    if (given(app, flag)) {
      field = value;
      changed = true;
    }
  };
  set("--layers", f.layers, m.layers);
  set("--hidden", f.hidden, m.hidden);
  set("--heads", f.heads, m.heads);
  set("--kv-heads", f.kv_heads, m.kv_heads);
  set("--ffn-hidden", f.ffn_hidden, m.ffn_hidden);
  set("--vocab", f.vocab, m.vocab);
  set("--seq-length", f.seq, m.seq);
  if (given(app, "--family")) {
    DTRAIN_CHECK(f.family == "gpt" || f.family == "llama", "--family must be gpt or llama, got '",
                 f.family, "'");
    m.family = f.family == "llama" ? plan::ModelFamily::llama : plan::ModelFamily::gpt;
    changed = true;
  }
  set("--experts", f.experts, m.moe.experts);
  set("--top-k", f.top_k, m.moe.top_k);
  set("--moe-every", f.moe_every, m.moe.every);
  set("--first-dense", f.first_dense, m.moe.first_dense);
  set("--shared-experts", f.shared_experts, m.moe.shared_experts);
  set("--expert-ffn", f.expert_ffn, m.moe.expert_ffn);
  // A dense model with the MoE flags at their defaults (train's --dump-config writes top-k 1 and
  // moe-every 1): nothing to shape, as train accepts them alone.
  if (m.moe.experts == 0 && m.moe.top_k == 1 && m.moe.every == 1 && m.moe.first_dense == 0 &&
      m.moe.shared_experts == 0 && m.moe.expert_ffn == 0) {
    m.moe.top_k = 0;
  }
  if (given(app, "--params")) {
    m.params_override = static_cast<int64_t>(std::llround(f.params));
    changed = true;
  }
  if (changed && !f.model.empty()) m.name += " (modified)";
  plan::validate(m);
  return m;
}

plan::Cluster cluster_from(const PlanFlags& f, CLI::App* app) {
  // --cluster "" goes on to parse_cluster, which says it is empty.
  DTRAIN_CHECK(given(app, "--cluster"),
               "--cluster is required: NODESxGPUSxTYPE (e.g. 8x8xH100) or a "
               ".json file");
  plan::Cluster c = plan::parse_cluster(f.cluster);
  if (given(app, "--nodes")) c.nodes = f.nodes;
  if (given(app, "--gpus-per-node")) c.gpus_per_node = f.gpus_per_node;
  if (given(app, "--gpu-memory")) {
    // A bare number would be bytes: "80" is a GPU of 80 bytes, on which nothing fits.
    DTRAIN_CHECK(
        f.gpu_memory.find_first_not_of("0123456789") != std::string::npos || f.gpu_memory.empty(),
        "--gpu-memory: '", f.gpu_memory, "' has no unit; write ", f.gpu_memory,
        "GB (10^9 bytes) or ", f.gpu_memory, "GiB (2^30 bytes)");
    c.gpu.memory_bytes = static_cast<double>(parse_bytes(f.gpu_memory, "--gpu-memory"));
    DTRAIN_CHECK(c.gpu.memory_bytes >= plan::kMinGpuMemoryBytes, "--gpu-memory: ", f.gpu_memory,
                 " is not a GPU's memory (at least 128MiB; e.g. 80GB, 40GiB)");
  }
  if (given(app, "--peak-tflops")) c.gpu.peak_flops = f.peak_tflops * 1e12;
  if (given(app, "--compute-efficiency")) {  // one efficiency for every product: no rates
    c.gpu.compute_efficiency = f.efficiency;
    c.gpu.rates = {};
  }
  if (given(app, "--intra-bandwidth")) c.intra_node.bandwidth_bytes_per_s = f.intra_bandwidth * 1e9;
  if (given(app, "--intra-latency-us")) c.intra_node.latency_us = f.intra_latency_us;
  if (given(app, "--inter-bandwidth")) c.inter_node.bandwidth_bytes_per_s = f.inter_bandwidth * 1e9;
  if (given(app, "--inter-latency-us")) c.inter_node.latency_us = f.inter_latency_us;
  plan::validate(c);
  return c;
}

plan::Training training_from(const PlanFlags& f, CLI::App* app, const plan::ModelShape& m) {
  plan::Training t;
  DTRAIN_CHECK(given(app, "--global-batch") || m.default_global_batch > 0,
               "--global-batch is required (sequences per step): model '", m.name,
               "' has no default");
  t.global_batch = given(app, "--global-batch") ? f.global_batch : m.default_global_batch;
  t.tokens = given(app, "--tokens") ? f.tokens : m.default_tokens;
  t.engine_threads = f.threads;
  if (given(app, "--achieved-tflops")) t.achieved_flops_per_gpu = f.achieved_tflops * 1e12;
  if (given(app, "--step-time")) t.step_time_s = f.step_time;
  const auto precision = plan::parse_precision(f.precision);
  DTRAIN_CHECK(precision.has_value(), "--precision must be one of ", plan::precision_names(),
               "; got '", f.precision, "'");
  t.state_bytes = *precision;
  t.activation_bytes = f.activation_bytes;
  const auto flops = plan::parse_flops_convention(f.flops);
  DTRAIN_CHECK(flops.has_value(), "--flops must be narayanan or 6nd, got '", f.flops, "'");
  t.flops = *flops;
  const auto selective = plan::parse_selective_flops(f.selective_flops);
  DTRAIN_CHECK(selective.has_value(), "--selective-flops must be eq8 or rerun, got '",
               f.selective_flops, "'");
  t.selective_flops = *selective;
  t.bucket_bytes = static_cast<double>(parse_bytes(f.bucket, "--bucket-size"));
  t.tokens_per_expert = f.tokens_per_expert;
  return t;
}

plan::Recompute recompute_flag(const std::string& value) {
  for (plan::Recompute r :
       {plan::Recompute::none, plan::Recompute::selective, plan::Recompute::full}) {
    if (value == plan::name(r)) return r;
  }
  throw Error(str("--recompute must be none, selective or full, got '", value, "'"));
}

plan::CpAlgorithm cp_algo_flag(const std::string& value) {
  const auto algo = plan::parse_cp_algorithm(value);
  DTRAIN_CHECK(algo.has_value(), "--cp-algo must be one of ", plan::kCpAlgorithmNames, ", got '",
               value, "'");
  return *algo;
}

plan::Layout layout_from(const PlanFlags& f, CLI::App* app, const plan::PlanInput& in) {
  const plan::Cluster& c = in.cluster;
  plan::Layout l;
  l.cp = f.cp;
  l.cp_algo = cp_algo_flag(f.cp_algo);
  DTRAIN_CHECK(f.cp == 1 || f.cp <= c.world(), "--cp ", f.cp, " is more than the cluster's ",
               c.world(), " GPUs");
  // Alone, --cp-algo passes at a default (plan's auto, train's ring: its --dump-config writes it).
  DTRAIN_CHECK(f.cp > 1 || !given(app, "--cp-algo") || f.cp_algo == "auto" || f.cp_algo == "ring",
               "--cp-algo picks context parallelism's algorithm: add --cp N (N > 1)");
  l.tp = f.tp;
  l.pp = f.pp;
  l.vp = f.vp;
  l.ep = f.ep;
  l.zero_stage = f.zero;
  l.micro_batch = f.micro_batch;
  l.sequence_parallel = f.sequence_parallel;
  if (given(app, "--dp")) {
    l.dp = f.dp;
  } else {
    DTRAIN_CHECK(l.tp >= 1 && l.pp >= 1, "--tp and --pp must be >= 1, got ", l.tp, " and ", l.pp);
    if (l.cp > 1) {
      const int64_t cells = int64_t{l.tp} * l.pp * l.cp;
      DTRAIN_CHECK(c.world() % cells == 0, "--tp ", l.tp, " x --pp ", l.pp, " x --cp ", l.cp, " = ",
                   cells, " does not divide the cluster's ", c.world(), " GPUs");
    }
    DTRAIN_CHECK(c.world() % (l.tp * l.pp) == 0, "--tp ", l.tp, " x --pp ", l.pp,
                 " does not divide the cluster's ", c.world(), " GPUs");
    l.dp = c.world() / (l.tp * l.pp * l.cp);
  }
  if (given(app, "--microbatches")) {
    // M micro-batches per replica: b = B / (dp x M).
    DTRAIN_CHECK(!given(app, "--micro-batch"), "give --micro-batch or --microbatches, not both");
    DTRAIN_CHECK(f.microbatches >= 1, "--microbatches must be >= 1, got ", f.microbatches);
    const int64_t per_replica = l.dp > 0 ? in.training.global_batch / l.dp : 0;
    DTRAIN_CHECK(
        l.dp > 0 && in.training.global_batch % l.dp == 0 && per_replica % f.microbatches == 0,
        "--microbatches ", f.microbatches, " does not divide --global-batch ",
        in.training.global_batch, " / --dp ", l.dp, " into whole micro-batches");
    l.micro_batch = per_replica / f.microbatches;
  }
  l.recompute = recompute_flag(f.recompute);
  bool found = false;
  for (plan::ScheduleKind k :
       {plan::ScheduleKind::gpipe, plan::ScheduleKind::one_f_one_b, plan::ScheduleKind::interleaved,
        plan::ScheduleKind::zero_bubble_h1}) {
    if (f.schedule == plan::name(k)) {
      l.schedule = k;
      found = true;
    }
  }
  DTRAIN_CHECK(found, "--schedule must be gpipe, 1f1b, interleaved or zb-h1, got '", f.schedule,
               "'");
  const auto order = plan::parse_rank_order(f.order);
  DTRAIN_CHECK(order.has_value(), "--rank-order must list tp, dp and pp innermost first (e.g. ",
               "tp-dp-pp), got '", f.order, "'");
  l.order = *order;
  if (given(app, "--stage-layers")) {
    l.stage_layers = plan::parse_stage_layers(f.stage_layers, "--stage-layers");
  }
  return l;
}

// A sizing report as the command prints it: its table, or its JSON with the build's facts.
void print_report(const PlanFlags& f, const plan::SizingReport& r) {
  if (f.json) {
    std::cout << with_build(r.json).dump(2) << "\n";
  } else {
    std::cout << r.text;
  }
}

// --largest-model: the ZeRO paper's Table 2 for this cluster's GPU memory, every stage.
void print_largest_model(const PlanFlags& f, CLI::App* app, const plan::Cluster& c) {
  for (const char* flag : {"--model", "--layers", "--hidden", "--heads", "--vocab", "--params",
                           "--search", "--zero"}) {
    DTRAIN_CHECK(!given(app, flag),
                 "--largest-model answers for every model and ZeRO stage: ", flag,
                 " does not apply (with --model or --layers it answers for that shape family)");
  }
  const auto bytes = plan::parse_precision(f.precision);
  DTRAIN_CHECK(bytes.has_value(), "--precision must be one of ", plan::precision_names(), "; got '",
               f.precision, "'");
  const int mp = f.tp * f.pp;
  DTRAIN_CHECK(c.world() % mp == 0, "--tp ", f.tp, " x --pp ", f.pp,
               " does not divide the cluster's ", c.world(), " GPUs");
  const int dp = given(app, "--dp") ? f.dp : c.world() / mp;
  print_report(f, plan::largest_model_report(c, dp, mp, *bytes));
}

// --largest-model with a model: the widest member of its shape family (its depth, sequence,
// vocabulary and head size) that fits with activations for the layout the flags give
// (plan/largest_model.h), per ZeRO stage unless --zero is given.
void print_largest_shape(const PlanFlags& f, CLI::App* app, const plan::Cluster& cluster) {
  for (const char* flag : {"--params", "--search"}) {
    DTRAIN_CHECK(!given(app, flag), "--largest-model with a model searches its width: ", flag,
                 " does not apply");
  }
  plan::PlanInput in;
  in.cluster = cluster;
  in.model = model_from(f, app);
  in.training = training_from(f, app, in.model);
  plan::validate(in);
  const plan::Layout base = layout_from(f, app, in);
  const bool zero_given = given(app, "--zero");
  const std::vector<int> stages =
      zero_given ? std::vector<int>{f.zero} : std::vector<int>{0, 1, 2, 3};
  print_report(f, plan::largest_shape_report(in, base, stages, zero_given));
}

// --offload: DeepSpeed's offload estimators for the model on this cluster (cost/offload.h).
void print_offload(const PlanFlags& f, CLI::App* app, const plan::Cluster& c) {
  int64_t params = 0, largest = 0;
  std::string what;
  if (!given(app, "--model") && !given(app, "--layers")) {
    DTRAIN_CHECK(given(app, "--params") && given(app, "--largest-layer"),
                 "--offload needs a model: --model PRESET (or a shape), or --params N with "
                 "--largest-layer M");
    params = static_cast<int64_t>(std::llround(f.params));
    largest = static_cast<int64_t>(std::llround(f.largest_layer));
    what = "--params";
  } else {
    const plan::ModelShape m = model_from(f, app);
    params = plan::param_count(m);
    largest = given(app, "--largest-layer") ? static_cast<int64_t>(std::llround(f.largest_layer))
                                            : plan::largest_module_params(m);
    what = m.name;
  }
  DTRAIN_CHECK(f.offload_convention == "deepspeed" || f.offload_convention == "zero-offload" ||
                   f.offload_convention == "deepspeed-zero2-code",
               "--offload-convention must be deepspeed, deepspeed-zero2-code or zero-offload, "
               "got '",
               f.offload_convention, "'");
  const plan::OffloadConvention convention =
      f.offload_convention == "deepspeed-zero2-code" ? plan::OffloadConvention::deepspeed_zero2_code
      : f.offload_convention == "zero-offload"       ? plan::OffloadConvention::zero_offload
                                                     : plan::OffloadConvention::deepspeed;
  print_report(f, plan::offload_report(params, largest, what, c, convention, f.offload_convention));
}

// --search with layout flags: each one given fixes its axis; the others are searched.
plan::SearchConstraints search_constraints(const PlanFlags& f, CLI::App* app) {
  DTRAIN_CHECK(!given(app, "--schedule"),
               "--schedule fixes one layout's schedule; --search ranks 1F1B layouts (interleaved "
               "for --vp > 1): drop --schedule, or drop --search and give the layout");
  DTRAIN_CHECK(!given(app, "--stage-layers"),
               "--stage-layers fixes one layout's split; --search gives each pp the balanced "
               "split: drop --stage-layers, or drop --search and give the layout");
  DTRAIN_CHECK(
      !given(app, "--rank-order"),
      "--rank-order fixes one layout's rank order; --search uses tp-dp-pp (Megatron's): drop "
      "--rank-order, or drop --search and give the layout");
  DTRAIN_CHECK(!(given(app, "--micro-batch") && given(app, "--microbatches")),
               "give --micro-batch or --microbatches, not both");
  plan::SearchConstraints c;
  if (given(app, "--dp")) c.dp = f.dp;
  if (given(app, "--tp")) c.tp = f.tp;
  if (given(app, "--pp")) c.pp = f.pp;
  if (given(app, "--vp")) c.vp = f.vp;
  if (given(app, "--zero")) c.zero_stage = f.zero;
  if (given(app, "--micro-batch")) c.micro_batch = f.micro_batch;
  if (given(app, "--microbatches")) c.microbatches = f.microbatches;
  if (given(app, "--sequence-parallel")) c.sequence_parallel = true;
  if (given(app, "--recompute")) c.recompute = recompute_flag(f.recompute);
  if (given(app, "--cp")) c.cp = f.cp;
  if (given(app, "--cp-algo")) c.cp_algo = cp_algo_flag(f.cp_algo);
  if (given(app, "--ep")) c.ep = f.ep;
  return c;
}

void run_plan(const PlanFlags& f, CLI::App* app) {
  DTRAIN_CHECK(f.search || !given(app, "--top"),
               "--top sets how many layouts --search prints: add --search, or drop --top");
  DTRAIN_CHECK(!f.search || (!given(app, "--achieved-tflops") && !given(app, "--step-time")),
               "--achieved-tflops and --step-time describe one measured layout; --search ranks "
               "layouts by the model's predicted time: drop one of them");
  plan::PlanInput input;
  input.cluster = cluster_from(f, app);
  if (f.print_cluster) {
    std::cout << plan::to_json(input.cluster).dump(2) << "\n";
    return;
  }
  DTRAIN_CHECK(f.offload || !given(app, "--offload-convention"),
               "--offload-convention applies to --offload's table: add --offload");
  DTRAIN_CHECK(f.offload || !given(app, "--largest-layer"),
               "--largest-layer sizes --offload's table (DeepSpeed's estimators take the largest "
               "layer's parameters); the plan itself does not use it: add --offload, or drop "
               "--largest-layer");
  if (f.largest_model && (given(app, "--model") || given(app, "--layers"))) {
    print_largest_shape(f, app, input.cluster);
    return;
  }
  if (f.largest_model) {
    print_largest_model(f, app, input.cluster);
    return;
  }
  if (f.offload) {
    print_offload(f, app, input.cluster);
    return;
  }
  input.model = model_from(f, app);
  input.training = training_from(f, app, input.model);
  // At its default (1) --threads passes alone, as train's --dump-config writes it.
  DTRAIN_CHECK(
      !given(app, "--threads") || f.threads == 1 || plan::has_measured_rates(input.cluster),
      "--threads applies to the engine clock only: pass --cluster FILE with measured "
      "rates (dtrain calibrate --compute -o FILE)");
  if (plan::has_measured_rates(input.cluster)) {
    plan::use_engine_profile(input, given(app, "--precision"), given(app, "--activation-bytes"));
  }
  plan::validate(input);
  if (f.search) {
    plan::SearchOptions options;
    options.top = f.top;
    options.fixed = search_constraints(f, app);
    const plan::SearchResult result = plan::search(input, options);
    if (f.json) {
      std::cout << with_build(plan::search_json(input, result)).dump(2) << "\n";
    } else {
      std::cout << plan::format_search(input, result);
    }
    return;
  }
  const plan::Plan p = plan::evaluate(input, layout_from(f, app, input));
  // A measured rate belongs to a run of this layout; one that cannot fit was never measured, and
  // its MFU and days would describe nothing.
  const bool measured = given(app, "--step-time") || given(app, "--achieved-tflops");
  DTRAIN_CHECK(!measured || p.memory.fits(),
               given(app, "--step-time") ? "--step-time" : "--achieved-tflops",
               " describes a measured run of this layout, but the layout does not fit: a GPU "
               "needs ",
               plan::format_gb(p.memory.total()), " of its ", plan::format_gb(p.memory.capacity),
               "; check the layout flags (--tp, --pp, --zero, --micro-batch, --recompute) "
               "against the run that was measured");
  if (f.json) {
    nlohmann::json j = plan::input_json(input);
    j["plan"] = plan::plan_json(p);
    std::cout << with_build(j).dump(2) << "\n";
  } else {
    std::cout << plan::format_plan(input, p);
  }
}

void add_plan(CLI::App& parent) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* app = parent.add_subcommand(
      "plan",
      "Size a training run on a GPU cluster: memory per GPU, communication per group, pipeline "
      "bubble, step time, MFU and days for one layout, or --search for the best layouts");
  PlanFlags& f = *flags;
  // Model.
  app->add_option("--model", f.model,
                  "Model preset: gpt3-175b, llama2-7b, llama2-13b, llama2-70b, megatron-1.7b ... "
                  "megatron-1t (Narayanan et al. 2021 Table 1), llama3-405b-128k (Llama 3 405B's "
                  "128K-token stage)")
      ->group("Model");
  app->add_option("--family", f.family, "Layer shape of a custom model: gpt or llama")
      ->group("Model");
  app->add_option("--layers", f.layers, "Transformer layers (l)")
      ->check(whole_number(1, plan::kMaxLayers))
      ->group("Model");
  app->add_option("--hidden", f.hidden, "Hidden size (h)")
      ->check(whole_number(1, plan::kMaxHidden))
      ->group("Model");
  app->add_option("--heads", f.heads, "Attention heads (a)")
      ->check(whole_number(1, plan::kMaxHidden))
      ->group("Model");
  app->add_option("--kv-heads", f.kv_heads, "Key/value heads (grouped-query attention)")
      ->check(whole_number(1, plan::kMaxHidden))
      ->group("Model");
  app->add_option("--ffn-hidden", f.ffn_hidden, "FFN size (default 4 x hidden)")
      ->check(whole_number(1, plan::kMaxFfnHidden))
      ->group("Model");
  app->add_option("--vocab", f.vocab, "Vocabulary size (V)")
      ->check(whole_number(1, plan::kMaxVocab))
      ->group("Model");
  app->add_option("--seq-length", f.seq, "Sequence length (s)")
      ->check(whole_number(1, plan::kMaxSeq))
      ->group("Model");
  app->add_option("--params", f.params,
                  "Parameter count (e.g. 7e9): sets every parameter-count figure (state memory, "
                  "DP/ZeRO bytes, 6ND); the shape still splits it over stages and TP ranks and "
                  "sets the activations and Eq. 3's FLOPs")
      ->check(real_number(1, plan::kMaxParams))
      ->group("Model");
  app->add_option("--experts", f.experts,
                  "Routed experts (E) of a mixture-of-experts model (0: dense)")
      ->check(whole_number(0, plan::kMaxExperts))
      ->group("Model");
  app->add_option("--top-k", f.top_k, "Experts each token is routed to (k)")
      ->check(whole_number(1, plan::kMaxExperts))
      ->group("Model");
  app->add_option("--moe-every", f.moe_every,
                  "Route every n-th layer (after --first-dense); the others keep a dense MLP")
      ->check(whole_number(1, plan::kMaxLayers))
      ->group("Model");
  app->add_option("--first-dense", f.first_dense, "The first k layers keep a dense MLP")
      ->check(whole_number(0, plan::kMaxLayers))
      ->group("Model");
  app->add_option("--shared-experts", f.shared_experts,
                  "Shared experts every token goes through (as DeepSeek's)")
      ->check(whole_number(0, plan::kMaxExperts))
      ->group("Model");
  app->add_option("--expert-ffn", f.expert_ffn,
                  "Each expert's intermediate size (fine-grained experts; default --ffn-hidden)")
      ->check(whole_number(1, plan::kMaxFfnHidden))
      ->group("Model");
  app->add_option("--tokens-per-expert", f.tokens_per_expert,
                  "Measured routing: tokens routed to each of the E experts (comma-separated, "
                  "any scale); sets the all-to-all bytes and the busiest rank's expert work "
                  "(default: uniform)")
      ->delimiter(',')
      ->group("Model");
  // Training.
  app->add_option("--global-batch", f.global_batch,
                  "Sequences per optimizer step (default: the preset's)")
      ->check(whole_number(1, plan::kMaxGlobalBatch))
      ->group("Training");
  app->add_option("--tokens", f.tokens, "Tokens to train, for the days estimate (e.g. 300e9)")
      ->check(real_number(0, plan::kMaxTokens))
      ->group("Training");
  auto* achieved =
      app->add_option("--achieved-tflops", f.achieved_tflops,
                      "Measured hardware TFLOP/s per GPU (recompute counted, as Narayanan et al. "
                      "report): the step time, tokens/s, MFU, HFU and days follow from it")
          ->check(real_number(1e-3, kMaxTflops))
          ->group("Training");
  app->add_option("--step-time", f.step_time,
                  "Measured seconds per step: tokens/s, MFU, HFU and days follow from it")
      ->check(real_number(1e-9, 1e9))
      ->excludes(achieved)
      ->group("Training");
  app->add_option("--precision", f.precision,
                  "Bytes per parameter for weights+grads+optimizer: mixed or bf16 (2+2+12, ZeRO; "
                  "train's --precision bf16), "
                  "megatron (2+4+12), fp32 (4+4+8)")
      ->group("Training");
  app->add_option("--threads", f.threads,
                  "With a cluster file's measured rates: compute threads per rank, as the "
                  "engine's --threads (its default)")
      ->capture_default_str()
      ->check(whole_number(1, model::kMaxTeamSize))
      ->group("Training");
  app->add_option("--activation-bytes", f.activation_bytes,
                  "Bytes per activation element (2 for bf16)")
      ->check(whole_number(1, plan::kMaxActivationBytes))
      ->group("Training");
  app->add_option("--flops", f.flops,
                  "FLOPs convention: narayanan (Eq. 3 terms, attention included) or 6nd")
      ->group("Training");
  app->add_option("--selective-flops", f.selective_flops,
                  "How HFU counts selective recompute: eq8 (Korthikanti et al. 2022 Eq. 8, "
                  "12Bs^2h per layer: Megatron-LM's published HFU) or rerun (4Bs^2h per layer, "
                  "the s x s products' forward run again); step time charges rerun either way")
      ->group("Training");
  app->add_option("--bucket-size", f.bucket, "Gradient bucket size for data parallelism (25MiB)")
      ->group("Training");
  accept_old_spelling(*app, app->get_option("--bucket-size"), "--bucket");
  // Cluster.
  app->add_option("--cluster", f.cluster,
                  "NODESxGPUSxTYPE with TYPE A100-80GB, H100-80GB or H200-141GB (e.g. "
                  "8x8xH100), or a cluster .json file (see --print-cluster)")
      ->group("Cluster");
  app->add_option("--nodes", f.nodes, "Override: nodes")
      ->check(whole_number(1, plan::kMaxGpus))
      ->group("Cluster");
  app->add_option("--gpus-per-node", f.gpus_per_node, "Override: GPUs per node")
      ->check(whole_number(1, plan::kMaxGpus))
      ->group("Cluster");
  app->add_option("--gpu-memory", f.gpu_memory, "Override: memory per GPU (e.g. 80GB, 40GiB)")
      ->group("Cluster");
  app->add_option("--peak-tflops", f.peak_tflops, "Override: peak dense TFLOP/s per GPU")
      ->check(real_number(kMinTflops, kMaxTflops))
      ->group("Cluster");
  app->add_option("--compute-efficiency", f.efficiency,
                  "Override: one share of peak for every matrix product, in (0, 1] (drops the "
                  "clock's rates: no memory-bound or per-kernel costs)")
      ->check(real_number(0, 1, true))
      ->group("Cluster");
  app->add_option("--intra-bandwidth", f.intra_bandwidth,
                  "Override: intra-node GB/s per GPU per direction")
      ->check(real_number(kMinGbps, kMaxGbps))
      ->group("Cluster");
  app->add_option("--intra-latency-us", f.intra_latency_us, "Override: intra-node us per step")
      ->check(real_number(0, kMaxLatencyUs))
      ->group("Cluster");
  app->add_option("--inter-bandwidth", f.inter_bandwidth,
                  "Override: inter-node GB/s per GPU per direction")
      ->check(real_number(kMinGbps, kMaxGbps))
      ->group("Cluster");
  app->add_option("--inter-latency-us", f.inter_latency_us, "Override: inter-node us per step")
      ->check(real_number(0, kMaxLatencyUs))
      ->group("Cluster");
  app->add_flag("--largest-model", f.largest_model,
                "Print the largest model whose states fit each GPU, per ZeRO stage (the ZeRO "
                "paper's Table 2), for the cluster's memory, --dp, --tp x --pp and --precision; "
                "with --model (or a custom shape) the widest model of that shape family that "
                "fits with activations, for the layout flags")
      ->group("Output");
  app->add_flag("--offload", f.offload,
                "Print CPU-offload memory (ZeRO-2 optimizer offload, ZeRO-3 parameter and "
                "optimizer offload) per node and per GPU, in DeepSpeed's estimator convention")
      ->group("Output");
  app->add_option("--offload-convention", f.offload_convention,
                  "With --offload: deepspeed (its estimators' rows, GiB; ZeRO-2 without offload "
                  "as its docs write it), deepspeed-zero2-code (ZeRO-2's rows as DeepSpeed's "
                  "current code computes them, 2 Psi + int(18 Psi / GPUs) without offload, beside "
                  "the docs' 4 Psi + 16 Psi / GPUs) or zero-offload (Ren et al. 2021's split: 2 "
                  "bytes per parameter on GPU, 14 on CPU, GB)")
      ->group("Output");
  app->add_option("--largest-layer", f.largest_layer,
                  "Parameters of the largest layer, for --offload (default: the shape's largest "
                  "module)")
      ->check(real_number(1, plan::kMaxParams))
      ->group("Model");
  app->add_flag("--print-cluster", f.print_cluster,
                "Print the cluster as JSON (a template for --cluster FILE.json) and exit")
      ->group("Cluster");
  // Layout.
  app->add_option("--dp", f.dp, "Data-parallel size (default: GPUs / (tp x pp x cp))")
      ->check(whole_number(1, plan::kMaxGpus))
      ->group("Layout");
  app->add_option("--cp", f.cp,
                  "Context-parallel size: each sequence's tokens split over N ranks (world = dp x "
                  "cp x tp x pp; CP sits right outside TP in the rank order)")
      ->check(whole_number(1, plan::kMaxGpus))
      ->group("Layout");
  app->add_option("--cp-algo", f.cp_algo,
                  "Context parallelism's attention: ring (load-balanced K/V ring), all-gather "
                  "(K/V gathered per layer, as Llama 3), ulysses (all-to-all to a head split), "
                  "or auto (ulysses when the heads allow and it sends the fewest bytes, ring when "
                  "its hops hide behind block compute, else all-gather)")
      ->group("Layout");
  app->add_option("--ep", f.ep,
                  "Expert-parallel size: ep ranks of each DP group hold E / ep experts each "
                  "(carved from DP: expert gradients reduce over dp / ep ranks)")
      ->check(whole_number(1, plan::kMaxGpus))
      ->group("Layout");
  app->add_option("--tp", f.tp, "Tensor-parallel size")
      ->check(whole_number(1, plan::kMaxGpus))
      ->group("Layout");
  app->add_option("--pp", f.pp, "Pipeline stages")
      ->check(whole_number(1, plan::kMaxGpus))
      ->group("Layout");
  app->add_option("--stage-layers", f.stage_layers,
                  "Layers on each pipeline stage, e.g. 7,8,8,7 (default: balanced, the first and "
                  "the last stage one fewer when --pp does not divide the layers)")
      ->group("Layout");
  app->add_option("--vp", f.vp, "Model chunks per pipeline rank (interleaved schedule when > 1)")
      ->check(whole_number(1, plan::kMaxLayers))
      ->group("Layout");
  app->add_option("--zero", f.zero, "ZeRO stage: 0 (plain DP), 1, 2 or 3")
      ->check(whole_number(0, 3))
      ->group("Layout");
  app->add_option("--micro-batch", f.micro_batch, "Sequences per micro-batch (b)")
      ->check(whole_number(1, plan::kMaxGlobalBatch))
      ->group("Layout");
  app->add_option("--microbatches", f.microbatches,
                  "Micro-batches per step and replica (M), instead of --micro-batch: "
                  "b = global batch / (dp x M)")
      ->check(whole_number(1, plan::kMaxGlobalBatch))
      ->group("Layout");
  app->add_option("--recompute", f.recompute, "Activation recompute: none, selective or full")
      ->group("Layout");
  app->add_flag("--sequence-parallel", f.sequence_parallel,
                "Sequence parallelism in the TP group (Korthikanti et al. 2022)")
      ->group("Layout");
  app->add_option("--schedule", f.schedule, "Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1")
      ->group("Layout");
  app->add_option("--rank-order", f.order,
                  "Rank order, innermost axis first (tp-dp-pp: TP ranks adjacent, as Megatron)")
      ->group("Layout");
  accept_old_spelling(*app, app->get_option("--rank-order"), "--order");
  // Output.
  app->add_flag(
         "--search", f.search,
         "Search every valid layout, rank by predicted throughput, explain the rejections; "
         "--dp, --cp, --cp-algo, --ep, --tp, --pp, --vp, --zero, --micro-batch, --microbatches, "
         "--recompute and --sequence-parallel given with it hold their axis")
      ->group("Output");
  app->add_option("--top", f.top, "Layouts to print with --search")
      ->check(whole_number(1, 1000))
      ->group("Output");
  app->add_flag("--json", f.json, "Print the same figures as JSON")->group("Output");
  app->callback([flags, app] { run_plan(*flags, app); });
}

const CommandRegistration kRegistration("", add_plan);

}  // namespace
}  // namespace dtrain::cli
