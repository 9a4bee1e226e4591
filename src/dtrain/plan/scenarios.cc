// The five scenarios. Each builds PlanInputs and Layouts and reads every figure from evaluate,
// memory_model, comm_model or pipeline_model; the prose only names what the figures show.
#include "dtrain/plan/scenarios.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "dtrain/core/check.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/machine/format.h"
#include "dtrain/plan/planner.h"

namespace dtrain::plan {
namespace {

using nlohmann::json;

Cell text(std::string s) {
  return {std::move(s), std::nullopt};
}
Cell gb(double bytes) {
  return {format_gb(bytes), bytes};
}
Cell secs(double s) {
  return {format_seconds(s), s};
}
Cell pct(double f) {
  return {format_percent(f), f};
}
Cell count(double n) {
  return {format_count(n), n};
}
Cell fixed(double v, int decimals) {
  return {format_fixed(v, decimals), v};
}
Cell fits(const MemoryBreakdown& m) {
  return {m.fits() ? str("yes, ", format_gb(m.headroom()), " free")
                   : str("no, over by ", format_gb(-m.headroom())),
          m.headroom()};
}

PlanInput input_for(std::string_view model, std::string_view cluster, int64_t global_batch) {
  PlanInput in;
  in.model = model_preset(model);
  in.cluster = parse_cluster(cluster);
  in.training.global_batch = global_batch;
  in.training.tokens = in.model.default_tokens;
  return in;
}

std::string describe_input(const PlanInput& in) {
  return str(in.model.name, " (", format_params(static_cast<double>(param_count(in.model))),
             " parameters, sequence ", in.model.seq, ") on ", in.cluster.name, ": ",
             in.cluster.world(), " x ", in.cluster.gpu.name, " (",
             format_gb(in.cluster.gpu.memory_bytes), "), ", in.cluster.intra_node.name, " ",
             format_rate(in.cluster.intra_node.bandwidth_bytes_per_s), " inside a node, ",
             in.cluster.inter_node.name, " ",
             format_rate(in.cluster.inter_node.bandwidth_bytes_per_s), " per GPU across nodes");
}

const GroupTraffic* find_traffic(const Plan& p, std::string_view group) {
  for (const GroupTraffic& g : p.traffic) {
    if (g.group == group) return &g;
  }
  return nullptr;
}

double group_bytes(const Plan& p, std::string_view group) {
  double sum = 0;
  for (const GroupTraffic& g : p.traffic) sum += g.group == group ? g.bytes_per_rank : 0;
  return sum;
}

double group_calls(const Plan& p, std::string_view a, std::string_view b = {}) {
  double sum = 0;
  for (const GroupTraffic& g : p.traffic) {
    if (g.group == a || (!b.empty() && g.group == b)) sum += static_cast<double>(g.calls);
  }
  return sum;
}

// 1. Size a 70B run ------------------------------------------------------------------------------

ScenarioReport size_70b() {
  ScenarioReport r;
  r.name = "size-70b";
  r.title = "Size a 70B run: model states, ZeRO-3 over 16 GPUs, and what recompute adds or saves";
  PlanInput in = input_for("llama2-70b", "2x8xA100", 16);
  const int64_t psi = param_count(in.model);
  const StateBytes sb = in.training.state_bytes;
  r.setup.push_back(describe_input(in));
  r.setup.push_back(str("mixed-precision Adam: ", sb.param, " + ", sb.grad, " + ", sb.optimizer,
                        " = ", sb.total(), " bytes per parameter; micro-batch 1 of ", in.model.seq,
                        " tokens, global batch 16 (one micro-batch per GPU)"));

  ScenarioTable states{"Model states per GPU over 16 data-parallel GPUs",
                       {"ZeRO stage", "params", "grads", "optimizer", "total per GPU"},
                       {}};
  for (int stage = 0; stage <= 3; ++stage) {
    const ModelStateBytes m = model_state_bytes(psi, 16, stage, sb);
    states.rows.push_back({text(stage == 0 ? "0 (plain DP)" : str(stage)),
                           gb(static_cast<double>(m.params)), gb(static_cast<double>(m.grads)),
                           gb(static_cast<double>(m.optimizer)),
                           gb(static_cast<double>(m.total()))});
  }
  r.tables.push_back(states);

  ScenarioTable recompute{"ZeRO-3 (dp = GPUs, tp = pp = 1), per GPU, by activation recompute",
                          {"GPUs", "recompute", "model states", "activations", "temporary", "total",
                           "fits in 80 GB", "step", "MFU"},
                          {}};
  double states_16 = 0, act_none = 0, act_full = 0, act_selective = 0;
  double step_none_32 = 0, step_full_32 = 0;
  std::optional<MemoryBreakdown> full_16;
  std::string fitting;
  for (int gpus : {16, 32}) {
    PlanInput cluster_in = in;
    cluster_in.cluster = parse_cluster(str(gpus / 8, "x8xA100"));
    cluster_in.training.global_batch = gpus;
    for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
      Layout l;
      l.dp = gpus;
      l.zero_stage = 3;
      l.recompute = rc;
      const Plan p = evaluate(cluster_in, l);
      const MemoryBreakdown& m = p.memory;
      const double state_bytes = m.params + m.grads + m.optimizer;
      if (gpus == 16) {
        states_16 = state_bytes;
        (rc == Recompute::none   ? act_none
         : rc == Recompute::full ? act_full
                                 : act_selective) = m.activations;
        if (rc == Recompute::full) full_16 = m;
      } else if (rc != Recompute::selective) {
        (rc == Recompute::full ? step_full_32 : step_none_32) = p.time.step_s;
      }
      if (m.fits()) fitting += str(fitting.empty() ? "" : ", ", gpus, " GPUs with ", name(rc));
      recompute.rows.push_back({count(gpus), text(std::string(name(rc))), gb(state_bytes),
                                gb(m.activations), gb(m.temporary), gb(m.total()), fits(m),
                                secs(p.time.step_s), pct(p.time.mfu)});
    }
  }
  r.tables.push_back(recompute);

