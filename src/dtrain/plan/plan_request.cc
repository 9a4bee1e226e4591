// `dtrain plan`'s flags read from a JSON object (plan_request.h): the checks the command made on
// its flags, moved here unchanged so the command line and the web page share them.
#include "dtrain/plan/plan_request.h"

#include <cmath>
#include <string>
#include <vector>

#include "dtrain/clock/engine_clock.h"
#include "dtrain/core/check.h"
#include "dtrain/core/units.h"
#include "dtrain/cost/pipeline_stages.h"
#include "dtrain/machine/format.h"
#include "dtrain/plan/report.h"

namespace dtrain::plan {
namespace {

using nlohmann::json;

// Flags are named without their dashes ("seq-length"); messages name them with ("--seq-length").
bool given(const json& flags, const char* flag) {
  return flags.contains(flag);
}

int64_t whole(const json& flags, const char* flag, int64_t fallback) {
  if (!given(flags, flag)) return fallback;
  const json& v = flags.at(flag);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    DTRAIN_CHECK(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18, "--", flag,
                 " must be a whole number, got ", v.dump());
    return static_cast<int64_t>(d);
  }
  throw Error(str("--", flag, " must be a whole number, got ", v.dump()));
}

int small(const json& flags, const char* flag, int fallback) {
  const int64_t v = whole(flags, flag, fallback);
  DTRAIN_CHECK(v >= 0 && v <= kMaxGpus, "--", flag, " must be between 0 and ", kMaxGpus, ", got ",
               v);
  return static_cast<int>(v);
}

double real(const json& flags, const char* flag, double fallback) {
  if (!given(flags, flag)) return fallback;
  const json& v = flags.at(flag);
  DTRAIN_CHECK(v.is_number(), "--", flag, " must be a number, got ", v.dump());
  return v.get<double>();
}

std::string text(const json& flags, const char* flag, const std::string& fallback) {
  if (!given(flags, flag)) return fallback;
  const json& v = flags.at(flag);
  DTRAIN_CHECK(v.is_string(), "--", flag, " must be text, got ", v.dump());
  return v.get<std::string>();
}

bool on(const json& flags, const char* flag) {
  if (!given(flags, flag)) return false;
  const json& v = flags.at(flag);
  DTRAIN_CHECK(v.is_boolean(), "--", flag, " is a switch (true or false), got ", v.dump());
  return v.get<bool>();
}

Recompute recompute_flag(const std::string& value) {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    if (value == name(r)) return r;
  }
  throw Error(str("--recompute must be none, selective or full, got '", value, "'"));
}

CpAlgorithm cp_algo_flag(const std::string& value) {
  const auto algo = parse_cp_algorithm(value);
  DTRAIN_CHECK(algo.has_value(), "--cp-algo must be one of ", kCpAlgorithmNames, ", got '", value,
               "'");
  return *algo;
}

}  // namespace

ModelShape model_from_flags(const json& flags) {
  ModelShape m;
  if (given(flags, "model")) {  // --model "" is an unknown preset, not "no preset"
    m = model_preset(text(flags, "model", ""));
  } else {
    DTRAIN_CHECK(given(flags, "layers") && given(flags, "hidden") && given(flags, "heads") &&
                     given(flags, "vocab") && given(flags, "seq-length"),
                 "give --model PRESET, or a custom shape with --layers, --hidden, --heads, "
                 "--vocab and --seq-length");
    m.name = "custom";
  }
  bool changed = false;
  auto set = [&](const char* flag, int64_t& field) {
    if (given(flags, flag)) {
      field = whole(flags, flag, 0);
      changed = true;
    }
  };
  set("layers", m.layers);
  set("hidden", m.hidden);
  set("heads", m.heads);
  set("kv-heads", m.kv_heads);
  set("ffn-hidden", m.ffn_hidden);
  set("vocab", m.vocab);
  set("seq-length", m.seq);
  if (given(flags, "family")) {
    const std::string family = text(flags, "family", "gpt");
    DTRAIN_CHECK(family == "gpt" || family == "llama", "--family must be gpt or llama, got '",
                 family, "'");
    m.family = family == "llama" ? ModelFamily::llama : ModelFamily::gpt;
    changed = true;
  }
  set("experts", m.moe.experts);
  set("top-k", m.moe.top_k);
  set("moe-every", m.moe.every);
  set("first-dense", m.moe.first_dense);
  set("shared-experts", m.moe.shared_experts);
  set("expert-ffn", m.moe.expert_ffn);
  // A dense model with the MoE flags at their defaults (train's --dump-config writes top-k 1 and
  // moe-every 1): nothing to shape, as train accepts them alone.
  if (m.moe.experts == 0 && m.moe.top_k == 1 && m.moe.every == 1 && m.moe.first_dense == 0 &&
      m.moe.shared_experts == 0 && m.moe.expert_ffn == 0) {
    m.moe.top_k = 0;
  }
  if (given(flags, "params")) {
    m.params_override = static_cast<int64_t>(std::llround(real(flags, "params", 0)));
    changed = true;
  }
  if (changed && given(flags, "model") && !text(flags, "model", "").empty()) {
    m.name += " (modified)";
  }
  validate(m);
  return m;
}

