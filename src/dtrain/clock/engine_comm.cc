// The engine clock's communication: collectives, sends and all-to-alls priced with the measured
// rates (the links' latency and bandwidth where none was measured), TP's collectives, DP's over
// nodes, and the communication thread's queue (ZeRO-3's steps through run_comm_timeline).
#include "dtrain/clock/engine_clock.h"

#include <algorithm>
#include <deque>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrain/cost/collective_cost.h"
#include "dtrain/cost/comm_model.h"

namespace dtrain::plan {
namespace {

using comm::CollectiveOp;

std::string_view link_name(bool inter_node) {
  return inter_node ? "inter_node" : "intra_node";
}

}  // namespace

double engine_collective_seconds(const Cluster& c, CollectiveOp op, comm::Algorithm algo,
                                 double bytes, int ranks, bool inter_node, Precision precision) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const MeasuredRates& r = c.gpu.measured;
  const std::string_view link = link_name(inter_node);
  if (r.present && has_collective_rate(r, comm::name(op), comm::name(algo), link)) {
    // The rates were fitted on the larger of what a rank sends and receives (measured_rates.h):
    // the direct algorithm's ranks read their peers' memory and send nothing in a reduce-scatter
    // or an all-gather.
    const CollectiveTraffic t = algo == comm::Algorithm::direct
                                    ? direct_traffic(op, bytes, ranks)
                                    : collective_traffic(op, algo, bytes, ranks);
    return collective_seconds(r, comm::name(op), comm::name(algo), link, ranks,
                              std::max(t.bytes_sent, t.bytes_received), precision);
  }
  const Link& l = inter_node ? c.inter_node : c.intra_node;
  return collective_cost(op, algo, bytes, ranks, l).time_s;
}

double engine_send_seconds(const Cluster& c, double bytes, bool inter_node) {
  if (bytes <= 0) return 0;
  const MeasuredRates& r = c.gpu.measured;
  const std::string_view link = link_name(inter_node);
  if (r.present && has_collective_rate(r, "send_recv", "direct", link)) {
    return collective_seconds(r, "send_recv", "direct", link, 2, bytes);
  }
  const Link& l = inter_node ? c.inter_node : c.intra_node;
  return l.latency_us * 1e-6 + bytes / l.bandwidth_bytes_per_s;
}

TpSeconds engine_tp_seconds(const EngineClockInput& in, const Cluster& c, bool embedding,
                            bool head) {
  TpSeconds out;
  if (in.tp == 1) return out;
  const ModelShape& m = in.model;
  const double layers = static_cast<double>(m.layers / in.pp);
  const bool sp = in.sequence_parallel;
  // f and g travel in bf16 under --precision bf16 (TensorParallelGroup's bf16 wire); the
  // vocabulary's reductions always in fp32.
  const int64_t e = in.precision == Precision::bf16 ? 2 : 4;
  // With more compute threads than cores each collective also waits for its partner's turn.
  const double wait =
      c.gpu.measured.present ? partner_wait_seconds(c.gpu.measured, in.ranks() * in.threads) : 0;
  auto price_as = [&](const CollectiveCall& call, Precision precision) {
    return engine_collective_seconds(c, call.op, comm::Algorithm::ring, call.bytes, in.tp,
                                     in.inter_node_tp, precision) +
           wait;
  };
  auto price = [&](const CollectiveCall& call) { return price_as(call, in.precision); };
  for (const CollectiveCall& call :
       tp_collectives_per_layer(in.micro_batch, m.seq / in.cp, m.hidden, e, sp, in.recompute)) {
    // Two of each kind run in the forward (attention's and the MLP's), the rest in backward
    // (their conjugates, and full recompute's rerun).
    const double one = price(call) * layers;
    out.forward_s += 2 * one;
    out.backward_s += static_cast<double>(call.count - 2) * one;
  }
  if (sp) {
    for (const CollectiveCall& call :
         sp_regather_collectives(in.micro_batch, m.seq / in.cp, m.hidden, e))
      out.backward_s += price(call) * static_cast<double>(call.count) * layers;
  }
  // The vocabulary: the embedding's partial sums (forward), the cross-entropy's max and
  // sum-exp (forward) and the LM head's input gradient (backward). Under sequence parallelism
  // the activation-sized ones are a reduce-scatter, and the head's input and the embedding's
  // output gradient are all-gathered (the same bytes each way).
  const std::vector<CollectiveCall> vocab =
      tp_vocab_collectives(in.micro_batch, m.seq / in.cp, m.hidden, 4, embedding, head);
  for (size_t i = 0; i < vocab.size(); ++i) {
    CollectiveCall call = vocab[i];
    const bool activation_sized =
        call.bytes >= static_cast<double>(in.micro_batch * (m.seq / in.cp)) * 4 * 3;
    if (sp && activation_sized) call.op = CollectiveOp::reduce_scatter;
    const bool backward = head && i + 1 == vocab.size();  // the LM head's input gradient
    const double seconds = price_as(call, Precision::fp32);
    (backward ? out.backward_s : out.forward_s) += seconds;
    if (sp && activation_sized) {
      CollectiveCall gather = call;
      gather.op = CollectiveOp::all_gather;
      (backward ? out.forward_s : out.backward_s) += price_as(gather, Precision::fp32);
    }
  }
  return out;
}