  r.findings.push_back(str(format_params(static_cast<double>(psi)), " parameters x ", sb.total(),
                           " B = ", format_gb(static_cast<double>(psi * sb.total())),
                           " of model states: no single GPU comes close."));
  r.findings.push_back(str("ZeRO-3 over 16 GPUs shards all three states: ", format_gb(states_16),
                           " per GPU, which leaves ",
                           format_gb(in.cluster.gpu.memory_bytes - states_16),
                           " of 80 GB for activations and buffers."));
  r.findings.push_back(str("Activations per GPU (b=1, s=", in.model.seq, ", all ", in.model.layers,
                           " layers): ", format_gb(act_none),
                           " without recompute (the a*s^2 attention scores dominate), ",
                           format_gb(act_selective), " with selective recompute, ",
                           format_gb(act_full), " with full recompute (only each layer's input)."));
  r.findings.push_back(str(
      "On 16 GPUs full recompute comes closest, at ", format_gb(full_16->total()),
      full_16->fits() ? " (it fits)" : " (over by " + format_gb(-full_16->headroom()) + ")",
      ": ZeRO-3's gathered layers and the recomputed layer take ", format_gb(full_16->temporary),
      " on top of the states. What fits: ", fitting.empty() ? std::string("nothing") : fitting,
      ". Full recompute costs ", format_percent(step_full_32 / step_none_32 - 1),
      " more step time than none (on 32 GPUs): the forward runs twice."));
  r.findings.push_back(
      "Tensor parallelism is the other lever: it splits the activations too "
      "(`dtrain plan --model llama2-70b --cluster 2x8xA100 --search`).");
  return r;
}

// 2. A stalled scale-out -------------------------------------------------------------------------

ScenarioReport stalled_scaleout() {
  ScenarioReport r;
  r.name = "stalled-scaleout";
  r.title = "A stalled scale-out: data parallelism from 8 to 64 GPUs gets slower per GPU";
  PlanInput base = input_for("megatron-1.7b", "1x8xA100", 8);
  const int64_t psi = param_count(base.model);
  const StateBytes sb = base.training.state_bytes;
  const double grad_bytes = static_cast<double>(psi * sb.grad);
  r.setup.push_back(describe_input(base));
  r.setup.push_back(str("plain data parallelism (ZeRO 0), one micro-batch of 1 x ", base.model.seq,
                        " tokens per GPU (weak scaling); the gradients, ", format_gb(grad_bytes),
                        " in fp16, are all-reduced every step"));

  ScenarioTable scale{"Flat ring all-reduce, no overlap (the naive setup)",
                      {"GPUs", "link", "bytes sent per rank", "all-reduce", "compute", "step",
                       "tokens/s per GPU", "compute / step"},
                      {}};
  double compute_s = 0, flat_64 = 0, backward_s = 0;
  for (int gpus : {8, 16, 32, 64}) {
    PlanInput in = base;
    in.cluster = parse_cluster(str(gpus / 8, "x8xA100"));
    in.training.global_batch = gpus;
    Layout l;
    l.dp = gpus;
    const Plan p = evaluate(in, l);
    compute_s = p.time.compute_s;
    backward_s = compute_s * 2 / 3;
    const Link& link = gpus > 8 ? in.cluster.inter_node : in.cluster.intra_node;
    const CommCost flat = collective_cost(comm::CollectiveOp::all_reduce, comm::Algorithm::ring,
                                          grad_bytes, gpus, link);
    const double step = compute_s + flat.time_s;
    const double per_gpu = static_cast<double>(in.model.seq) / step;
    if (gpus == 64) flat_64 = flat.time_s;
    scale.rows.push_back({count(gpus),
                          text(str(link.name, gpus > 8 ? " (ring crosses nodes)" : "")),
                          gb(flat.bytes_sent), secs(flat.time_s), secs(compute_s), secs(step),
                          count(per_gpu), pct(compute_s / step)});
  }
  r.tables.push_back(scale);

  // At 64 GPUs: bucketing + overlap, and the hierarchical all-reduce.
  PlanInput in64 = base;
  in64.cluster = parse_cluster("8x8xA100");
  const Cluster& c = in64.cluster;
  const int64_t buckets = static_cast<int64_t>(std::ceil(grad_bytes / base.training.bucket_bytes));
  const CollectiveCall bucketed{comm::CollectiveOp::all_reduce,
                                grad_bytes / static_cast<double>(buckets), buckets, "gradients"};
  const CommCost flat_buckets = collective_cost(bucketed, comm::Algorithm::ring, 64, c.inter_node);
  const HierarchicalCost hier =
      hierarchical_all_reduce_cost(grad_bytes, 8, 8, c.intra_node, c.inter_node);
  const HierarchicalCost hier_one_bucket =
      hierarchical_all_reduce_cost(bucketed.bytes, 8, 8, c.intra_node, c.inter_node);
  const double hier_buckets = hier_one_bucket.time_s * static_cast<double>(buckets);

  ScenarioTable fixes{str("At 64 GPUs (8 nodes): what bucketing + overlap and a hierarchical "
                          "all-reduce change (",
                          buckets, " buckets of ", format_gb(bucketed.bytes), ")"),
                      {"all-reduce", "inter-node bytes per rank", "steps", "time", "exposed",
                       "step", "compute / step"},
                      {}};
  auto add_fix = [&](const std::string& what, double inter_bytes, double steps, double time,
                     double exposed) {
    const double step = compute_s + exposed;
    fixes.rows.push_back({text(what), gb(inter_bytes), count(steps), secs(time), secs(exposed),
                          secs(step), pct(compute_s / step)});
  };
  const CommCost flat_one = collective_cost(comm::CollectiveOp::all_reduce, comm::Algorithm::ring,
                                            grad_bytes, 64, c.inter_node);
  add_fix("flat ring, one call after backward", flat_one.bytes_sent,
          static_cast<double>(flat_one.steps), flat_one.time_s, flat_one.time_s);
  add_fix("flat ring, buckets overlapped with backward", flat_buckets.bytes_sent,
          static_cast<double>(flat_buckets.steps), flat_buckets.time_s,
          exposed_time(flat_buckets.time_s, flat_buckets.time_s / static_cast<double>(buckets),
                       backward_s));
  add_fix("hierarchical, one call after backward", hier.inter.bytes_sent,
          static_cast<double>(hier.intra_first.steps + hier.inter.steps + hier.intra_last.steps),
          hier.time_s, hier.time_s);
  add_fix("hierarchical, buckets overlapped with backward",
          hier_one_bucket.inter.bytes_sent * static_cast<double>(buckets),
          static_cast<double>((hier_one_bucket.intra_first.steps + hier_one_bucket.inter.steps +
                               hier_one_bucket.intra_last.steps) *
                              buckets),
          hier_buckets, exposed_time(hier_buckets, hier_one_bucket.time_s, backward_s));
  r.tables.push_back(fixes);

  r.findings.push_back(
      str("Inside one node the all-reduce rides NVLink (",
          format_rate(c.intra_node.bandwidth_bytes_per_s),
          "); from 16 GPUs on, the ring crosses nodes and every one of its ",
          "steps waits for InfiniBand (", format_rate(c.inter_node.bandwidth_bytes_per_s),
          " per GPU). Bytes per rank barely change, 2(N-1)/N x ", format_gb(grad_bytes),
          ", but the link is ",
          format_fixed(c.intra_node.bandwidth_bytes_per_s / c.inter_node.bandwidth_bytes_per_s, 0),
          "x slower."));
  r.findings.push_back(str("At 64 GPUs the all-reduce takes ", format_seconds(flat_64), " against ",
                           format_seconds(compute_s), " of compute: the step is network-bound."));
  r.findings.push_back(
      str("Buckets let the all-reduce start during the backward pass (", format_seconds(backward_s),
          " to hide behind), but each of the ", buckets, " buckets pays the flat ring's ",
          flat_one.steps, " latency steps again (",
          format_seconds(flat_buckets.time_s - flat_one.time_s),
          " more in all): overlap cannot hide a transfer longer than the backward."));
  r.findings.push_back(str(
      "The hierarchical all-reduce (reduce-scatter in the node, all-reduce of "
      "the 1/8 shard across nodes, all-gather in the node) sends ",
      format_fixed(flat_one.bytes_sent / hier.inter.bytes_sent, 1),
      "x fewer bytes over InfiniBand in ",
      hier.intra_first.steps + hier.inter.steps + hier.intra_last.steps, " steps instead of ",
      flat_one.steps,
      "; with buckets and overlap it hides behind the backward and the step is "
      "back to ",
      format_percent(compute_s /
                     (compute_s + exposed_time(hier_buckets, hier_one_bucket.time_s, backward_s))),
      " compute. The planner takes the cheaper of the flat ring and the "
      "hierarchical form for every group that spans nodes."));
  return r;
}

// 3. 3D placement --------------------------------------------------------------------------------

ScenarioReport placement_3d() {
  ScenarioReport r;
  r.name = "3d-placement";
  r.title = "3D placement on 8 nodes x 8 GPUs: TP=8 inside NVLink, PP=8 across nodes, DP=1";
  PlanInput in = input_for("gpt3-175b", "8x8xA100", 128);
  r.setup.push_back(describe_input(in));
  r.setup.push_back(
      "tp=8, pp=8, dp=1, micro-batch 1, global batch 128 (M=128), selective "
      "recompute, 1F1B; the only change between rows is which axis gets the "
      "adjacent ranks");
  ScenarioTable t{"The same layout, two placements",
                  {"rank order", "TP group", "TP bytes/rank", "TP time", "PP group",
                   "PP bytes/rank", "PP time", "step", "MFU"},
                  {}};
  Plan plans[2];
  const char* orders[2] = {"tp-dp-pp", "pp-dp-tp"};
  for (int i = 0; i < 2; ++i) {
    Layout l;
    l.tp = 8;
    l.pp = 8;
    l.dp = 1;
    l.recompute = Recompute::selective;
    l.order = *parse_rank_order(orders[i]);
    plans[i] = evaluate(in, l);
    const GroupTraffic* tp = find_traffic(plans[i], "TP");
    const GroupTraffic* pp = find_traffic(plans[i], "PP");
    auto where = [&](const GroupTraffic* g) {
      return str(g->inter_node ? in.cluster.inter_node.name : in.cluster.intra_node.name, ", ",
                 g->nodes, g->nodes == 1 ? " node" : " nodes");
    };
    t.rows.push_back({text(orders[i]), text(where(tp)), gb(group_bytes(plans[i], "TP")),
                      secs(plans[i].time.tp_s), text(where(pp)), gb(group_bytes(plans[i], "PP")),
                      secs(plans[i].time.pp_s), secs(plans[i].time.step_s),
                      pct(plans[i].time.mfu)});
  }
  r.tables.push_back(t);
  const double tp_bytes = group_bytes(plans[0], "TP"), pp_bytes = group_bytes(plans[0], "PP");
  r.findings.push_back(str("Per step a rank sends ", format_gb(tp_bytes),
                           " in TP all-reduces (4 "
                           "per layer per micro-batch, 8 b s h (t-1)/t elements per layer) but "
                           "only ",
                           format_gb(pp_bytes),
                           " in pipeline sends (one activation forward and "
                           "one gradient backward per micro-batch): ",
                           format_fixed(tp_bytes / pp_bytes, 0), "x more."));
  r.findings.push_back(str("With TP inside the node (tp-dp-pp) that volume rides NVLink: TP costs ",
                           format_seconds(plans[0].time.tp_s),
                           " per step. Swapped (pp-dp-tp), "
                           "every TP all-reduce crosses InfiniBand: ",
                           format_seconds(plans[1].time.tp_s), ", and the step grows from ",
                           format_seconds(plans[0].time.step_s), " to ",
                           format_seconds(plans[1].time.step_s), "."));
  r.findings.push_back(
      "TP's all-reduces sit on the critical path of every layer, so TP must not "
      "cross the node boundary; PP's few point-to-point sends tolerate the slower "
      "link. Megatron-LM's rank order keeps TP innermost for this reason.");
  return r;
}

// 4. GPipe vs 1F1B -------------------------------------------------------------------------------

ScenarioReport gpipe_vs_1f1b() {
  ScenarioReport r;
  r.name = "gpipe-vs-1f1b";
  r.title = "GPipe vs 1F1B at P=8: bubble at M=8 and M=64, and activation memory of each";
  PlanInput in = input_for("gpt3-175b", "8x8xA100", 8);
  r.setup.push_back(describe_input(in));
  r.setup.push_back(
      "tp=8 (in the node), pp=8, dp=1, micro-batch 1, selective recompute with "
      "sequence parallelism; activations are the first stage's, which holds the "
      "most micro-batches; the total is the stage that needs the most (the last "
      "adds the logits of every micro-batch it holds)");
  ScenarioTable t{
      "Schedules at P=8",
      {"schedule", "M", "bubble / step", "bubble / ideal", "formula / step", "formula / ideal",
       "in flight (stage 0)", "activations (stage 0)", "total (worst stage)", "fits", "step"},
      {}};
  double gpipe64 = 0, onef64 = 0;
  for (int microbatches : {8, 64}) {
    for (ScheduleKind kind :
         {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved}) {
      PlanInput batch_in = in;
      batch_in.training.global_batch = microbatches;
      Layout l;
      l.tp = 8;
      l.pp = 8;
      l.recompute = Recompute::selective;
      l.sequence_parallel = true;
      l.schedule = kind;
      l.vp = kind == ScheduleKind::interleaved ? 2 : 1;
      const Plan p = evaluate(batch_in, l);
      const MemoryBreakdown first = stage_memory(batch_in, l, 0);
      if (microbatches == 64 && kind == ScheduleKind::gpipe) gpipe64 = first.activations;
      if (microbatches == 64 && kind == ScheduleKind::one_f_one_b) onef64 = first.activations;
      // The whiteboard's closed form on equal stages, beside the simulated real stages.
      const BubbleEstimate formula = pipeline_bubble(kind, l.pp, microbatches, l.vp);
      t.rows.push_back({text(kind == ScheduleKind::interleaved ? "1F1B interleaved, v=2"
                                                               : std::string(name(kind))),
                        count(microbatches), pct(p.time.bubble.fraction_of_total),
                        pct(p.time.bubble.fraction_of_ideal), pct(formula.fraction_of_total),
                        pct(formula.fraction_of_ideal), fixed(first.inflight_microbatches, 2),
                        gb(first.activations), gb(p.memory.total()), fits(p.memory),
                        secs(p.time.step_s)});
    }
  }
  r.tables.push_back(t);
  const BubbleEstimate b8 = pipeline_bubble(ScheduleKind::one_f_one_b, 8, 8);
  const BubbleEstimate b64 = pipeline_bubble(ScheduleKind::one_f_one_b, 8, 64);
  r.findings.push_back(
      str("GPipe and 1F1B have the same bubble, (P-1)/(M+P-1) of the step: 7/15 = ",
          format_percent(b8.fraction_of_total),
          " at M=8 and 7/71 = ", format_percent(b64.fraction_of_total),
          " at M=64 (Megatron reports it relative to the ideal time, (P-1)/M: ",
          format_percent(b8.fraction_of_ideal), " and ", format_percent(b64.fraction_of_ideal),
          "). Interleaving with v chunks divides the bubble time by v. The table's bubble columns "
          "are the schedules simulated on the real stages (the formula columns are the closed "
          "form on equal stages), a little below the closed form: the head "
          "makes the last stage the slowest, and the lighter stages it waits for fill and "
          "drain sooner."));
  r.findings.push_back(
      str("What differs is memory: GPipe runs every forward before any backward, "
          "so the first stage holds all M micro-batches; 1F1B starts backwards "
          "after P forwards and holds at most P. At M=64 that is ",
          format_gb(gpipe64), " against ", format_gb(onef64),
          " of activations: the larger M that shrinks the bubble is only "
          "affordable with 1F1B."));
  return r;
}

// 5. DDP vs FSDP ---------------------------------------------------------------------------------

ScenarioReport ddp_vs_fsdp() {
  ScenarioReport r;
  r.name = "ddp-vs-fsdp";
  r.title = "DDP vs FSDP for a 13B model: memory per GPU, and what FSDP pays in communication";
  PlanInput in = input_for("llama2-13b", "1x8xA100", 8);
  const int64_t psi = param_count(in.model);
  r.setup.push_back(describe_input(in));
  r.setup.push_back(str("one micro-batch of 1 x ", in.model.seq,
                        " tokens per GPU, selective recompute; DDP all-reduces ",
                        format_gb(in.training.bucket_bytes),
                        " buckets, FSDP (ZeRO-3) gathers "
                        "one layer at a time"));
  ScenarioTable t{"Per GPU, per step",
                  {"GPUs", "micro-batches", "sharding", "model states", "total memory", "fits",
                   "bytes sent/rank", "collective calls", "comm time", "exposed", "step"},
                  {}};
  double ddp_bytes = 0, fsdp_bytes = 0, fsdp_calls = 0, ddp_bytes_m8 = 0, fsdp_bytes_m8 = 0;
  struct Row {
    int gpus, microbatches, zero;
  };
  for (Row row : {Row{8, 1, 0}, Row{8, 1, 1}, Row{8, 1, 2}, Row{8, 1, 3}, Row{8, 8, 0},
                  Row{8, 8, 3}, Row{16, 1, 0}, Row{16, 1, 3}}) {
    PlanInput g_in = in;
    g_in.cluster = parse_cluster(str(row.gpus / 8, "x8xA100"));
    g_in.training.global_batch = row.gpus * row.microbatches;
    Layout l;
    l.dp = row.gpus;
    l.zero_stage = row.zero;
    l.recompute = Recompute::selective;
    const Plan p = evaluate(g_in, l);
    const double bytes = group_bytes(p, "DP") + group_bytes(p, "ZeRO");
    const double calls = group_calls(p, "DP", "ZeRO");
    if (row.gpus == 8 && row.zero == 0) (row.microbatches == 1 ? ddp_bytes : ddp_bytes_m8) = bytes;
    if (row.gpus == 8 && row.zero == 3) {
      (row.microbatches == 1 ? fsdp_bytes : fsdp_bytes_m8) = bytes;
      if (row.microbatches == 1) fsdp_calls = calls;
    }
    const std::string label = row.zero == 0   ? "DDP (none)"
                              : row.zero == 3 ? "FSDP (ZeRO-3)"
                                              : str("ZeRO-", row.zero);
    t.rows.push_back({count(row.gpus), count(row.microbatches), text(label),
                      gb(p.memory.params + p.memory.grads + p.memory.optimizer),
                      gb(p.memory.total()), fits(p.memory), gb(bytes), count(calls),
                      secs(p.time.dp_s), secs(p.time.dp_exposed_s), secs(p.time.step_s)});
  }
  r.tables.push_back(t);
  r.findings.push_back(str("DDP replicates all ", in.training.state_bytes.total(), " B/param: ",
                           format_gb(static_cast<double>(psi * in.training.state_bytes.total())),
                           " per GPU, far over 80 GB. FSDP shards them: 1/8 on one node, 1/16 "
                           "on two."));
  r.findings.push_back(
      str("FSDP pays 1.5x the bytes: DDP's all-reduce sends 2 Psi (N-1)/N "
          "elements per rank, FSDP's all-gather (forward), all-gather (backward) "
          "and reduce-scatter send 3 Psi (N-1)/N: ",
          format_gb(fsdp_bytes), " against ", format_gb(ddp_bytes), " (x",
          format_fixed(fsdp_bytes / ddp_bytes, 2), ") at 8 GPUs."));
  r.findings.push_back(str("It pays per layer: ", format_count(fsdp_calls),
                           " collectives per micro-batch (a gather per layer in each direction "
                           "and a reduce-scatter), each on the layer's critical path unless "
                           "prefetched behind the previous layer's compute. With gradient "
                           "accumulation over 8 micro-batches they repeat: ",
                           format_gb(fsdp_bytes_m8), " per step against DDP's unchanged ",
                           format_gb(ddp_bytes_m8), "."));
  return r;
}

}  // namespace

