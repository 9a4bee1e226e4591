// evaluate: one layout's memory, traffic and time, composed from the formula headers.
// (search lives in search.cc; the stage split and per-stage parameters in stage_params.cc; a
// stage's memory in stage_memory.cc; the step's time in step_time.cc; what search shares
// between layouts in pricing_memo.cc.)
#include "dtrain/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "dtrain/clock/engine_clock.h"
#include "dtrain/clock/time_model.h"
#include "dtrain/core/check.h"
#include "dtrain/cost/pipeline_stages.h"
#include "dtrain/machine/format.h"
#include "dtrain/plan/planner_internal.h"
#include "dtrain/plan/pricing_memo.h"
#include "dtrain/schedule/pipeline_schedule.h"
#include "dtrain/schedule/pipeline_simulation.h"

namespace dtrain::plan {

using namespace detail;

namespace {

// The flags the planner's stage-split errors name.
const PartitionFlags kPartitionFlags{"--pp", "--layers", "--stage-layers", "--vp"};

}  // namespace

void use_engine_profile(PlanInput& in, bool precision_given, bool activation_bytes_given) {
  if (!precision_given) in.training.state_bytes = kFp32Adam;
  if (!activation_bytes_given) in.training.activation_bytes = 4;
  in.training.activation_count =
      in.training.activation_bytes >= 4 ? ActivationCount::engine : ActivationCount::engine_mixed;
  in.model.count_final_norm = true;
}

std::string_view name(StepTimeSource s) {
  switch (s) {
    case StepTimeSource::predicted:
      return "predicted";
    case StepTimeSource::achieved_flops:
      return "--achieved-tflops";
    case StepTimeSource::measured_step:
      return "--step-time";
  }
  return "?";
}

namespace {

std::string joined(const std::vector<int>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += str(i == 0 ? "" : ",", values[i]);
  return s;
}

}  // namespace

std::string describe(const Layout& l) {
  std::string s = str("dp=", l.dp, " tp=", l.tp, " pp=", l.pp);
  if (!l.stage_layers.empty()) s += str(" stage-layers=", joined(l.stage_layers));
  if (l.cp > 1) s += str(" cp=", l.cp, "(", name(l.cp_algo), ")");
  if (l.ep > 1) s += str(" ep=", l.ep);
  if (l.vp > 1) s += str(" v=", l.vp);
  s += str(" zero=", l.zero_stage, " b=", l.micro_batch, " rc=", name(l.recompute));
  if (l.sequence_parallel) s += " sp";
  if (l.vp == 1 && l.schedule != ScheduleKind::one_f_one_b) s += str(" ", name(l.schedule));
  if (!(l.order == RankOrder{})) s += " order=" + to_string(l.order);
  return s;
}

std::string layout_flags(const Layout& l) {
  std::string s = str("--dp ", l.dp, " --tp ", l.tp, " --pp ", l.pp);
  if (!l.stage_layers.empty()) s += str(" --stage-layers ", joined(l.stage_layers));
  if (l.cp > 1) s += str(" --cp ", l.cp, " --cp-algo ", name(l.cp_algo));
  if (l.ep > 1) s += str(" --ep ", l.ep);
  if (l.vp > 1) s += str(" --vp ", l.vp);
  s += str(" --zero ", l.zero_stage, " --micro-batch ", l.micro_batch, " --recompute ",
           name(l.recompute));
  if (l.sequence_parallel) s += " --sequence-parallel";
  if (l.vp == 1 && l.schedule != ScheduleKind::one_f_one_b)
    s += str(" --schedule ", name(l.schedule));
  if (!(l.order == RankOrder{})) s += " --rank-order " + to_string(l.order);
  return s;
}

void validate(const PlanInput& in) {
  validate(in.model);
  validate(in.cluster);
  DTRAIN_CHECK(in.training.global_batch > 0, "--global-batch must be positive, got ",
               in.training.global_batch);
  DTRAIN_CHECK(in.training.global_batch <= kMaxGlobalBatch, "--global-batch must be at most ",
               kMaxGlobalBatch, ", got ", in.training.global_batch);
  DTRAIN_CHECK(in.training.tokens >= 0, "--tokens must not be negative, got ", in.training.tokens);
  const Training& tr = in.training;
  DTRAIN_CHECK(std::isfinite(tr.achieved_flops_per_gpu) && tr.achieved_flops_per_gpu >= 0,
               "--achieved-tflops must be a finite, non-negative number, got ",
               tr.achieved_flops_per_gpu * 1e-12);
  DTRAIN_CHECK(std::isfinite(tr.step_time_s) && tr.step_time_s >= 0,
               "--step-time must be a finite, non-negative number of seconds, got ",
               tr.step_time_s);
  DTRAIN_CHECK(tr.achieved_flops_per_gpu == 0 || tr.step_time_s == 0,
               "give --achieved-tflops or --step-time, not both");
  DTRAIN_CHECK(tr.achieved_flops_per_gpu <= in.cluster.gpu.peak_flops, "--achieved-tflops ",
               tr.achieved_flops_per_gpu * 1e-12, " exceeds the GPU's peak of ",
               in.cluster.gpu.peak_flops * 1e-12, " TFLOP/s");
  DTRAIN_CHECK(in.training.tokens <= kMaxTokens, "--tokens must be at most ", kMaxTokens, ", got ",
               in.training.tokens);
  DTRAIN_CHECK(in.training.activation_bytes > 0, "--activation-bytes must be positive, got ",
               in.training.activation_bytes);
  DTRAIN_CHECK(in.training.activation_bytes <= kMaxActivationBytes,
               "--activation-bytes must be at most ", kMaxActivationBytes, ", got ",
               in.training.activation_bytes);
  DTRAIN_CHECK(in.training.bucket_bytes > 0, "--bucket-size must be positive, got ",
               in.training.bucket_bytes);
  const StateBytes& sb = in.training.state_bytes;
  if (in.model.moe.enabled()) {
    // The engine's routed layer keeps what moe_mlp_activation_bytes counts (the router's
    // probabilities, each routed row's input, GELU input and output, and output: model/ops/moe.h's
    // MoeExpertCache), so the engine's activation count covers it. The engine clock prices the
    // engine's MoE layer: GPT experts of the dense MLP's shape, no shared experts, no TP.
    if (has_measured_rates(in.cluster)) {
      const MoeShape& moe = in.model.moe;
      DTRAIN_CHECK(in.model.family == ModelFamily::gpt && moe.shared_experts == 0 &&
                       (moe.expert_ffn == 0 || moe.expert_ffn == in.model.ffn_or_default()) &&
                       !in.model.mla.enabled(),
                   "--model ", in.model.name,
                   ": a cluster file with measured CPU rates (gpu.measured) prices dtrain's own "
                   "engine, whose MoE layer has GPT experts of the dense MLP's shape (no "
                   "--shared-experts, --expert-ffn, MLA); plan this model on a GPU cluster (e.g. "
                   "--cluster 8x8xH100)");
    }
    if (!in.training.tokens_per_expert.empty()) {
      MoeDispatch d;  // checks the routing's length and entries
      d.tokens = 1;
      d.hidden = in.model.hidden;
      d.top_k = in.model.moe.top_k;
      d.experts = in.model.moe.experts;
      d.tokens_per_expert = in.training.tokens_per_expert;
      dispatch_bytes(d, 0);
    }
  } else {
    DTRAIN_CHECK(in.training.tokens_per_expert.empty(),
                 "--tokens-per-expert is an MoE model's routing: add --experts E");
  }
  DTRAIN_CHECK(sb.param > 0 && sb.grad > 0 && sb.optimizer >= 0,
               "--precision: bytes per parameter must be positive");
}

std::string layout_error(const PlanInput& in, const Layout& l) {
  const ModelShape& m = in.model;
  const int gpus = in.cluster.world();
  if (l.dp < 1) return str("--dp must be >= 1, got ", l.dp);
  if (l.tp < 1) return str("--tp must be >= 1, got ", l.tp);
  if (l.pp < 1) return str("--pp must be >= 1, got ", l.pp);
  if (l.cp < 1) return str("--cp must be >= 1, got ", l.cp);
  if (l.ep < 1) return str("--ep must be >= 1, got ", l.ep);
  if (l.vp < 1) return str("--vp must be >= 1, got ", l.vp);
  if (l.micro_batch < 1) return str("--micro-batch must be >= 1, got ", l.micro_batch);
  // Bounded before they are multiplied together.
  for (const auto& [flag, value] : {std::pair{"--dp", l.dp}, std::pair{"--tp", l.tp},
                                    std::pair{"--pp", l.pp}, std::pair{"--cp", l.cp}}) {
    if (value > kMaxGpus) return str(flag, " ", value, " is more than ", kMaxGpus, " GPUs");
  }
  if (l.vp > m.layers) return str("--vp ", l.vp, " is more than --layers ", m.layers);
  if (l.micro_batch > in.training.global_batch) {
    return str("--micro-batch ", l.micro_batch, " is larger than --global-batch ",
               in.training.global_batch);
  }
  if (l.zero_stage < 0 || l.zero_stage > 3) {
    return str("--zero must be 0, 1, 2 or 3, got ", l.zero_stage);
  }
  if (l.cp > gpus) return str("--cp ", l.cp, " is more than the cluster's ", gpus, " GPUs");
  if (l.cp > 1 && static_cast<int64_t>(l.dp) * l.cp * l.tp * l.pp != gpus) {
    return str("--dp ", l.dp, " x --cp ", l.cp, " x --tp ", l.tp, " x --pp ", l.pp, " = ",
               static_cast<int64_t>(l.dp) * l.cp * l.tp * l.pp,
               " GPUs does not match the cluster's ", gpus, " (", in.cluster.nodes, " nodes x ",
               in.cluster.gpus_per_node, ")");
  }
  if (static_cast<int64_t>(l.dp) * l.cp * l.tp * l.pp != gpus) {
    return str("--dp ", l.dp, " x --tp ", l.tp, " x --pp ", l.pp, " = ",
               static_cast<int64_t>(l.dp) * l.tp * l.pp, " GPUs does not match the cluster's ",
               gpus, " (", in.cluster.nodes, " nodes x ", in.cluster.gpus_per_node, ")");
  }
  if (m.heads % l.tp != 0) return str("--tp ", l.tp, " does not divide --heads ", m.heads);
  if (m.moe.enabled() && has_measured_rates(in.cluster)) {
    // What the engine clock prices of dtrain's MoE layer so far (engine_clock_moe_gap).
    const std::string gap =
        engine_clock_moe_gap(true, l.tp, l.ep, l.zero_stage, l.recompute,
                             in.training.activation_bytes < 4 ? Precision::bf16 : Precision::fp32);
    if (!gap.empty()) return str(gap, "; plan it on a GPU cluster (e.g. --cluster 8x8xH100)");
  }
  if (l.ep > 1) {
    if (!m.moe.enabled()) return str("--ep ", l.ep, " needs an MoE model (--experts E)");
    if (l.dp % l.ep != 0) {
      return str("--ep ", l.ep, " does not divide --dp ", l.dp,
                 " (expert parallelism is carved from the data-parallel ranks)");
    }
    if (m.moe.experts % l.ep != 0) {
      return str("--ep ", l.ep, " does not divide --experts ", m.moe.experts);
    }
    if (l.cp > 1) return str("--ep ", l.ep, " with --cp ", l.cp, ": not modelled yet");
  }
  const int64_t kv = m.kv_heads_or_heads();
  if (kv % l.tp != 0 && l.tp % kv != 0) {
    return str("--tp ", l.tp, " neither divides nor is a multiple of --kv-heads ", kv);
  }
  // The stage split: --stage-layers as given, else the balanced split (pipeline_stages.h),
  // whose first and last stage get the fewer layers when --pp does not divide them. The
  // interleaved schedule is planned on equal model chunks.
  if (!l.stage_layers.empty()) {
    if (l.pp == 1) return "--stage-layers needs --pp 2 or more";
    if (l.vp > 1) {
      return str("--stage-layers with --vp ", l.vp,
                 ": the interleaved schedule is planned on equal model chunks (--pp x --vp "
                 "dividing --layers); drop --stage-layers");
    }
    try {
      explicit_partition(static_cast<int>(m.layers), l.pp, 1, l.stage_layers, kPartitionFlags);
    } catch (const Error& e) {
      return e.what();
    }
  } else if (l.vp > 1) {
    if (m.layers % (static_cast<int64_t>(l.pp) * l.vp) != 0) {
      return str("--pp ", l.pp, " x --vp ", l.vp, " = ", int64_t{l.pp} * l.vp,
                 " does not divide --layers ", m.layers,
                 " (the interleaved schedule is planned on equal model chunks)");
    }
  } else if (l.pp > m.layers) {
    return str("--pp ", l.pp, " is larger than --layers ", m.layers);
  }
  if (has_measured_rates(in.cluster) && !even_split(m, l)) {
    return str(l.stage_layers.empty() ? str("--pp ", l.pp, " does not divide --layers ", m.layers)
                                      : str("--stage-layers ", joined(l.stage_layers)),
               ": the engine clock (a cluster file with gpu.measured) prices equal stages only; "
               "give --pp dividing --layers, or plan it on a GPU cluster (e.g. --cluster "
               "8x8xH100)");
  }
  if (l.cp > 1) {
    const CpShape cs = cp_shape(in, l);
    if (l.cp_algo == CpAlgorithm::automatic) {
      // auto needs one algorithm that can run: the sequence divides, then ring's 2 x cp or
      // ulysses' heads (the words only when neither can).
      if (!cp_layout_ok(cs, CpAlgorithm::ring) && !cp_layout_ok(cs, CpAlgorithm::ulysses)) {
        const std::string ring = cp_layout_error(cs, CpAlgorithm::ring);
        if (m.seq % l.cp != 0) return ring;
        return str(ring, "; nor can ulysses run: ", cp_layout_error(cs, CpAlgorithm::ulysses));
      }
    } else if (!cp_layout_ok(cs, l.cp_algo)) {
      return cp_layout_error(cs, l.cp_algo);
    }
  }
  const int64_t per_step = static_cast<int64_t>(l.dp) * l.micro_batch;
  if (in.training.global_batch % per_step != 0) {
    return str("--micro-batch ", l.micro_batch, " x --dp ", l.dp, " = ", per_step,
               " does not divide --global-batch ", in.training.global_batch);
  }
  if (l.vp > 1) {
    if (l.pp == 1) return str("--vp ", l.vp, " needs --pp > 1");
    if (l.schedule != ScheduleKind::one_f_one_b && l.schedule != ScheduleKind::interleaved) {
      return str("--vp ", l.vp, " needs the interleaved schedule, not --schedule ",
                 name(l.schedule));
    }
    const int64_t microbatches = in.training.global_batch / per_step;
    if (microbatches % l.pp != 0) {
      return str("--vp ", l.vp, ": the interleaved schedule needs the micro-batch count (",
                 microbatches,
                 " = --global-batch / (--micro-batch x --dp)) to be a multiple of --pp ", l.pp);
    }
  }
  return {};
}

namespace {

// How evaluate_local times the pipeline: the schedule replayed (evaluate), or a lower bound on
// its makespan (evaluate_lower_bound and step_lower_bound, what search ranks by before it
// replays), or not at all (evaluate_memory: the memory alone, what search needs of a layout
// that does not fit).
enum class PipelineTiming { simulated, lower_bound, none };
// Whether evaluate_local prices the memory: step_lower_bound needs the step's bound alone.
enum class Memory { priced, skipped };

}  // namespace

ScheduleKind detail::schedule_of(const Layout& l) {
  return l.vp > 1 ? ScheduleKind::interleaved : l.schedule;
}

// With more TP ranks than key/value heads, each rank keeps a copy of one K/V head (as vLLM and
// TensorRT-LLM do): the per-rank shape has tp K/V heads, so the copies' weights, activations and
// FLOPs are counted; the model FLOPs (MFU) stay those of the real model.
PlanInput detail::per_rank_input(const PlanInput& in, const Layout& l) {
  PlanInput local = in;
  local.model.kv_heads = l.tp;
  return local;
}

PlanInput detail::linked_input(const PlanInput& given) {
  PlanInput in = given;
  in.cluster = effective_links(given.cluster);
  return in;
}

namespace {

// evaluate on the per-rank shape `in.model`; `real_model` gives the model FLOPs.
Plan evaluate_local(const PlanInput& given, const ModelShape& real_model, const Layout& l,
                    PipelineTiming timing, Memory memory, PricingMemo* memo) {
  Plan plan;
  plan.layout = l;
  const int64_t microbatches =
      given.training.global_batch / (static_cast<int64_t>(l.dp) * l.micro_batch);
  plan.microbatches = microbatches;
  const double mb = static_cast<double>(microbatches);

  // The stages' blocks are reported with a replayed plan only (search prices 1e5 layouts).
  if (timing == PipelineTiming::simulated) {
    plan.stage_layers = pipeline_stage_layers(given.model, l);
  }
  if (memory == Memory::priced) plan.memory = heaviest_stage_memory(given, l, microbatches, memo);
  if (timing == PipelineTiming::none) return plan;

  // Collectives are priced at the share of the links' bandwidth they reach (rates.h); search
  // keeps that input in its memo.
  std::optional<PlanInput> local;  // built only without the memo
  const PlanInput& in = memo != nullptr ? memo->linked(given) : local.emplace(linked_input(given));
  const Cluster& c = in.cluster;

  const AxisSizes sizes{l.dp, l.tp, l.pp, l.cp};
  const auto [tp_forward_s, tp_backward_s] = tp_times(
      in, l, microbatches, place_group(Axis::tp, sizes, l.order, c.gpus_per_node), &plan.traffic);
  const double pp_send_s =
      pp_send_time(in, l, microbatches, place_group(Axis::pp, sizes, l.order, c.gpus_per_node),
                   &plan.traffic, &plan.pp_bytes_per_stage);

  const auto [cp_forward_s, cp_backward_s] =
      cp_times(in, l, microbatches, place_group(Axis::cp, sizes, l.order, c.gpus_per_node), &plan);
  const auto [ep_forward_s, ep_backward_s] =
      ep_times(in, l, microbatches, place_data_group(sizes, l.order, c.gpus_per_node), &plan);
  StageComm comm;
  comm.tp_forward_s = tp_forward_s;
  comm.tp_backward_s = tp_backward_s;
  comm.cp_forward_s = cp_forward_s;
  comm.cp_backward_s = cp_backward_s;
  comm.layers = most_stage_layers(in.model, l);
  comm.ep_forward_s = ep_forward_s;
  comm.ep_backward_s = ep_backward_s;
  comm.routed = plan.moe.moe_layers;
  const StageCompute sc = stage_compute(
      in, real_model, l, comm, memo != nullptr ? &memo->times(in, real_model, l) : nullptr);

  // The slowest stage's times, TP and CP collectives and sends included (reported), and the
  // schedule simulated on every virtual stage (pipeline_simulation.h): each stage's own blocks
  // with their TP and CP collectives (L / (P v) per chunk with v > 1), the embedding on the
  // first, the head on the last; a rank is held by its sends, as Megatron's batched
  // send/receive is waited for.
  StageTimes times = sc.stage_times;
  times.forward += pp_send_s;
  times.backward_input += pp_send_s;
  PipelineSimulationInput simulation;
  simulation.virtual_stage_times = sc.virtual_stage_times;
  simulation.send_s = pp_send_s / l.vp;
  TimeBreakdown& t = plan.time;
  if (timing == PipelineTiming::simulated) {
    const PipelineSimulation pipeline =
        cached_pipeline_replay(schedule_of(l), l.pp, static_cast<int>(microbatches), l.vp)
            ->run(simulation);
    t.bubble = pipeline.bubble();
    t.pp_s = pipeline.ranks[static_cast<size_t>(pipeline.critical_rank)].sending_s;
  } else {
    // Only the makespan: the step below grows with it (a sum of it and terms that do not
    // depend on the pipeline), so the step is bounded as the makespan is.
    t.bubble.total_time = pipeline_makespan_lower_bound(
        schedule_of(l), l.pp, static_cast<int>(microbatches), l.vp, simulation);
  }
  t.stage_times = times;
  t.virtual_stage_times = simulation.virtual_stage_times;
  t.pp_message_s = simulation.send_s;
  t.compute_s = mb * (sc.forward_s + sc.backward_s);
  t.recompute_s = mb * sc.recompute_s;
  t.tp_s = mb * (tp_forward_s + tp_backward_s);
  t.bubble_s = t.bubble.bubble_time;
  dp_times(in, l, microbatches, sc, place_data_group(sizes, l.order, c.gpus_per_node),
           &plan.traffic, &t);

  t.optimizer_s = sc.optimizer_s;
  t.step_no_overlap_s = t.bubble.total_time + t.dp_s + t.optimizer_s;
  t.step_s = t.bubble.total_time + t.dp_exposed_s + t.optimizer_s;
  if (has_measured_rates(c)) {
    // The engine clock's step has its own replay; its bound is only that a step is not
    // negative (search then replays every fitting layout of such a cluster: they are few).
    if (timing == PipelineTiming::simulated) {
      engine_clock_times(in, l, microbatches, &t);
    } else {
      t.step_s = 0;
    }
  }
  t.predicted_step_s = t.step_s;
  const double gpus = static_cast<double>(c.world());
  t.model_flops = sc.total.model;
  t.hardware_flops = sc.total.hardware();
  if (in.training.step_time_s > 0) {
    t.step_s = in.training.step_time_s;
    t.step_source = StepTimeSource::measured_step;
    // A measured step shorter than the layout's FLOPs at the GPUs' peak cannot have happened,
    // as --achieved-tflops above the peak cannot (validate refuses that one).
    const double per_gpu = t.hardware_flops / (t.step_s * gpus);
    DTRAIN_CHECK(per_gpu <= c.gpu.peak_flops, "--step-time ", format_seconds(t.step_s),
                 " is shorter than this layout's step can be: its ", format_sci(t.hardware_flops),
                 " FLOPs per step (recomputation included) on ", c.world(), " GPUs would run at ",
                 format_fixed(per_gpu * 1e-12, 1), " TFLOP/s per GPU, above the GPU's peak of ",
                 format_fixed(c.gpu.peak_flops * 1e-12, 1),
                 " TFLOP/s; give the measured seconds per optimizer step");
  } else if (in.training.achieved_flops_per_gpu > 0) {
    t.step_s = t.hardware_flops / (gpus * in.training.achieved_flops_per_gpu);
    t.step_source = StepTimeSource::achieved_flops;
  }
  const double step_tokens = static_cast<double>(in.training.global_batch * in.model.seq);
  t.tokens_per_s = step_tokens / t.step_s;
  t.mfu = t.model_flops / (t.step_s * gpus * c.gpu.peak_flops);
  t.hfu = t.hardware_flops / (t.step_s * gpus * c.gpu.peak_flops);
  t.hardware_flops_per_gpu = t.hardware_flops / (t.step_s * gpus);
  t.cluster_flops_per_s = t.hardware_flops / t.step_s;
  t.days = in.training.tokens > 0 ? days_to_train(in.training.tokens, t.tokens_per_s) : 0;
  if (in.training.tokens > 0) {
    const double iterations = in.training.tokens / step_tokens;
    t.total_flops_6nd =
        6.0 * static_cast<double>(model_flops_param_count(real_model)) * in.training.tokens;
    t.total_model_flops = t.model_flops * iterations;
    t.total_hardware_flops = t.hardware_flops * iterations;
  }
  return plan;
}

}  // namespace

namespace {

// The layout with its CP algorithm chosen (choose_cp_algorithm's rule, the ring's overlap from
// the clock) when it is automatic; `why` (unless null) says why.
Layout resolve_cp(const PlanInput& in, const Layout& given, std::string* why,
                  PricingMemo* memo = nullptr) {
  Layout l = given;
  if (l.cp == 1) return l;
  if (l.cp_algo != CpAlgorithm::automatic) {
    if (why != nullptr) *why = str(name(l.cp_algo), ": given by --cp-algo");
    return l;
  }
  // The CP group's placement (with b, tp, cp, recompute and sp) decides the choice: search
  // asks the memo by it.
  const GroupPlacement cp_group =
      place_group(Axis::cp, AxisSizes{l.dp, l.tp, l.pp, l.cp}, l.order, in.cluster.gpus_per_node);
  if (memo != nullptr && why == nullptr) {
    if (const std::optional<CpAlgorithm> known = memo->cp_algorithm(l, cp_group)) {
      l.cp_algo = *known;
      return l;
    }
  }
  bool hidden = false;
  const CpShape shape = cp_shape(in, l);
  if (cp_layout_ok(shape, CpAlgorithm::ring)) {
    const AxisSizes sizes{l.dp, l.tp, l.pp, l.cp};
    const Cluster links = effective_links(in.cluster);
    PlanInput priced = in;
    priced.cluster = links;
    hidden =
        ring_timing(priced, l, place_group(Axis::cp, sizes, l.order, links.gpus_per_node)).hidden();
  }
  const CpChoice choice = choose_cp_algorithm(shape, l.recompute, hidden, why != nullptr);
  if (memo != nullptr) memo->set_cp_algorithm(l, cp_group, choice.algorithm);
  l.cp_algo = choice.algorithm;
  if (why != nullptr) *why = choice.why;
  return l;
}

}  // namespace

MemoryBreakdown stage_memory(const PlanInput& in, const Layout& given, int stage) {
  const std::string error = layout_error(in, given);
  if (!error.empty()) throw Error(error);
  const Layout l = resolve_cp(in, given, nullptr);
  DTRAIN_CHECK(stage >= 0 && stage < l.pp, "stage ", stage, " outside 0..", l.pp - 1);
  const int64_t microbatches =
      in.training.global_batch / (static_cast<int64_t>(l.dp) * l.micro_batch);
  if (in.model.kv_heads_or_heads() >= l.tp) {
    return memory_of_stage(in, l, microbatches, stage, layer_activations(in, l));
  }
  const PlanInput local = per_rank_input(in, l);
  return memory_of_stage(local, l, microbatches, stage, layer_activations(local, l));
}

namespace {

Plan evaluate_timed(const PlanInput& in, const Layout& given, PipelineTiming timing,
                    Memory memory = Memory::priced, PricingMemo* memo = nullptr) {
  const std::string error = layout_error(in, given);
  if (!error.empty()) throw Error(error);
  // Only a replayed plan is reported, with its CP algorithm's reason.
  std::string why;
  const Layout l =
      resolve_cp(in, given, timing == PipelineTiming::simulated ? &why : nullptr, memo);
  Plan p = in.model.kv_heads_or_heads() >= l.tp
               ? evaluate_local(in, in.model, l, timing, memory, memo)
               : evaluate_local(per_rank_input(in, l), in.model, l, timing, memory, memo);
  p.cp.why = why;
  return p;
}

}  // namespace

Plan evaluate(const PlanInput& in, const Layout& given) {
  return evaluate_timed(in, given, PipelineTiming::simulated);
}

Plan detail::evaluate_memory(const PlanInput& in, const Layout& given, PricingMemo& memo) {
  return evaluate_timed(in, given, PipelineTiming::none, Memory::priced, &memo);
}

MemoryBreakdown detail::layout_memory(const PlanInput& in, const Layout& given, PricingMemo& memo) {
  const std::string error = layout_error(in, given);
  if (!error.empty()) throw Error(error);
  const Layout l = resolve_cp(in, given, nullptr, &memo);
  const int64_t microbatches =
      in.training.global_batch / (static_cast<int64_t>(l.dp) * l.micro_batch);
  if (in.model.kv_heads_or_heads() >= l.tp) {
    return heaviest_stage_memory(in, l, microbatches, &memo);
  }
  return heaviest_stage_memory(per_rank_input(in, l), l, microbatches, &memo);
}

double detail::step_lower_bound(const PlanInput& in, const Layout& given, PricingMemo& memo) {
  return evaluate_timed(in, given, PipelineTiming::lower_bound, Memory::skipped, &memo).time.step_s;
}

Plan evaluate_lower_bound(const PlanInput& in, const Layout& given) {
  return evaluate_timed(in, given, PipelineTiming::lower_bound);
}

Plan evaluate_memory(const PlanInput& in, const Layout& given) {
  return evaluate_timed(in, given, PipelineTiming::none);
}

double step_lower_bound(const PlanInput& in, const Layout& given) {
  return evaluate_timed(in, given, PipelineTiming::lower_bound, Memory::skipped).time.step_s;
}

namespace {

double first_stage_state_bytes(const PlanInput& in, const Layout& l, PricingMemo* memo) {
  // The first stage's states, summed as MemoryBreakdown::total() begins its sum: the rest of
  // that sum and the other stages only add bytes (and rounding a sum of non-negative terms
  // never goes below a partial sum), so evaluate's total is never below this.
  if (memo != nullptr && l.stage_layers.empty() && !engine_split(in)) {
    // stage_state_memory's figures from the memo's blocks, with no breakdown filled in.
    const StageBlocks& blocks = in.model.kv_heads_or_heads() >= l.tp
                                    ? memo->blocks(in, l, 0)
                                    : memo->blocks(per_rank_input(in, l), l, 0);
    const int64_t experts = l.ep > 1 ? blocks.expert_params : 0;
    const ModelStateBytes states =
        ep_model_state_bytes(blocks.params - experts, experts, l.dp * l.cp, experts > 0 ? l.ep : 1,
                             l.zero_stage, in.training.state_bytes);
    return static_cast<double>(states.params) + static_cast<double>(states.grads) +
           static_cast<double>(states.optimizer);
  }
  const MemoryBreakdown first = in.model.kv_heads_or_heads() >= l.tp
                                    ? stage_state_memory(in, l, 0, memo)
                                    : stage_state_memory(per_rank_input(in, l), l, 0, memo);
  return first.params + first.grads + first.optimizer;
}

}  // namespace

double memory_lower_bound(const PlanInput& in, const Layout& l) {
  return first_stage_state_bytes(in, l, nullptr);
}

double detail::first_stage_states(const PlanInput& in, const Layout& l, PricingMemo& memo) {
  return first_stage_state_bytes(in, l, &memo);
}

double detail::memory_lower_bound(const PlanInput& in, const Layout& given, PricingMemo& memo,
                                  double states) {
  // And the first stage's blocks' activations, the first term of its activations as
  // memory_of_stage sums them (the terms it adds are bytes, none negative, except a routed
  // layer's difference from the dense MLP, which can be): with the memo's pieces this costs a
  // few products, and sets aside most layouts that cannot fit.
  const Layout l = resolve_cp(in, given, nullptr, &memo);
  const bool copies = in.model.kv_heads_or_heads() < l.tp;
  const LayerActivations& a =
      copies ? memo.activations(per_rank_input(in, l), l) : memo.activations(in, l);
  if (in.model.moe.enabled() && l.recompute != Recompute::full && a.moe_delta < 0) return states;
  const int64_t microbatches =
      in.training.global_batch / (static_cast<int64_t>(l.dp) * l.micro_batch);
  const int64_t layers = l.stage_layers.empty() && !engine_split(in)
                             ? memo.blocks(copies ? per_rank_input(in, l) : in, l, 0).layers
                             : stage_layer_count(in.model, l, 0);
  return states + stage_inflight_microbatches(l, microbatches, 0) * static_cast<double>(layers) *
                      (a.per_layer + a.weight_grad_stash_per_layer);
}

}  // namespace dtrain::plan