Cluster cluster_from_flags(const json& flags) {
  // --cluster "" goes on to parse_cluster, which says it is empty.
  DTRAIN_CHECK(given(flags, "cluster"),
               "--cluster is required: NODESxGPUSxTYPE (e.g. 8x8xH100) or a "
               ".json file");
  const json& spec = flags.at("cluster");
  Cluster c = spec.is_object() ? cluster_from_json(spec, "--cluster")
                               : parse_cluster(text(flags, "cluster", ""));
  if (given(flags, "nodes")) c.nodes = small(flags, "nodes", 0);
  if (given(flags, "gpus-per-node")) c.gpus_per_node = small(flags, "gpus-per-node", 0);
  if (given(flags, "gpu-memory")) {
    const std::string memory = text(flags, "gpu-memory", "");
    // A bare number would be bytes: "80" is a GPU of 80 bytes, on which nothing fits.
    DTRAIN_CHECK(memory.find_first_not_of("0123456789") != std::string::npos || memory.empty(),
                 "--gpu-memory: '", memory, "' has no unit; write ", memory, "GB (10^9 bytes) or ",
                 memory, "GiB (2^30 bytes)");
    c.gpu.memory_bytes = static_cast<double>(parse_bytes(memory, "--gpu-memory"));
    DTRAIN_CHECK(c.gpu.memory_bytes >= kMinGpuMemoryBytes, "--gpu-memory: ", memory,
                 " is not a GPU's memory (at least 128MiB; e.g. 80GB, 40GiB)");
  }
  if (given(flags, "peak-tflops")) c.gpu.peak_flops = real(flags, "peak-tflops", 0) * 1e12;
  if (given(flags, "compute-efficiency")) {  // one efficiency for every product: no rates
    c.gpu.compute_efficiency = real(flags, "compute-efficiency", 0);
    c.gpu.rates = {};
  }
  if (given(flags, "intra-bandwidth")) {
    c.intra_node.bandwidth_bytes_per_s = real(flags, "intra-bandwidth", 0) * 1e9;
  }
  if (given(flags, "intra-latency-us"))
    c.intra_node.latency_us = real(flags, "intra-latency-us", 0);
  if (given(flags, "inter-bandwidth")) {
    c.inter_node.bandwidth_bytes_per_s = real(flags, "inter-bandwidth", 0) * 1e9;
  }
  if (given(flags, "inter-latency-us"))
    c.inter_node.latency_us = real(flags, "inter-latency-us", 0);
  validate(c);
  return c;
}

Training training_from_flags(const json& flags, const ModelShape& m) {
  Training t;
  DTRAIN_CHECK(given(flags, "global-batch") || m.default_global_batch > 0,
               "--global-batch is required (sequences per step): model '", m.name,
               "' has no default");
  t.global_batch = whole(flags, "global-batch", m.default_global_batch);
  t.tokens = real(flags, "tokens", m.default_tokens);
  t.engine_threads = static_cast<int>(whole(flags, "threads", 1));
  if (given(flags, "achieved-tflops")) {
    t.achieved_flops_per_gpu = real(flags, "achieved-tflops", 0) * 1e12;
  }
  if (given(flags, "step-time")) t.step_time_s = real(flags, "step-time", 0);
  const std::string precision_text = text(flags, "precision", "mixed");
  const auto precision = parse_precision(precision_text);
  DTRAIN_CHECK(precision.has_value(), "--precision must be one of ", precision_names(), "; got '",
               precision_text, "'");
  t.state_bytes = *precision;
  t.activation_bytes = whole(flags, "activation-bytes", 2);
  const std::string flops_text = text(flags, "flops", "narayanan");
  const auto flops = parse_flops_convention(flops_text);
  DTRAIN_CHECK(flops.has_value(), "--flops must be narayanan or 6nd, got '", flops_text, "'");
  t.flops = *flops;
  const std::string selective_text = text(flags, "selective-flops", "eq8");
  const auto selective = parse_selective_flops(selective_text);
  DTRAIN_CHECK(selective.has_value(), "--selective-flops must be eq8 or rerun, got '",
               selective_text, "'");
  t.selective_flops = *selective;
  t.bucket_bytes =
      static_cast<double>(parse_bytes(text(flags, "bucket-size", "25MiB"), "--bucket-size"));
  if (given(flags, "tokens-per-expert")) {
    const json& v = flags.at("tokens-per-expert");
    DTRAIN_CHECK(v.is_array(), "--tokens-per-expert must be a list of numbers, got ", v.dump());
    for (const json& n : v) {
      DTRAIN_CHECK(n.is_number(), "--tokens-per-expert must be a list of numbers, got ", v.dump());
      t.tokens_per_expert.push_back(n.get<double>());
    }
  }
  return t;
}