const std::vector<ScenarioInfo>& scenarios() {
  static const std::vector<ScenarioInfo> list = {
      {"size-70b", "Size a 70B run: 16 B/param, ZeRO-3 over 16 GPUs, activation recompute",
       size_70b},
      {"stalled-scaleout", "DP from 8 to 64 GPUs gets slower: network-bound all-reduce, fixes",
       stalled_scaleout},
      {"3d-placement", "TP=8 inside NVLink, PP=8 across nodes: why TP must not cross nodes",
       placement_3d},
      {"gpipe-vs-1f1b", "GPipe vs 1F1B at P=8: bubble at M=8 and M=64, activation memory",
       gpipe_vs_1f1b},
      {"ddp-vs-fsdp", "DDP vs FSDP for a 13B model: memory per GPU and the price of sharding",
       ddp_vs_fsdp},
  };
  return list;
}

ScenarioReport run_scenario(std::string_view name) {
  std::string known;
  for (const ScenarioInfo& s : scenarios()) {
    if (s.name == name) return s.run();
    known += (known.empty() ? "" : ", ") + std::string(s.name);
  }
  throw Error(str("scenario: unknown scenario '", name, "' (known: ", known,
                  "; `dtrain scenario list` describes them)"));
}

std::string format_scenario_list() {
  std::string s = "Scenarios (dtrain scenario NAME [--json]):\n";
  for (const ScenarioInfo& i : scenarios()) {
    s += "  " + pad_right(std::string(i.name), 18) + std::string(i.title) + "\n";
  }
  return s;
}

