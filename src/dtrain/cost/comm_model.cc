// The alpha-beta time model and the per-parallelism collective lists of comm_model.h, built on
// collective_traffic (collective_cost.cc) so that bytes and steps have a single formula.
#include "dtrain/cost/comm_model.h"

#include <algorithm>

#include "dtrain/core/check.h"

namespace dtrain::plan {

using comm::Algorithm;
using comm::CollectiveOp;

namespace {

CommCost cost_of(const CollectiveTraffic& t, Algorithm algo, const Link& link) {
  DTRAIN_CHECK(link.bandwidth_bytes_per_s > 0, "collective_cost: link '", link.name,
               "' has no bandwidth");
  CommCost c;
  c.steps = t.steps;
  c.bytes_sent = t.bytes_moved();
  // The direct algorithm reads more than it writes (reduce_scatter, all_gather, all_to_all: only
  // reads).
  const double moved =
      algo == Algorithm::direct ? std::max(t.bytes_sent, t.bytes_received) : t.bytes_sent;
  c.time_s =
      link.latency_us * 1e-6 * static_cast<double>(t.steps) + moved / link.bandwidth_bytes_per_s;
  return c;
}

}  // namespace

CommCost collective_cost(CollectiveOp op, Algorithm algo, double bytes, int world,
                         const Link& link) {
  return cost_of(collective_traffic(op, algo, bytes, world), algo, link);
}

CommCost all_to_all_v_cost(Algorithm algo, std::span<const double> sent_bytes,
                           std::span<const double> received_bytes, int rank, const Link& link) {
  // Uneven parts: a rank that receives more than it sends waits for the larger side, whichever
  // the algorithm (every link is full duplex).
  return cost_of(all_to_all_v_traffic(algo, sent_bytes, received_bytes, rank), Algorithm::direct,
                 link);
}

CommCost collective_cost(const CollectiveCall& call, Algorithm algo, int world, const Link& link) {
  CommCost one = collective_cost(call.op, algo, call.bytes, world, link);
  const double n = static_cast<double>(call.count);
  return {one.steps * call.count, one.bytes_sent * n, one.time_s * n};
}

HierarchicalCost hierarchical_cost(CollectiveOp op, double bytes, int ranks_per_node, int nodes,
                                   const Link& intra, const Link& inter) {
  DTRAIN_CHECK(ranks_per_node >= 1 && nodes >= 1, "hierarchical_cost: ranks_per_node ",
               ranks_per_node, " and nodes ", nodes, " must be >= 1");
  const double shard = bytes / ranks_per_node;
  HierarchicalCost h;
  switch (op) {
    case CollectiveOp::all_reduce:
      h.intra_first = collective_cost(CollectiveOp::reduce_scatter, Algorithm::ring, bytes,
                                      ranks_per_node, intra);
      h.inter = collective_cost(CollectiveOp::all_reduce, Algorithm::ring, shard, nodes, inter);
      h.intra_last =
          collective_cost(CollectiveOp::all_gather, Algorithm::ring, bytes, ranks_per_node, intra);
      break;
    case CollectiveOp::reduce_scatter:
      h.intra_first = collective_cost(CollectiveOp::reduce_scatter, Algorithm::ring, bytes,
                                      ranks_per_node, intra);
      h.inter = collective_cost(CollectiveOp::reduce_scatter, Algorithm::ring, shard, nodes, inter);
      break;
    case CollectiveOp::all_gather:
      h.inter = collective_cost(CollectiveOp::all_gather, Algorithm::ring, shard, nodes, inter);
      h.intra_last =
          collective_cost(CollectiveOp::all_gather, Algorithm::ring, bytes, ranks_per_node, intra);
      break;
    case CollectiveOp::broadcast:
    case CollectiveOp::reduce:
    case CollectiveOp::all_to_all:
      throw Error(str("hierarchical_cost: no two-level form for ", comm::name(op)));
  }
  h.time_s = h.intra_first.time_s + h.inter.time_s + h.intra_last.time_s;
  return h;
}

HierarchicalCost hierarchical_all_reduce_cost(double bytes, int ranks_per_node, int nodes,
                                              const Link& intra, const Link& inter) {
  return hierarchical_cost(CollectiveOp::all_reduce, bytes, ranks_per_node, nodes, intra, inter);
}

std::vector<CollectiveCall> dp_collectives(int64_t params, int zero_stage, StateBytes bytes,
                                           int microbatches, int64_t pieces,
                                           int64_t gather_pieces) {
  DTRAIN_CHECK(zero_stage >= 0 && zero_stage <= 3, "--zero must be 0, 1, 2 or 3, got ", zero_stage);
  DTRAIN_CHECK(microbatches >= 1 && pieces >= 1, "dp_collectives: microbatches ", microbatches,
               " and pieces ", pieces, " must be >= 1");
  const double psi = static_cast<double>(params);
  const double grad_bytes = psi * static_cast<double>(bytes.grad) / static_cast<double>(pieces);
  const double param_bytes = psi * static_cast<double>(bytes.param) / static_cast<double>(pieces);
  const int64_t gathers = gather_pieces > 0 ? gather_pieces : pieces;
  const double gather_bytes = psi * static_cast<double>(bytes.param) / static_cast<double>(gathers);
  const int64_t per_mb = pieces * microbatches;
  switch (zero_stage) {
    case 0:
      return {{CollectiveOp::all_reduce, grad_bytes, pieces, "gradients", false}};
    case 1:
      return {{CollectiveOp::reduce_scatter, grad_bytes, pieces, "gradients", false},
              {CollectiveOp::all_gather, gather_bytes, gathers, "updated weights", true}};
    case 2:
      return {
          {CollectiveOp::reduce_scatter, grad_bytes, per_mb, "gradients, per micro-batch", false},
          {CollectiveOp::all_gather, gather_bytes, gathers, "updated weights", true}};
    default:
      return {
          {CollectiveOp::all_gather, param_bytes, per_mb, "weights for the forward", true},
          {CollectiveOp::all_gather, param_bytes, per_mb, "weights for the backward", false},
          {CollectiveOp::reduce_scatter, grad_bytes, per_mb, "gradients, per micro-batch", false}};
  }
}

std::vector<CollectiveCall> stage_dp_collectives(const StageDataParallel& s, StateBytes bytes) {
  DTRAIN_CHECK(s.zero_stage >= 0 && s.zero_stage <= 3, "--zero must be 0, 1, 2 or 3, got ",
               s.zero_stage);
  DTRAIN_CHECK(
      s.microbatches >= 1 && s.deferred >= 0 && s.deferred <= s.params && s.rerun_gathered >= 0,
      "stage_dp_collectives: inconsistent stage (params ", s.params, ", deferred ", s.deferred,
      ", microbatches ", s.microbatches, ")");
  const double g = static_cast<double>(bytes.grad), p = static_cast<double>(bytes.param);
  const auto psi = static_cast<double>(s.params);
  const auto deferred = static_cast<double>(s.deferred);
  const auto M = static_cast<double>(s.microbatches);
  const auto back = static_cast<double>(s.backward_gathered < 0 ? s.params : s.backward_gathered);
  using comm::CollectiveOp;
  switch (s.zero_stage) {
    case 0:
      return {{CollectiveOp::all_reduce, psi * g, 1, "gradients", false}};
    case 1:
      return {{CollectiveOp::reduce_scatter, psi * g, 1, "gradients", false},
              {CollectiveOp::all_gather, psi * p, 1, "updated weights", true}};
    case 2:
      return {{CollectiveOp::reduce_scatter, ((psi - deferred) * M + deferred) * g, 1,
               "gradients, per micro-batch", false},
              {CollectiveOp::all_gather, psi * p, 1, "updated weights", true}};
    default:
      return {{CollectiveOp::all_gather, psi * p * M, 1, "weights for the forward", true},
              {CollectiveOp::all_gather, (back + static_cast<double>(s.rerun_gathered)) * p * M, 1,
               "weights for the backward", false},
              {CollectiveOp::reduce_scatter, ((psi - deferred) * M + deferred) * g, 1,
               "gradients, per micro-batch", false}};
  }
}

namespace {

// The shard pieces of the flat range `r`: rank i's owned elements inside it.
std::vector<int64_t> shard_pieces(const StageDataParallelRank& s, const comm::Chunk& r) {
  const int64_t shard = shard_count(s.params, s.ranks);
  std::vector<int64_t> pieces;
  for (int i = 0; i < s.ranks; ++i) {
    const int64_t lo = std::clamp<int64_t>(i * shard, r.offset, r.offset + r.count);
    const int64_t hi =
        std::clamp<int64_t>(std::min(s.params, (i + 1) * shard), r.offset, r.offset + r.count);
    pieces.push_back(hi - lo);
  }
  return pieces;
}

int64_t all_but(const std::vector<int64_t>& pieces, int skipped) {
  int64_t sum = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (static_cast<int>(i) != skipped) sum += pieces[i];
  }
  return sum;
}

}  // namespace