Layout layout_from_flags(const json& flags, const PlanInput& in) {
  const Cluster& c = in.cluster;
  Layout l;
  l.cp = small(flags, "cp", 1);
  const std::string cp_algo = text(flags, "cp-algo", "auto");
  l.cp_algo = cp_algo_flag(cp_algo);
  DTRAIN_CHECK(l.cp == 1 || l.cp <= c.world(), "--cp ", l.cp, " is more than the cluster's ",
               c.world(), " GPUs");
  // Alone, --cp-algo passes at a default (plan's auto, train's ring: its --dump-config writes it).
  DTRAIN_CHECK(l.cp > 1 || !given(flags, "cp-algo") || cp_algo == "auto" || cp_algo == "ring",
               "--cp-algo picks context parallelism's algorithm: add --cp N (N > 1)");
  l.tp = small(flags, "tp", 1);
  l.pp = small(flags, "pp", 1);
  l.vp = static_cast<int>(whole(flags, "vp", 1));
  l.ep = small(flags, "ep", 1);
  l.zero_stage = static_cast<int>(whole(flags, "zero", 0));
  l.micro_batch = whole(flags, "micro-batch", 1);
  l.sequence_parallel = on(flags, "sequence-parallel");
  if (given(flags, "dp")) {
    l.dp = small(flags, "dp", 0);
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
  if (given(flags, "microbatches")) {
    // M micro-batches per replica: b = B / (dp x M).
    const int64_t microbatches = whole(flags, "microbatches", 0);
    DTRAIN_CHECK(!given(flags, "micro-batch"), "give --micro-batch or --microbatches, not both");
    DTRAIN_CHECK(microbatches >= 1, "--microbatches must be >= 1, got ", microbatches);
    const int64_t per_replica = l.dp > 0 ? in.training.global_batch / l.dp : 0;
    DTRAIN_CHECK(
        l.dp > 0 && in.training.global_batch % l.dp == 0 && per_replica % microbatches == 0,
        "--microbatches ", microbatches, " does not divide --global-batch ",
        in.training.global_batch, " / --dp ", l.dp, " into whole micro-batches");
    l.micro_batch = per_replica / microbatches;
  }
  l.recompute = recompute_flag(text(flags, "recompute", "none"));
  const std::string schedule = text(flags, "schedule", "1f1b");
  bool found = false;
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                         ScheduleKind::zero_bubble_h1}) {
    if (schedule == name(k)) {
      l.schedule = k;
      found = true;
    }
  }
  DTRAIN_CHECK(found, "--schedule must be gpipe, 1f1b, interleaved or zb-h1, got '", schedule, "'");
  const std::string order_text = text(flags, "rank-order", "tp-dp-pp");
  const auto order = parse_rank_order(order_text);
  DTRAIN_CHECK(order.has_value(), "--rank-order must list tp, dp and pp innermost first (e.g. ",
               "tp-dp-pp), got '", order_text, "'");
  l.order = *order;
  if (given(flags, "stage-layers")) {
    l.stage_layers = parse_stage_layers(text(flags, "stage-layers", ""), "--stage-layers");
  }
  return l;
}

