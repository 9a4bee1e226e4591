// `dtrain plan`: hands the flags given to plan/plan_request.h (the same reader the web page's
// WebAssembly build uses), which checks them and evaluates one layout or searches (--search);
// prints its table or, with --json, its JSON. All checks and figures live in src/dtrain/plan.
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "build_info.h"
#include "command_registry.h"
#include "dtrain/core/check.h"
#include "dtrain/cost/offload.h"
#include "dtrain/model/thread_team.h"
#include "dtrain/plan/largest_model.h"
#include "dtrain/plan/plan_request.h"
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

// The flags given, as plan/plan_request.h reads them: each one named without its dashes, with
// its parsed value. The checks and the figures are plan/'s, shared with the web page.
nlohmann::json flags_json(const PlanFlags& f, CLI::App* app) {
  nlohmann::json j = nlohmann::json::object();
  auto put = [&](const char* flag, const auto& value) {
    if (given(app, flag)) j[flag + 2] = value;
  };
  put("--model", f.model);
  put("--family", f.family);
  put("--layers", f.layers);
  put("--hidden", f.hidden);
  put("--heads", f.heads);
  put("--kv-heads", f.kv_heads);
  put("--ffn-hidden", f.ffn_hidden);
  put("--vocab", f.vocab);
  put("--seq-length", f.seq);
  put("--params", f.params);
  put("--experts", f.experts);
  put("--top-k", f.top_k);
  put("--moe-every", f.moe_every);
  put("--first-dense", f.first_dense);
  put("--shared-experts", f.shared_experts);
  put("--expert-ffn", f.expert_ffn);
  put("--tokens-per-expert", f.tokens_per_expert);
  put("--global-batch", f.global_batch);
  put("--tokens", f.tokens);
  put("--achieved-tflops", f.achieved_tflops);
  put("--step-time", f.step_time);
  put("--precision", f.precision);
  put("--threads", f.threads);
  put("--activation-bytes", f.activation_bytes);
  put("--flops", f.flops);
  put("--selective-flops", f.selective_flops);
  put("--bucket-size", f.bucket);
  put("--cluster", f.cluster);
  put("--nodes", f.nodes);
  put("--gpus-per-node", f.gpus_per_node);
  put("--gpu-memory", f.gpu_memory);
  put("--peak-tflops", f.peak_tflops);
  put("--compute-efficiency", f.efficiency);
  put("--intra-bandwidth", f.intra_bandwidth);
  put("--intra-latency-us", f.intra_latency_us);
  put("--inter-bandwidth", f.inter_bandwidth);
  put("--inter-latency-us", f.inter_latency_us);
  put("--dp", f.dp);
  put("--cp", f.cp);
  put("--cp-algo", f.cp_algo);
  put("--ep", f.ep);
  put("--tp", f.tp);
  put("--pp", f.pp);
  put("--stage-layers", f.stage_layers);
  put("--vp", f.vp);
  put("--zero", f.zero);
  put("--micro-batch", f.micro_batch);
  put("--microbatches", f.microbatches);
  put("--recompute", f.recompute);
  put("--sequence-parallel", f.sequence_parallel);
  put("--schedule", f.schedule);
  put("--rank-order", f.order);
  put("--search", f.search);
  put("--top", f.top);
  return j;
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
void print_largest_shape(const PlanFlags& f, CLI::App* app, const nlohmann::json& flags,
                         const plan::Cluster& cluster) {
  for (const char* flag : {"--params", "--search"}) {
    DTRAIN_CHECK(!given(app, flag), "--largest-model with a model searches its width: ", flag,
                 " does not apply");
  }
  plan::PlanInput in;
  in.cluster = cluster;
  in.model = plan::model_from_flags(flags);
  in.training = plan::training_from_flags(flags, in.model);
  plan::validate(in);
  const plan::Layout base = plan::layout_from_flags(flags, in);
  const bool zero_given = given(app, "--zero");
  const std::vector<int> stages =
      zero_given ? std::vector<int>{f.zero} : std::vector<int>{0, 1, 2, 3};
  print_report(f, plan::largest_shape_report(in, base, stages, zero_given));
}

// --offload: DeepSpeed's offload estimators for the model on this cluster (cost/offload.h).
void print_offload(const PlanFlags& f, CLI::App* app, const nlohmann::json& flags,
                   const plan::Cluster& c) {
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
    const plan::ModelShape m = plan::model_from_flags(flags);
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

void run_plan(const PlanFlags& f, CLI::App* app) {
  const nlohmann::json flags = flags_json(f, app);
  plan::check_plan_flags(flags);
  const plan::Cluster cluster = plan::cluster_from_flags(flags);
  if (f.print_cluster) {
    std::cout << plan::to_json(cluster).dump(2) << "\n";
    return;
  }
  DTRAIN_CHECK(f.offload || !given(app, "--offload-convention"),
               "--offload-convention applies to --offload's table: add --offload");
  DTRAIN_CHECK(f.offload || !given(app, "--largest-layer"),
               "--largest-layer sizes --offload's table (DeepSpeed's estimators take the largest "
               "layer's parameters); the plan itself does not use it: add --offload, or drop "
               "--largest-layer");
  if (f.largest_model && (given(app, "--model") || given(app, "--layers"))) {
    print_largest_shape(f, app, flags, cluster);
    return;
  }
  if (f.largest_model) {
    print_largest_model(f, app, cluster);
    return;
  }
  if (f.offload) {
    print_offload(f, app, flags, cluster);
    return;
  }
  const plan::PlanAnswer answer = plan::answer_plan(flags);
  if (f.json) {
    std::cout << with_build(plan::answer_json(answer)).dump(2) << "\n";
  } else {
    std::cout << plan::answer_text(answer);
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