double engine_dp_collective_seconds(const EngineClockInput& in, const Cluster& c, CollectiveOp op,
                                    comm::Algorithm algo, double bytes) {
  const int group = in.data_ranks();
  const int per_node = in.dp_ranks_per_node > 0 ? std::min(in.dp_ranks_per_node, group) : group;
  if (!in.inter_node_dp || per_node >= group) {
    return engine_collective_seconds(c, op, algo, bytes, group, in.inter_node_dp, in.precision);
  }
  const int nodes = group / per_node;
  if (in.dp_hierarchical && op == CollectiveOp::all_reduce) {
    // comm::hierarchical_all_reduce: three rings, fp32.
    const double inside = engine_collective_seconds(c, CollectiveOp::reduce_scatter,
                                                    comm::Algorithm::ring, bytes, per_node, false) +
                          engine_collective_seconds(c, CollectiveOp::all_gather,
                                                    comm::Algorithm::ring, bytes, per_node, false);
    return inside + collective_cost(CollectiveOp::all_reduce, comm::Algorithm::ring,
                                    bytes / per_node, nodes, c.inter_node)
                        .time_s;
  }
  if (has_collective_rate(c.gpu.measured, comm::name(op), comm::name(algo), "inter_node")) {
    return engine_collective_seconds(c, op, algo, bytes, group, true, in.precision);
  }
  // A flat ring: its slowest hop is the one crossing a node link, one flow per DP group there.
  Link flow = c.inter_node;
  flow.bandwidth_bytes_per_s =
      std::min(c.inter_node.bandwidth_bytes_per_s * per_node,
               std::max(c.intra_node.bandwidth_bytes_per_s, c.inter_node.bandwidth_bytes_per_s));
  return collective_cost(op, algo, bytes, group, flow).time_s;
}

double partner_wait_seconds(const MeasuredRates& r, int busy_threads) {
  return r.cores > 0 && busy_threads > r.cores ? r.oversubscribed_wait_s : 0;
}

std::vector<CommStep> zero3_steps(const Zero3Stage& s, int microbatches) {
  std::vector<CommStep> out;
  auto gather = [&](int unit, const Zero3Unit& u) {
    out.push_back({CommStepKind::gather, unit, u.gather_s});
  };
  auto reduce = [&](int unit, const Zero3Unit& u) {
    out.push_back({CommStepKind::reduce_scatter, unit, u.reduce_scatter_s});
  };
  auto wait = [&](int unit) { out.push_back({CommStepKind::wait, unit, 0}); };
  auto compute = [&](double seconds) { out.push_back({CommStepKind::compute, 0, seconds}); };
  const bool embeddings = s.embedding || s.head;  // the stage holds the embeddings unit
  const int last = kZero3FirstBlock + s.blocks - 1;
  for (int mb = 0; mb < microbatches; ++mb) {
    // forward_units: the embeddings and the first block prefetched, then each block's successor
    // (the final LayerNorm after the last) as the block is acquired.
    if (embeddings) gather(kZero3Embeddings, s.embeddings);
    if (s.blocks > 0) gather(kZero3FirstBlock, s.block);
    if (embeddings) wait(kZero3Embeddings);
    if (s.embedding) compute(s.embeddings.forward_s);
    for (int u = kZero3FirstBlock; u <= last; ++u) {
      wait(u);
      if (u < last) {
        gather(u + 1, s.block);
      } else if (s.head) {
        gather(kZero3FinalNorm, s.final_norm);
      }
      compute(s.block.forward_s);
    }
    if (s.head) {
      if (s.blocks == 0) gather(kZero3FinalNorm, s.final_norm);
      wait(kZero3FinalNorm);
      compute(s.final_norm.forward_s);
    }
    // backward: the head's units and the last block prefetched, then each block's predecessor
    // as the block is acquired; each unit's gradient reduce-scattered as its backward ends.
    if (s.head) {
      gather(kZero3FinalNorm, s.final_norm);
      gather(kZero3Embeddings, s.embeddings);
    }
    if (s.blocks > 0) gather(last, s.block);
    if (s.head) {
      wait(kZero3FinalNorm);
      wait(kZero3Embeddings);
      compute(s.final_norm.backward_s);
      reduce(kZero3FinalNorm, s.final_norm);
    }
    for (int u = last; u >= kZero3FirstBlock; --u) {
      wait(u);
      if (u > kZero3FirstBlock) gather(u - 1, s.block);
      compute(s.block.backward_s);
      reduce(u, s.block);
    }
    if (s.embedding) compute(s.embeddings.backward_s);
    if (embeddings && !s.embeddings_deferred && s.embedding) reduce(kZero3Embeddings, s.embeddings);
  }
  if (embeddings && s.embeddings_deferred) reduce(kZero3Embeddings, s.embeddings);
  return out;
}

