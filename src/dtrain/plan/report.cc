// Text and JSON renderings of PlanInput, Plan and SearchResult; no figure is computed here.
#include "dtrain/plan/report.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "dtrain/core/check.h"
#include "dtrain/machine/format.h"

namespace dtrain::plan {
namespace {

using nlohmann::json;

std::string link_text(const Link& l) {
  return str(l.name, " ", format_rate(l.bandwidth_bytes_per_s), ", ", l.latency_us, " us per step");
}

std::string traffic_link(const GroupTraffic& g, const Cluster& c) {
  std::string s = g.inter_node ? c.inter_node.name : c.intra_node.name;
  s += str(" (", g.nodes, g.nodes == 1 ? " node" : " nodes", g.hierarchical ? ", hierarchical" : "",
           ")");
  return s;
}

std::string memory_section(const PlanInput& in, const Plan& p) {
  const MemoryBreakdown& m = p.memory;
  const Layout& l = p.layout;
  const StateBytes sb = in.training.state_bytes;
  const std::string sharded = l.zero_stage > 0 ? str(" (ZeRO-", l.zero_stage, ")") : "";
  std::string s =
      str("Memory per GPU (pipeline stage ", m.stage, " of ", l.pp, ": ", m.layers, " layers, ",
          format_params(static_cast<double>(m.stage_params)), " parameters per TP rank)\n");
  TextTable table({18, 12});
  auto row = [&](const std::string& what, double bytes, const std::string& note) {
    table.add_row({what, format_gb(bytes), note});
  };
  row("params", m.params, str(sb.param, " B each", l.zero_stage >= 3 ? sharded : ""));
  row("grads", m.grads, str(sb.grad, " B each", l.zero_stage >= 2 ? sharded : ""));
  row("optimizer state", m.optimizer,
      str(sb.optimizer, " B each", l.zero_stage >= 1 ? sharded : ""));
  row("activations", m.activations,
      str(format_fixed(m.inflight_microbatches, 2), " micro-batches in flight x (", m.layers,
          " layers x ", format_gb(m.activation_per_layer), m.head_activations > 0 ? " + head" : "",
          "); recompute ", name(l.recompute), l.sequence_parallel ? ", sequence parallel" : "",
          l.cp > 1 ? str(", cp=", l.cp, " ", name(l.cp_algo), ": ", in.model.seq / l.cp, " tokens")
                   : ""));
  row("temporary", m.temporary,
      str(l.zero_stage == 3 ? "gathered layers (ZeRO-3)" : "gradient bucket",
          l.recompute != Recompute::none ? ", recomputed layer" : "", ", backward workspace"));
  row("total", m.total(),
      "of " + format_gb(m.capacity) + ": " +
          (m.fits() ? str("fits, ", format_gb(m.headroom()), " free")
                    : str("DOES NOT FIT, over by ", format_gb(-m.headroom()))));
  if (m.engine_peak_bytes > 0) {
    row("dtrain engine", m.engine_peak_bytes,
        "what `dtrain train` checks before it runs this layout (its own buckets and in-flight "
        "count)");
  }
  s += table.render();
  s += "  (the CUDA context, NCCL buffers and allocator fragmentation are not counted)\n";
  return s;
}

std::string traffic_section(const PlanInput& in, const Plan& p) {
  std::string s = "Communication per step, one rank\n";
  if (p.traffic.empty()) return s + "  none (a single GPU)\n";
  TextTable table({6, 16, 34, 7, 38, 12, 10, 11});
  table.add_row({"group", "collective", "carries", "ranks", "link", "bytes/rank", "calls", "time",
                 "exposed"});
  for (const GroupTraffic& g : p.traffic) {
    table.add_row({std::string(g.group), std::string(g.op), std::string(g.what),
                   std::to_string(g.size), traffic_link(g, in.cluster), format_gb(g.bytes_per_rank),
                   format_count(static_cast<double>(g.calls)), format_seconds(g.time_s),
                   format_seconds(g.exposed_s)});
  }
  s += table.render();
  s += "  (bytes/rank: what one rank moves per step, sent or read in place: docs/algorithms.md)\n";
  if (!p.pp_bytes_per_stage.empty()) {
    s += "  PP bytes sent per stage (the row above is the busiest; the first and the last send "
         "no gradient and no activation at their ends):";
    for (size_t stage = 0; stage < p.pp_bytes_per_stage.size(); ++stage) {
      if (p.pp_bytes_per_stage.size() > 8 && stage == 3) {
        s += " ...";
        stage = p.pp_bytes_per_stage.size() - 3;
      }
      s += str(stage == 0 ? " " : ", ", stage, ": ", format_gb(p.pp_bytes_per_stage[stage]));
    }
    s += "\n";
  }
  return s;
}

// Context parallelism (cp > 1): the algorithm and why, its bytes per layer and per step, and the
// causal work per rank of the balanced split beside the contiguous one.
std::string cp_section(const PlanInput& in, const Plan& p) {
  const Layout& l = p.layout;
  if (l.cp == 1) return {};
  const CpReport& r = p.cp;
  std::string s = str("Context parallelism: cp=", l.cp, " (each rank holds ", in.model.seq / l.cp,
                      " of the ", in.model.seq, " tokens), ", name(r.algorithm), "\n");
  s += str("  why         ", r.why, "\n");
  auto pass = [](const CpPassTraffic& t) {
    return str(format_gb(t.bytes_sent), " in ", t.messages,
               t.messages == 1 ? " message" : " messages", " (", t.steps, " steps)");
  };
  s += str("  per layer   one rank, one micro-batch: forward ", pass(r.per_layer.forward),
           ", backward ", pass(r.per_layer.backward),
           l.recompute == Recompute::full ? " (the forward's rerun included)" : "", "\n");
  s += str("  per step    one rank: ", format_gb(r.bytes_per_step), " sent (", r.layers,
           " layers x ", p.microbatches,
           " micro-batches); gradients reduced over dp x cp = ", l.dp * l.cp, " ranks",
           l.zero_stage > 0 ? str(", ZeRO shards over ", l.dp * l.cp) : "", "\n");
  s += str(
      "  attention   causal work per rank, busiest / mean: ", format_fixed(r.imbalance_balanced, 3),
      " with the balanced split (chunks r and 2cp-1-r); ", format_fixed(r.imbalance_contiguous, 3),
      " with contiguous chunks (2 - 1/cp = ", format_fixed(cp_contiguous_imbalance_limit(l.cp), 3),
      " as the sequence grows)\n");
  if (r.algorithm == CpAlgorithm::ring) {
    s += str("  ring        a forward hop ", format_seconds(r.ring_hop_s),
             " against one block's "
             "attention compute ",
             format_seconds(r.ring_block_s),
             r.ring_hop_s <= r.ring_block_s ? ": hidden" : ": the excess is exposed", "\n");
  }
  return s;
}

// Mixture of experts: parameters total and active, EP's groups, the experts on a rank, and the
// all-to-all bytes of one routed layer.
std::string moe_section(const PlanInput& in, const Plan& p) {
  const MoeReport& r = p.moe;
  const Layout& l = p.layout;
  const ModelShape& m = in.model;
  std::string s = str("Mixture of experts: ", m.moe.experts, " experts, top ", m.moe.top_k,
                      m.moe.shared_experts > 0 ? str(", ", m.moe.shared_experts, " shared") : "",
                      "; ", moe_layer_count(m), " of ", m.layers, " layers routed (", r.moe_layers,
                      " on the busiest stage); ",
                      format_params(static_cast<double>(r.total_params)), " parameters, ",
                      format_params(static_cast<double>(r.active_params)), " active per token\n");
  s += str("  ep=", l.ep, ": ", r.experts_per_rank, " experts per rank (",
           format_params(static_cast<double>(p.memory.expert_params)),
           " expert parameters on this rank", l.tp > 1 ? str(", 1/", l.tp, " of each") : "",
           "); expert-data-parallel degree ", r.expert_dp, " (dp ", l.dp, l.cp > 1 ? " x cp" : "",
           " / ep ", l.ep, "): expert state ",
           l.zero_stage > 0
               ? str("ZeRO-sharded over ", r.expert_dp, " ranks, dense state over ", l.dp * l.cp)
               : str("reduced over ", r.expert_dp, " ranks, dense over ", l.dp * l.cp),
           "\n");
  if (l.ep > 1) {
    s += str("  all-to-all per routed layer and micro-batch (busiest EP rank ", r.busiest_rank,
             ", ", r.inter_node ? "across nodes" : "inside a node", "): dispatch sends ",
             format_gb(r.dispatch.sent_total()), ", receives ",
             format_gb(r.dispatch.received_total()),
             "; the combine the reverse; forward + backward ", format_gb(r.bytes_per_layer),
             " sent; per step ", format_gb(r.bytes_per_step), ", ", format_seconds(p.time.ep_s),
             " on the critical path\n");
    s += str("  routing: ", in.training.tokens_per_expert.empty() ? "uniform" : "measured",
             " (--tokens-per-expert); the busiest rank's experts compute ",
             format_fixed(r.load_factor, 3), " x the mean routed tokens\n");
  }
  s += "  FLOPs and MFU count active parameters: a routed layer's forward is 2 x (attention + "
       "router + (top-k + shared) experts) per token; 6ND's N is the active count\n";
  return s;
}

// The closed-form bubble of the plan's schedule on equal stages (pipeline_model.h), beside the
// clock's, which replays the schedule on each stage's own times.
BubbleEstimate formula_bubble(const Plan& p) {
  const ScheduleKind kind = p.layout.vp > 1 ? ScheduleKind::interleaved : p.layout.schedule;
  return pipeline_bubble(kind, p.layout.pp, static_cast<int>(p.microbatches), p.layout.vp);
}

// The closed form's name: Narayanan et al. 2021's (P-1)/M for GPipe and 1F1B, (P-1)/(v M)
// interleaved, ZB-H1's (P-1)(F+B-W) over M(F+B+W) at F = B = W.
std::string_view formula_bubble_name(const Layout& l) {
  if (l.vp > 1) return "(P-1)/(v M)";
  return l.schedule == ScheduleKind::zero_bubble_h1 ? "(P-1)/(3M)" : "(P-1)/M";
}

std::string time_section(const PlanInput& in, const Plan& p) {
  const TimeBreakdown& t = p.time;
  const Layout& l = p.layout;
  const Cluster& c = in.cluster;
  std::string s;
  const std::string kind = l.vp > 1 ? "interleaved" : std::string(name(l.schedule));
  const BubbleEstimate formula = formula_bubble(p);
  s += str("Pipeline: ", kind, ", P=", l.pp, ", M=", p.microbatches, ", v=", l.vp,
           "; layers per stage: ", format_stage_layers(p.stage_layers), "\n");
  s += str("  timed bubble     ", format_percent(t.bubble.fraction_of_total), " of the step, ",
           format_percent(t.bubble.fraction_of_ideal),
           " of the ideal time: the clock's replay of the schedule on each stage's own times\n");
  s += str("  ", pad_right(str(formula_bubble_name(l), " bubble"), 17),
           format_percent(formula.fraction_of_ideal), " of the ideal time, ",
           format_percent(formula.fraction_of_total),
           " of the step: the closed form on equal stages (Narayanan et al. 2021)\n");
  s += str("Time per step (clock: ", t.clock,
           t.clock == "gpu rates"
               ? ""
               : str(", ", t.threads, " compute thread", t.threads == 1 ? "" : "s",
                     " per rank (--threads)", ", compute x", format_fixed(t.stretch, 2),
                     " for ranks x threads over the cores"),
           ")\n");
  TextTable table({26, 12});
  auto row = [&](const std::string& what, double secs, const std::string& note) {
    table.add_row({what, format_seconds(secs), note});
  };
  row("compute", t.compute_s,
      t.clock == "gpu rates"
          ? str("at ", format_flops(c.gpu.peak_flops * c.gpu.compute_efficiency),
                " per GPU; recompute ", format_seconds(t.recompute_s))
          : str("the engine's kernels at the measured rates, optimizer ",
                format_seconds(t.optimizer_s), "; recompute ", format_seconds(t.recompute_s)));
  row("TP communication", t.tp_s, "on the critical path");
  if (l.cp > 1) {
    row("CP communication", t.cp_s,
        str("exposed, of ", format_seconds(t.cp_total_s),
            p.cp.algorithm == CpAlgorithm::ring
                ? " (ring hops hide behind block compute where they can)"
                : " (the attention waits for its collectives)"));
  }
  if (l.ep > 1) row("EP all-to-all", t.ep_s, "dispatch and combine, on the critical path");
  row("pipeline sends", t.pp_s, "on the critical path");
  row("pipeline bubble", t.bubble_s, "");
  row("DP/ZeRO communication", t.dp_s,
      str("exposed ", format_seconds(t.dp_exposed_s), " with overlap"));
  if (t.step_source == StepTimeSource::predicted) {
    row("step", t.step_s, str("with overlap; ", format_seconds(t.step_no_overlap_s), " without"));
  } else {
    row("step", t.step_s,
        str("from ", name(t.step_source), " (the model predicts ",
            format_seconds(t.predicted_step_s), "); the figures below use it"));
  }
  s += table.render();
  const double peak = c.gpu.peak_flops;
  s += str("  throughput  ", format_count(t.tokens_per_s), " tokens/s; the cluster ",
           format_flops(t.cluster_flops_per_s), ", ", format_flops(t.hardware_flops_per_gpu),
           " per GPU = ", format_percent(t.hardware_flops_per_gpu / peak), " of its ",
           format_flops(peak), c.gpu.measured.present ? " measured" : "",
           " peak (recompute counted)\n");
  const bool six_nd = in.training.flops == FlopsConvention::six_nd;
  s += str("  MFU         ", format_percent(t.mfu), " model FLOPs (", name(in.training.flops),
           " convention: ",
           six_nd ? "6 per parameter per token, attention's s^2 left out"
                  : "Narayanan Eq. 3's terms: matmuls, attention's QK^T and AV, logits; x3 "
                    "for backward",
           "; no recompute); HFU ", format_percent(t.hfu),
           " (recompute's FLOPs added: ", name(p.layout.recompute),
           p.layout.recompute == Recompute::selective
               ? (in.training.selective_flops == SelectiveFlops::korthikanti_eq8
                      ? ", counted as Korthikanti et al. Eq. 8: 12Bs^2h per layer"
                      : ", counted as rerun: 4Bs^2h per layer")
               : "",
           ")\n");
  if (t.days > 0) {
    s += str("  training    ", format_params(in.training.tokens), " tokens in ",
             format_fixed(t.days, 1), " days; compute 6ND = ", format_sci(t.total_flops_6nd),
             " FLOPs = ", format_count(t.total_flops_6nd / kFlopsPerPfDay), " PF-days; ",
             name(in.training.flops), " x iterations = ", format_sci(t.total_model_flops),
             " model FLOPs, ", format_sci(t.total_hardware_flops), " with recompute\n");
  }
  s += "  units       GB = 10^9 bytes; FLOPs count a multiply-add as 2; 1 PF-day = 8.64e19 FLOPs; "
       "bubble: idle share of the step\n";
  return s;
}

json traffic_json(const GroupTraffic& g) {
  return {{"group", g.group},
          {"op", g.op},
          {"carries", g.what},
          {"ranks", g.size},
          {"nodes", g.nodes},
          {"inter_node", g.inter_node},
          {"hierarchical", g.hierarchical},
          {"calls", g.calls},
          {"steps", g.steps},
          {"bytes_per_rank", g.bytes_per_rank},
          {"time_s", g.time_s},
          {"exposed_s", g.exposed_s}};
}

}  // namespace

std::string format_input(const PlanInput& in) {
  const ModelShape& m = in.model;
  const Cluster& c = in.cluster;
  const Training& t = in.training;
  std::string s;
  s += str("model     ", m.name, ": ", format_params(static_cast<double>(param_count(m))),
           " parameters (", name(m.family), "; ", m.layers, " layers, hidden ", m.hidden, ", ",
           m.heads, " heads");
  if (m.kv_heads > 0 && m.kv_heads != m.heads) s += str(", ", m.kv_heads, " KV heads");
  s += str(", FFN ", m.ffn_or_default(), ", vocab ", m.vocab, ", sequence ", m.seq, ")\n");
  if (m.params_override > 0) {
    s +=
        str("          --params ", format_params(static_cast<double>(m.params_override)),
            " sets the parameter counts (state memory, DP/ZeRO bytes, 6ND); the shape's own ",
            format_params(static_cast<double>(shape_param_count(m))),
            " only splits them over stages and TP ranks, and sets activations and Eq. 3's FLOPs\n");
  }
  // A calibrated CPU's peak is its fastest measured product, far below a TFLOP/s: printed in
  // the unit that fits, and named for what it is; its compute is priced by the measured rates.
  s += str("cluster   ", c.name, ": ", c.world(), " GPUs = ", c.nodes, " nodes x ", c.gpus_per_node,
           "; ", c.gpu.name, ", ", format_gb(c.gpu.memory_bytes), ", ",
           format_flops(c.gpu.peak_flops),
           c.gpu.measured.present
               ? " peak (the fastest product measured by calibrate; compute priced at the "
                 "measured rates)\n"
               : str(" peak x ", format_fixed(c.gpu.compute_efficiency, 2), " efficiency\n"));
  s += str("          ", link_text(c.intra_node), "; ", link_text(c.inter_node),
           " (per GPU, per direction)\n");
  s +=
      str("training  global batch ", t.global_batch, " x ", m.seq, " tokens; ", t.state_bytes.param,
          "+", t.state_bytes.grad, "+", t.state_bytes.optimizer, " = ", t.state_bytes.total(),
          " B/param of model states; ", t.activation_bytes, " B activations");
  if (t.tokens > 0) s += str("; ", format_params(t.tokens), " tokens to train");
  s += "\n";
  return s;
}

std::string format_plan(const PlanInput& in, const Plan& p) {
  std::string s = format_input(in);
  s += str("layout    ", describe(p.layout), " (", p.microbatches, " micro-batches, rank order ",
           to_string(p.layout.order), ")\n\n");
  s += memory_section(in, p) + "\n" + traffic_section(in, p) + "\n";
  if (p.layout.cp > 1) s += cp_section(in, p) + "\n";
  if (p.moe.enabled) s += moe_section(in, p) + "\n";
  s += time_section(in, p);
  return s;
}

std::string format_search(const PlanInput& in, const SearchResult& r) {
  std::string s = format_input(in);
  s += str("search    ", format_count(static_cast<double>(r.evaluated)), " layouts from ", r.splits,
           " (dp, tp, pp, cp) splits; ", format_count(static_cast<double>(r.fitting)), " fit",
           r.fixed.any() ? str("; fixed: ", describe(r.fixed)) : std::string(), "\n\n");
  if (!r.top.empty()) {
    s += "Best layouts by predicted throughput\n";
    // The layout column fits the longest layout (CP, EP and v make some longer than 46).
    size_t layout_width = 48;
    for (const RankedPlan& t : r.top)
      layout_width = std::max(layout_width, describe(t.plan.layout).size() + 2);
    s += "  " + pad_right("#", 4) + pad_right("layout", layout_width) + pad_right("step", 10) +
         pad_right("tokens/s", 12) + pad_right("MFU", 8) + pad_right("memory", 10) + "days\n";
    for (size_t i = 0; i < r.top.size(); ++i) {
      const Plan& p = r.top[i].plan;
      s += "  " + pad_right(std::to_string(i + 1), 4) +
           pad_right(describe(p.layout), layout_width) +
           pad_right(format_seconds(p.time.step_s), 10) +
           pad_right(format_count(p.time.tokens_per_s), 12) +
           pad_right(format_percent(p.time.mfu), 8) + pad_right(format_gb(p.memory.total()), 10) +
           (p.time.days > 0 ? format_fixed(p.time.days, 1) : "-") + "\n";
      s += "      why: " + r.top[i].why + "\n";
    }
    s += "\n";
  }
  if (!r.explanations.empty()) {
    s += "Why not the alternatives\n";
    for (const std::string& e : r.explanations) s += "  - " + e + "\n";
  }
  if (!r.invalid_splits.empty()) {
    s += "Splits that cannot run\n";
    for (const Rejection& j : r.invalid_splits) {
      s += str("  - ", j.count, " with ", j.reason, " (e.g. ", j.example, ")\n");
    }
  }
  if (!r.top.empty()) {
    s += str("\nThe winner in full (dtrain plan --model ", in.model.name, " --cluster ",
             in.cluster.name, " ", layout_flags(r.top.front().plan.layout), "):\n\n");
    const Plan& w = r.top.front().plan;
    s += memory_section(in, w) + "\n" + traffic_section(in, w) + "\n";
    if (w.layout.cp > 1) s += cp_section(in, w) + "\n";
    if (w.moe.enabled) s += moe_section(in, w) + "\n";
    s += time_section(in, w);
  }
  return s;
}

json input_json(const PlanInput& in) {
  const ModelShape& m = in.model;
  const Training& t = in.training;
  return {{"model",
           {{"name", m.name},
            {"family", name(m.family)},
            {"layers", m.layers},
            {"hidden", m.hidden},
            {"heads", m.heads},
            {"kv_heads", m.kv_heads_or_heads()},
            {"ffn_hidden", m.ffn_or_default()},
            {"vocab", m.vocab},
            {"seq", m.seq},
            {"params", param_count(m)},
            {"active_params", model_flops_param_count(m)},
            {"experts", m.moe.experts},
            {"top_k", m.moe.top_k},
            {"moe_every", m.moe.every},
            {"first_dense", m.moe.first_dense},
            {"shared_experts", m.moe.shared_experts},
            {"expert_ffn", m.moe.expert_ffn},
            {"moe_layers", moe_layer_count(m)},
            {"mla", m.mla.enabled()}}},
          {"cluster", to_json(in.cluster)},
          {"training",
           {{"global_batch", t.global_batch},
            {"tokens", t.tokens},
            {"state_bytes",
             {{"param", t.state_bytes.param},
              {"grad", t.state_bytes.grad},
              {"optimizer", t.state_bytes.optimizer}}},
            {"activation_bytes", t.activation_bytes},
            {"flops_convention", name(t.flops)},
            {"selective_flops", name(t.selective_flops)},
            {"bucket_bytes", t.bucket_bytes}}}};
}

json layout_json(const Layout& l) {
  return {{"dp", l.dp},
          {"tp", l.tp},
          {"pp", l.pp},
          {"vp", l.vp},
          {"zero_stage", l.zero_stage},
          {"micro_batch", l.micro_batch},
          {"recompute", name(l.recompute)},
          {"sequence_parallel", l.sequence_parallel},
          {"schedule", l.vp > 1 ? "interleaved" : name(l.schedule)},
          {"order", to_string(l.order)},
          {"cp", l.cp},
          {"cp_algo", name(l.cp_algo)},
          {"ep", l.ep},
          // The same layout as flags that plan and train both take (paste into either).
          {"flags", layout_flags(l)}};
}

json cp_pass_json(const CpPassTraffic& t) {
  return {{"messages", t.messages},
          {"steps", t.steps},
          {"bytes_sent", t.bytes_sent},
          {"bytes_received", t.bytes_received}};
}

json plan_json(const Plan& p) {
  const MemoryBreakdown& m = p.memory;
  const TimeBreakdown& t = p.time;
  json traffic = json::array();
  for (const GroupTraffic& g : p.traffic) traffic.push_back(traffic_json(g));
  json cp = {{"cp", p.layout.cp}};
  if (p.layout.cp > 1) {
    cp["algorithm"] = name(p.cp.algorithm);
    cp["why"] = p.cp.why;
    cp["per_layer"] = {{"forward", cp_pass_json(p.cp.per_layer.forward)},
                       {"backward", cp_pass_json(p.cp.per_layer.backward)},
                       {"bytes_sent", p.cp.per_layer.bytes_sent()}};
    cp["bytes_per_step"] = p.cp.bytes_per_step;
    cp["work_imbalance_balanced"] = p.cp.imbalance_balanced;
    cp["work_imbalance_contiguous"] = p.cp.imbalance_contiguous;
    cp["ring_hop_s"] = p.cp.ring_hop_s;
    cp["ring_block_s"] = p.cp.ring_block_s;
    cp["cp_s"] = t.cp_s;
    cp["cp_total_s"] = t.cp_total_s;
  }
  json moe = {{"enabled", p.moe.enabled}};
  if (p.moe.enabled) {
    moe["ep"] = p.moe.ep;
    moe["expert_dp"] = p.moe.expert_dp;
    moe["experts_per_rank"] = p.moe.experts_per_rank;
    moe["total_params"] = p.moe.total_params;
    moe["active_params"] = p.moe.active_params;
    moe["moe_layers_on_stage"] = p.moe.moe_layers;
    moe["expert_params_on_rank"] = m.expert_params;
    moe["activation_bytes_per_moe_layer"] = m.moe_activation_per_layer;
    moe["load_factor"] = p.moe.load_factor;
    moe["busiest_ep_rank"] = p.moe.busiest_rank;
    moe["inter_node"] = p.moe.inter_node;
    moe["dispatch_sent_bytes"] = p.moe.dispatch.sent_total();
    moe["dispatch_received_bytes"] = p.moe.dispatch.received_total();
    moe["combine_sent_bytes"] = p.moe.combine.sent_total();
    moe["bytes_per_layer"] = p.moe.bytes_per_layer;
    moe["bytes_per_step"] = p.moe.bytes_per_step;
    moe["ep_s"] = t.ep_s;
    moe["flops_convention"] = "active parameters";
  }
  const BubbleEstimate formula = formula_bubble(p);
  return {{"layout", layout_json(p.layout)},
          {"context_parallel", cp},
          {"moe", moe},
          {"microbatches", p.microbatches},
          {"stage_layers", p.stage_layers},
          {"memory",
           {{"stage", m.stage},
            {"layers", m.layers},
            {"stage_params", m.stage_params},
            {"params_bytes", m.params},
            {"grads_bytes", m.grads},
            {"optimizer_bytes", m.optimizer},
            {"activations_bytes", m.activations},
            {"head_activations_bytes", m.head_activations},
            {"activation_bytes_per_layer", m.activation_per_layer},
            {"inflight_microbatches", m.inflight_microbatches},
            {"temporary_bytes", m.temporary},
            {"total_bytes", m.total()},
            {"engine_peak_bytes", m.engine_peak_bytes},
            {"capacity_bytes", m.capacity},
            {"fits", m.fits()},
            {"headroom_bytes", m.headroom()}}},
          {"communication", traffic},
          {"pp_bytes_per_stage", p.pp_bytes_per_stage},
          {"bubble",
           // Timed: the clock's replay of the schedule on each stage's own times.
           {{"fraction_of_total", t.bubble.fraction_of_total},
            {"fraction_of_ideal", t.bubble.fraction_of_ideal},
            {"bubble_s", t.bubble_s},
            // The closed form on equal stages ((P-1)/M of the ideal time, (P-1)/(M+P-1) of the
            // step for GPipe and 1F1B), beside the timed figures above.
            {"formula", formula_bubble_name(p.layout)},
            {"formula_fraction_of_total", formula.fraction_of_total},
            {"formula_fraction_of_ideal", formula.fraction_of_ideal}}},
          {"time",
           {{"compute_s", t.compute_s},
            {"recompute_s", t.recompute_s},
            {"tp_s", t.tp_s},
            {"pp_s", t.pp_s},
            {"bubble_s", t.bubble_s},
            {"dp_s", t.dp_s},
            {"dp_exposed_s", t.dp_exposed_s},
            {"step_s", t.step_s},
            {"step_no_overlap_s", t.step_no_overlap_s},
            {"model_flops", t.model_flops},
            {"hardware_flops", t.hardware_flops},
            {"tokens_per_s", t.tokens_per_s},
            {"mfu", t.mfu},
            {"hardware_flops_per_gpu", t.hardware_flops_per_gpu},
            {"days", t.days},
            {"step_source", name(t.step_source)},
            {"predicted_step_s", t.predicted_step_s},
            {"hfu", t.hfu},
            {"cluster_flops_per_s", t.cluster_flops_per_s},
            {"total_flops_6nd", t.total_flops_6nd},
            {"total_pf_days_6nd", t.total_flops_6nd / kFlopsPerPfDay},
            {"total_model_flops", t.total_model_flops},
            {"total_hardware_flops", t.total_hardware_flops},
            {"optimizer_s", t.optimizer_s},
            {"clock", t.clock},
            {"threads", t.threads}}}};
}

json search_json(const PlanInput& in, const SearchResult& r) {
  json top = json::array();
  for (const RankedPlan& p : r.top) {
    json j = plan_json(p.plan);
    j["why"] = p.why;
    top.push_back(std::move(j));
  }
  json invalid = json::array();
  for (const Rejection& j : r.invalid_splits) {
    invalid.push_back({{"reason", j.reason}, {"count", j.count}, {"example", j.example}});
  }
  return {{"input", input_json(in)},        {"splits", r.splits},
          {"evaluated", r.evaluated},       {"fitting", r.fitting},
          {"memory_priced", r.priced},      {"step_bounded", r.bounded},
          {"replayed", r.simulated},        {"top", top},
          {"explanations", r.explanations}, {"invalid_splits", invalid},
          {"fixed", describe(r.fixed)}};
}

}  // namespace dtrain::plan