std::vector<UnitRun> gradient_buckets(std::span<const int64_t> unit_counts, int64_t bucket_bytes,
                                      int64_t bytes_per_element) {
  DTRAIN_CHECK(bucket_bytes > 0, "--bucket-size must be positive (got ", bucket_bytes, " bytes)");
  std::vector<UnitRun> buckets;
  for (int u = 0; u < static_cast<int>(unit_counts.size()); ++u) {
    if (buckets.empty() || buckets.back().count * bytes_per_element >= bucket_bytes) {
      buckets.push_back({u, u, 0});
    }
    buckets.back().last = u;
    buckets.back().count += unit_counts[static_cast<size_t>(u)];
  }
  return buckets;
}

int64_t stage_dp_bytes_moved(const StageDataParallelRank& s, int64_t grad_bytes,
                             int64_t param_bytes, comm::Algorithm algo, int64_t slot_bytes) {
  DTRAIN_CHECK(s.ranks >= 1 && s.rank >= 0 && s.rank < s.ranks && s.microbatches >= 1 &&
                   s.zero_stage >= 0 && s.zero_stage <= 3,
               "stage_dp_bytes_moved: rank ", s.rank, " of ", s.ranks, ", zero ", s.zero_stage,
               ", microbatches ", s.microbatches);
  if (s.ranks == 1) return 0;  // a group of one moves nothing (every collective short-circuits)
  DTRAIN_CHECK(algo == Algorithm::ring || algo == Algorithm::direct,
               "stage_dp_bytes_moved: the engine's DP syncs run ring or direct, not ", name(algo));
  const bool direct = algo == Algorithm::direct;
  const int next = (s.rank + 1) % s.ranks;
  const int64_t peers = s.ranks - 1;
  // A reduce-scatter over `pieces`: the ring sends every piece but this rank's own; direct reads
  // this rank's piece from each peer.
  auto scattered = [&](const std::vector<int64_t>& pieces) {
    return direct ? peers * pieces[static_cast<size_t>(s.rank)] : all_but(pieces, s.rank);
  };
  // An all-gather: the ring sends every piece but the next rank's; direct reads every piece but
  // this rank's own.
  auto gathered_of = [&](const std::vector<int64_t>& pieces) {
    return all_but(pieces, direct ? s.rank : next);
  };
  // ZeRO-0's all-reduce of one bucket: the ring's reduce-scatter and all-gather over its
  // balanced chunks; direct reads this rank's chunk from each peer and writes the result back
  // into each (segment by segment through a window's slots), or on the latency path reads each
  // peer's whole bucket.
  auto reduced = [&](const comm::Chunk& r) -> int64_t {
    if (!direct) {
      std::vector<int64_t> chunks;
      for (int i = 0; i < s.ranks; ++i) chunks.push_back(comm::chunk_of(r.count, s.ranks, i).count);
      return all_but(chunks, s.rank) + all_but(chunks, next);
    }
    if (r.count * grad_bytes <= comm::kDirectExchangeMaxBytes) return peers * r.count;
    const int64_t segment = slot_bytes > 0 ? slot_bytes / grad_bytes : r.count;
    int64_t moved = 0;
    for (int64_t begin = 0; begin < r.count; begin += segment) {
      const int64_t len = std::min(segment, r.count - begin);
      moved += 2 * peers * comm::chunk_of(len, s.ranks, s.rank).count;
    }
    return moved;
  };
  int64_t elements = 0, gathered = 0;  // gradient elements moved, parameter elements moved
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    const comm::Chunk& r = s.buckets[b];
    if (s.zero_stage == 0) {
      elements += reduced(r);
      continue;
    }
    const bool per_microbatch = s.zero_stage >= 2 && static_cast<int>(b) != s.deferred_bucket;
    elements += scattered(shard_pieces(s, r)) * (per_microbatch ? s.microbatches : 1);
  }
  if (s.zero_stage == 1 || s.zero_stage == 2) {
    if (s.update_gathers.empty()) gathered += gathered_of(shard_pieces(s, {0, s.params}));
    for (const comm::Chunk& r : s.update_gathers) gathered += gathered_of(shard_pieces(s, r));
  }
  if (s.zero_stage == 3) {
    for (const std::vector<comm::Chunk>* list :
         {&s.forward_gathers, &s.backward_gathers, &s.rerun_gathers}) {
      for (const comm::Chunk& r : *list) {
        gathered += gathered_of(shard_pieces(s, r)) * s.microbatches;
      }
    }
  }
  return elements * grad_bytes + gathered * param_bytes;
}