// --search with layout flags: each one given fixes its axis; the others are searched.
SearchConstraints search_constraints_from_flags(const json& flags) {
  DTRAIN_CHECK(!given(flags, "schedule"),
               "--schedule fixes one layout's schedule; --search ranks 1F1B layouts (interleaved "
               "for --vp > 1): drop --schedule, or drop --search and give the layout");
  DTRAIN_CHECK(!given(flags, "stage-layers"),
               "--stage-layers fixes one layout's split; --search gives each pp the balanced "
               "split: drop --stage-layers, or drop --search and give the layout");
  DTRAIN_CHECK(
      !given(flags, "rank-order"),
      "--rank-order fixes one layout's rank order; --search uses tp-dp-pp (Megatron's): drop "
      "--rank-order, or drop --search and give the layout");
  DTRAIN_CHECK(!(given(flags, "micro-batch") && given(flags, "microbatches")),
               "give --micro-batch or --microbatches, not both");
  SearchConstraints c;
  if (given(flags, "dp")) c.dp = small(flags, "dp", 0);
  if (given(flags, "tp")) c.tp = small(flags, "tp", 0);
  if (given(flags, "pp")) c.pp = small(flags, "pp", 0);
  if (given(flags, "vp")) c.vp = static_cast<int>(whole(flags, "vp", 1));
  if (given(flags, "zero")) c.zero_stage = static_cast<int>(whole(flags, "zero", 0));
  if (given(flags, "micro-batch")) c.micro_batch = whole(flags, "micro-batch", 1);
  if (given(flags, "microbatches")) c.microbatches = whole(flags, "microbatches", 1);
  if (on(flags, "sequence-parallel")) c.sequence_parallel = true;
  if (given(flags, "recompute")) c.recompute = recompute_flag(text(flags, "recompute", "none"));
  if (given(flags, "cp")) c.cp = small(flags, "cp", 1);
  if (given(flags, "cp-algo")) c.cp_algo = cp_algo_flag(text(flags, "cp-algo", "auto"));
  if (given(flags, "ep")) c.ep = small(flags, "ep", 1);
  return c;
}

void check_plan_flags(const json& flags) {
  DTRAIN_CHECK(flags.is_object(), "a plan request is a JSON object of dtrain plan's flags, got ",
               flags.dump());
  const bool searching = on(flags, "search");
  DTRAIN_CHECK(searching || !given(flags, "top"),
               "--top sets how many layouts --search prints: add --search, or drop --top");
  DTRAIN_CHECK(!searching || (!given(flags, "achieved-tflops") && !given(flags, "step-time")),
               "--achieved-tflops and --step-time describe one measured layout; --search ranks "
               "layouts by the model's predicted time: drop one of them");
}

const json& request_of(const json& request_or_report) {
  // A report has its request; a request never has that key (no flag is named "request").
  if (request_or_report.is_object() && request_or_report.contains("request")) {
    return request_or_report.at("request");
  }
  return request_or_report;
}

PlanAnswer answer_plan(const json& flags) {
  check_plan_flags(flags);
  const bool searching = on(flags, "search");
  PlanAnswer answer;
  answer.request = flags;
  PlanInput& input = answer.input;
  input.cluster = cluster_from_flags(flags);
  input.model = model_from_flags(flags);
  input.training = training_from_flags(flags, input.model);
  // At its default (1) --threads passes alone, as train's --dump-config writes it.
  DTRAIN_CHECK(!given(flags, "threads") || input.training.engine_threads == 1 ||
                   has_measured_rates(input.cluster),
               "--threads applies to the engine clock only: pass --cluster FILE with measured "
               "rates (dtrain calibrate --compute -o FILE)");
  if (has_measured_rates(input.cluster)) {
    use_engine_profile(input, given(flags, "precision"), given(flags, "activation-bytes"));
  }
  validate(input);
  if (searching) {
    SearchOptions options;
    options.top = static_cast<int>(whole(flags, "top", options.top));
    options.fixed = search_constraints_from_flags(flags);
    answer.search = search(input, options);
    return answer;
  }
  answer.plan = evaluate(input, layout_from_flags(flags, input));
  const Plan& p = *answer.plan;
  // A measured rate belongs to a run of this layout; one that cannot fit was never measured, and
  // its MFU and days would describe nothing.
  const bool measured = given(flags, "step-time") || given(flags, "achieved-tflops");
  DTRAIN_CHECK(!measured || p.memory.fits(),
               given(flags, "step-time") ? "--step-time" : "--achieved-tflops",
               " describes a measured run of this layout, but the layout does not fit: a GPU "
               "needs ",
               format_gb(p.memory.total()), " of its ", format_gb(p.memory.capacity),
               "; check the layout flags (--tp, --pp, --zero, --micro-batch, --recompute) "
               "against the run that was measured");
  return answer;
}

json answer_json(const PlanAnswer& answer) {
  json j;
  if (answer.search) {
    j = search_json(answer.input, *answer.search);
  } else {
    j = input_json(answer.input);
    j["plan"] = plan_json(*answer.plan);
  }
  // The flags as read: the report carries its own request, which answers it again.
  j["request"] = answer.request;
  return j;
}

std::string answer_text(const PlanAnswer& answer) {
  if (answer.search) return format_search(answer.input, *answer.search);
  return format_plan(answer.input, *answer.plan);
}

std::string plan_request(std::string_view request_json) {
  const json parsed = json::parse(request_json, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return json{{"error", "the plan request is not valid JSON"}}.dump();
  }
  try {
    return answer_json(answer_plan(request_of(parsed))).dump();
  } catch (const std::exception& e) {
    return json{{"error", e.what()}}.dump();
  }
}

}  // namespace dtrain::plan