CommTimeline run_comm_timeline(const std::vector<CommStep>& steps, PartnerWaits waits) {
  // The queue is resolved lazily: a collective's start is known once the compute thread's
  // timeline has reached it (at a wait for a gather, or at the end), so whether compute runs
  // beside it (a compute interval holds its start) or the compute thread waits is known too.
  struct Queued {
    CommStep step;
    double queued_s;
  };
  std::deque<Queued> queue;
  std::vector<std::pair<double, double>> computing;  // the compute thread's intervals
  size_t interval = 0;  // collectives start in order: the first interval that may hold the next
  CommTimeline t;
  double now = 0, comm_free = 0;
  std::vector<double> gathered;  // per unit: when its latest gather ends
  std::vector<int64_t> last_gather, done_gathers;
  int64_t queued_gathers = 0, resolved_gathers = 0;
  auto resolve_one = [&] {
    const Queued q = queue.front();
    queue.pop_front();
    const double start = std::max(q.queued_s, comm_free);
    while (interval < computing.size() && computing[interval].second <= start) ++interval;
    const bool beside =
        start < now && interval < computing.size() && computing[interval].first <= start;
    const double seconds = q.step.seconds + (beside ? waits.beside_compute_s : waits.alone_s);
    comm_free = start + seconds;
    t.comm_s += seconds;
    if (q.step.kind == CommStepKind::gather) {
      gathered[static_cast<size_t>(q.step.unit)] = comm_free;
      ++resolved_gathers;
    }
  };
  for (const CommStep& step : steps) {
    const auto unit = static_cast<size_t>(step.unit);
    switch (step.kind) {
      case CommStepKind::gather:
      case CommStepKind::reduce_scatter:
        queue.push_back({step, now});
        if (step.kind == CommStepKind::gather) {
          if (gathered.size() <= unit) {
            gathered.resize(unit + 1, 0);
            last_gather.resize(unit + 1, 0);
          }
          last_gather[unit] = ++queued_gathers;
        }
        break;
      case CommStepKind::wait:
        if (unit < gathered.size()) {
          while (resolved_gathers < last_gather[unit]) resolve_one();
          now = std::max(now, gathered[unit]);
        }
        break;
      case CommStepKind::compute:
        if (step.seconds > 0) computing.emplace_back(now, now + step.seconds);
        now += step.seconds;
        t.compute_s += step.seconds;
        break;
    }
  }
  while (!queue.empty()) resolve_one();
  t.span_s = std::max(now, comm_free);
  return t;
}

double engine_all_to_all_seconds(const Cluster& c, double bytes, int ranks, bool inter_node) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const MeasuredRates& r = c.gpu.measured;
  const std::string_view link = link_name(inter_node);
  if (r.present && has_collective_rate(r, "all_to_all", "pairwise", link)) {
    return collective_seconds(r, "all_to_all", "pairwise", link, ranks, bytes);
  }
  // Pairwise: ranks - 1 rounds, each a send to one peer and a receive from another.
  if (r.present && has_collective_rate(r, "send_recv", "direct", link)) {
    return (ranks - 1) * engine_send_seconds(c, bytes / (ranks - 1), inter_node);
  }
  const Link& l = inter_node ? c.inter_node : c.intra_node;
  return collective_cost(CollectiveOp::all_to_all, comm::Algorithm::pairwise,
                         bytes * ranks / (ranks - 1), ranks, l)
      .time_s;
}

}  // namespace dtrain::plan