std::vector<CollectiveCall> sp_regather_collectives(int64_t micro_batch, int64_t seq,
                                                    int64_t hidden, int64_t bytes_per_element) {
  const double activation = static_cast<double>(micro_batch) * static_cast<double>(seq) *
                            static_cast<double>(hidden) * static_cast<double>(bytes_per_element);
  return {{comm::CollectiveOp::all_gather, activation, 2, "LN outputs re-gathered", false}};
}

CollectiveTraffic dp_traffic_per_step(int64_t params, int dp, int zero_stage, StateBytes bytes,
                                      int microbatches, int64_t pieces, Algorithm algo) {
  return traffic_of(dp_collectives(params, zero_stage, bytes, microbatches, pieces), dp, algo);
}

std::vector<CollectiveCall> tp_collectives_per_layer(int64_t micro_batch, int64_t seq,
                                                     int64_t hidden, int64_t bytes_per_element,
                                                     bool sequence_parallel, Recompute recompute) {
  const double activation = static_cast<double>(micro_batch) * static_cast<double>(seq) *
                            static_cast<double>(hidden) * static_cast<double>(bytes_per_element);
  // f and g of the attention block and of the MLP: 2 forward, their conjugates 2 backward, and
  // the forward's 2 again when full recompute re-runs it.
  const int64_t count = recompute == Recompute::full ? 6 : 4;
  if (!sequence_parallel) return {{CollectiveOp::all_reduce, activation, count, "activations"}};
  return {{CollectiveOp::reduce_scatter, activation, count, "activations (sequence parallel)"},
          {CollectiveOp::all_gather, activation, count, "activations (sequence parallel)"}};
}