std::string format_scenario(const ScenarioReport& r) {
  std::string s = r.title + "\n";
  for (const std::string& line : r.setup) s += "  " + line + "\n";
  for (const ScenarioTable& t : r.tables) {
    s += "\n" + t.title + "\n";
    std::vector<size_t> width(t.columns.size());
    for (size_t c = 0; c < t.columns.size(); ++c) width[c] = t.columns[c].size();
    for (const auto& row : t.rows) {
      for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
        width[c] = std::max(width[c], row[c].text.size());
      }
    }
    std::string header = "  ";
    for (size_t c = 0; c < t.columns.size(); ++c) header += pad_right(t.columns[c], width[c] + 2);
    s += header + "\n";
    for (const auto& row : t.rows) {
      std::string line = "  ";
      for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
        line += pad_right(row[c].text, width[c] + 2);
      }
      s += line + "\n";
    }
  }
  s += "\nFindings\n";
  for (const std::string& f : r.findings) s += "  - " + f + "\n";
  return s;
}

json scenario_json(const ScenarioReport& r) {
  json tables = json::array();
  for (const ScenarioTable& t : r.tables) {
    json rows = json::array();
    for (const auto& row : t.rows) {
      json obj = json::object();
      for (size_t c = 0; c < row.size() && c < t.columns.size(); ++c) {
        if (row[c].value) {
          obj[t.columns[c]] = *row[c].value;
        } else {
          obj[t.columns[c]] = row[c].text;
        }
      }
      rows.push_back(std::move(obj));
    }
    tables.push_back({{"title", t.title}, {"columns", t.columns}, {"rows", rows}});
  }
  return {{"name", r.name},
          {"title", r.title},
          {"setup", r.setup},
          {"units", "bytes, seconds, fractions and counts; text tables round them (GB = 10^9 B)"},
          {"tables", tables},
          {"findings", r.findings}};
}

}  // namespace dtrain::plan