CollectiveTraffic tp_traffic_per_layer(int64_t micro_batch, int64_t seq, int64_t hidden,
                                       int64_t bytes_per_element, int tp, bool sequence_parallel,
                                       Recompute recompute) {
  return traffic_of(tp_collectives_per_layer(micro_batch, seq, hidden, bytes_per_element,
                                             sequence_parallel, recompute),
                    tp);
}

std::vector<CollectiveCall> tp_vocab_collectives(int64_t micro_batch, int64_t seq, int64_t hidden,
                                                 int64_t bytes_per_element, bool embedding,
                                                 bool head) {
  const double rows = static_cast<double>(micro_batch) * static_cast<double>(seq);
  const double e = static_cast<double>(bytes_per_element);
  const double activation = rows * static_cast<double>(hidden) * e;
  std::vector<CollectiveCall> calls;
  const CollectiveOp ar = CollectiveOp::all_reduce;
  if (embedding) calls.push_back({ar, activation, 1, "partial embeddings", false});
  if (head) {
    calls.push_back({ar, rows * e, 1, "row max of the logits", false});
    calls.push_back({ar, 2 * rows * e, 1, "sum of exps and target logit", false});
    calls.push_back({ar, activation, 1, "LM head input gradient", false});
  }
  return calls;
}

double pp_bytes_per_microbatch(int64_t micro_batch, int64_t seq, int64_t hidden,
                               int64_t bytes_per_element, int tp, bool sequence_parallel) {
  DTRAIN_CHECK(tp >= 1, "--tp must be >= 1, got ", tp);
  const double activation = static_cast<double>(micro_batch) * static_cast<double>(seq) *
                            static_cast<double>(hidden) * static_cast<double>(bytes_per_element);
  return sequence_parallel ? activation / tp : activation;
}

int64_t pp_sends_per_microbatch(int pp, int vp, int stage) {
  DTRAIN_CHECK(pp >= 1 && vp >= 1 && stage >= 0 && stage < pp, "pp_sends_per_microbatch: stage ",
               stage, " of pp ", pp, " with vp ", vp);
  if (pp == 1) return 0;
  return 2 * int64_t{vp} - (stage == 0 ? 1 : 0) - (stage == pp - 1 ? 1 : 0);
}

double exposed_time(double total_s, double last_piece_s, double window_s) {
  if (total_s <= 0) return 0;
  return std::max(last_piece_s, total_s - window_s);
}

CollectiveTraffic traffic_of(const std::vector<CollectiveCall>& calls, int world, Algorithm algo) {
  CollectiveTraffic sum;
  for (const CollectiveCall& c : calls) {
    const CollectiveTraffic one = collective_traffic(c.op, algo, c.bytes, world);
    const double n = static_cast<double>(c.count);
    sum.steps += one.steps * c.count;
    sum.bytes_sent += one.bytes_sent * n;
    sum.bytes_received += one.bytes_received * n;
    sum.bytes_read += one.bytes_read * n;
  }
  return sum;
}

}  // namespace dtrain::plan
