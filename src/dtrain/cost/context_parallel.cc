// Context parallelism's formulas (context_parallel.h): the bytes of each CP algorithm per layer,
// the activations a CP rank keeps, the causal work of the two splits, and the automatic choice.
#include "dtrain/cost/context_parallel.h"

#include <algorithm>

#include "dtrain/core/check.h"
#include "dtrain/cost/collective_cost.h"
#include "dtrain/machine/format.h"

namespace dtrain::plan {
namespace {

void check_shape(const CpShape& s) {
  DTRAIN_CHECK(s.seq > 0 && s.micro_batch > 0 && s.hidden > 0 && s.heads > 0 && s.tp >= 1 &&
                   s.cp >= 1 && s.bytes_per_element > 0,
               "context parallelism: sizes must be positive (seq ", s.seq, ", micro_batch ",
               s.micro_batch, ", hidden ", s.hidden, ", heads ", s.heads, ", tp ", s.tp, ", cp ",
               s.cp, ")");
  DTRAIN_CHECK(s.seq % s.cp == 0, "--cp ", s.cp, " does not divide --seq-length ", s.seq);
}

// b (T/N) x d x e: one head's worth of one rank's local tokens, at `bytes_per_element`.
double head_slice_bytes(const CpShape& s, int64_t bytes_per_element) {
  const double d = static_cast<double>(s.hidden) / static_cast<double>(s.heads);
  return static_cast<double>(cp_local_tokens(s)) * d * static_cast<double>(bytes_per_element);
}
double head_slice_bytes(const CpShape& s) {
  return head_slice_bytes(s, s.bytes_per_element);
}

CpPassTraffic collective_pass(const std::vector<CollectiveCall>& calls, bool forward, int cp) {
  CpPassTraffic p;
  for (const CollectiveCall& c : calls) {
    if (c.overlaps_forward != forward) continue;
    const comm::Algorithm algo =
        c.op == comm::CollectiveOp::all_to_all ? comm::Algorithm::pairwise : comm::Algorithm::ring;
    const CollectiveTraffic t = collective_traffic(c.op, algo, c.bytes, cp);
    p.messages += c.count;
    p.steps += t.steps * c.count;
    p.bytes_sent += t.bytes_sent * static_cast<double>(c.count);
    p.bytes_received += t.bytes_received * static_cast<double>(c.count);
  }
  return p;
}

}  // namespace

std::string_view name(CpAlgorithm algo) {
  switch (algo) {
    case CpAlgorithm::automatic:
      return "auto";
    case CpAlgorithm::ring:
      return "ring";
    case CpAlgorithm::all_gather:
      return "all-gather";
    case CpAlgorithm::ulysses:
      return "ulysses";
  }
  return "?";
}

std::optional<CpAlgorithm> parse_cp_algorithm(std::string_view text) {
  for (CpAlgorithm a :
       {CpAlgorithm::automatic, CpAlgorithm::ring, CpAlgorithm::all_gather, CpAlgorithm::ulysses}) {
    if (text == name(a)) return a;
  }
  return std::nullopt;
}

std::string_view name(CpSplit split) {
  return split == CpSplit::balanced ? "balanced" : "contiguous";
}

int64_t cp_kv_heads_per_tp_rank(const CpShape& s) {
  const int64_t kv = s.kv_heads_or_heads();
  return kv >= s.tp ? kv / s.tp : 1;
}

int64_t cp_local_tokens(const CpShape& s) {
  check_shape(s);
  return s.micro_batch * (s.seq / s.cp);
}

double cp_kv_block_bytes(const CpShape& s) {
  return 2.0 * static_cast<double>(cp_kv_heads_per_tp_rank(s)) * head_slice_bytes(s);
}

double cp_dkv_block_bytes(const CpShape& s) {
  return 2.0 * static_cast<double>(cp_kv_heads_per_tp_rank(s)) *
         head_slice_bytes(s, s.grad_bytes());
}

CpWireBytes cp_wire_bytes(Precision precision) {
  return {precision == Precision::bf16 ? 2 : 4, 4};
}

CpShape with_engine_wire(CpShape s, Precision precision) {
  const CpWireBytes wire = cp_wire_bytes(precision);
  s.bytes_per_element = wire.activations;
  s.grad_bytes_per_element = wire.gradients;
  return s;
}

bool cp_layout_ok(const CpShape& s, CpAlgorithm algo) {
  if (s.cp < 1) return false;
  if (s.cp == 1) return true;
  if (s.seq % s.cp != 0) return false;
  if ((algo == CpAlgorithm::ring || algo == CpAlgorithm::all_gather) && s.seq % (2 * s.cp) != 0) {
    return false;
  }
  const int64_t ranks = static_cast<int64_t>(s.cp) * s.tp;
  return algo != CpAlgorithm::ulysses ||
         (s.heads % ranks == 0 && s.kv_heads_or_heads() % ranks == 0);
}

std::string cp_layout_error(const CpShape& s, CpAlgorithm algo) {
  if (cp_layout_ok(s, algo)) return {};
  if (s.cp < 1) return str("--cp must be >= 1, got ", s.cp);
  if (s.cp == 1) return {};
  if (s.seq % s.cp != 0) return str("--cp ", s.cp, " does not divide --seq-length ", s.seq);
  if ((algo == CpAlgorithm::ring || algo == CpAlgorithm::all_gather) && s.seq % (2 * s.cp) != 0) {
    return str("--cp-algo ", name(algo), " needs --seq-length ", s.seq, " divisible by 2 x --cp ",
               s.cp, " = ", 2 * s.cp,
               " (the load-balanced causal split cuts the sequence into 2 x cp chunks)");
  }
  if (algo == CpAlgorithm::ulysses) {
    const int64_t ranks = static_cast<int64_t>(s.cp) * s.tp;
    const int64_t kv = s.kv_heads_or_heads();
    if (s.heads % ranks != 0 || kv % ranks != 0) {
      return str("--cp-algo ulysses needs --heads ", s.heads, " and --kv-heads ", kv,
                 " divisible by --cp ", s.cp, " x --tp ", s.tp, " = ", ranks,
                 " (each rank attends over whole heads): ",
                 s.heads % ranks != 0 ? str("--heads ", s.heads) : str("--kv-heads ", kv),
                 " is not; use --cp-algo ring or all-gather");
    }
  }
  return {};
}

CpLayerTraffic cp_ring_traffic_per_layer(const CpShape& s, Recompute recompute) {
  check_shape(s);
  CpLayerTraffic t;
  if (s.cp == 1) return t;
  const double block = cp_kv_block_bytes(s);
  const int64_t hops = s.cp - 1;
  // forward: N-1 hops of [K|V]
  t.forward = {hops, hops, static_cast<double>(hops) * block, static_cast<double>(hops) * block};
  // backward: N-1 hops of [K|V|dK|dV], then one of [dK|dV] home: N-1 K/V blocks and N dK/dV
  // blocks in N messages
  const double backward =
      static_cast<double>(hops) * block + static_cast<double>(s.cp) * cp_dkv_block_bytes(s);
  t.backward = {s.cp, s.cp, backward, backward};
  if (recompute == Recompute::full) {  // the forward's hops again, before the backward
    t.backward.messages += hops;
    t.backward.steps += hops;
    t.backward.bytes_sent += t.forward.bytes_sent;
    t.backward.bytes_received += t.forward.bytes_received;
  }
  return t;
}

std::vector<CollectiveCall> cp_collectives_per_layer(const CpShape& s, CpAlgorithm algo,
                                                     Recompute recompute) {
  check_shape(s);
  std::vector<CollectiveCall> calls;
  if (s.cp == 1 || algo == CpAlgorithm::ring) return calls;
  const int64_t reruns = recompute == Recompute::full ? 1 : 0;
  if (algo == CpAlgorithm::all_gather) {
    // S = 2 b T g_t d e: the gathered [K|V] (the all-gather's output per rank, the
    // reduce-scatter's input per rank).
    const double gathered = cp_kv_block_bytes(s) * static_cast<double>(s.cp);
    const double gradients = cp_dkv_block_bytes(s) * static_cast<double>(s.cp);
    calls.push_back({comm::CollectiveOp::all_gather, gathered, 1, "K, V (forward)", true});
    calls.push_back({comm::CollectiveOp::reduce_scatter, gradients, 1, "dK, dV (backward)", false});
    if (reruns > 0) {
      calls.push_back(
          {comm::CollectiveOp::all_gather, gathered, reruns, "K, V (recompute)", false});
    }
    return calls;
  }
  DTRAIN_CHECK(algo == CpAlgorithm::ulysses, "cp_collectives_per_layer: resolve --cp-algo auto");
  const double q_heads = static_cast<double>(s.heads / s.tp);
  const double kv_heads = static_cast<double>(cp_kv_heads_per_tp_rank(s));
  const double q = head_slice_bytes(s) * q_heads;  // Q, O
  const double kv = head_slice_bytes(s) * kv_heads;
  const double dq = head_slice_bytes(s, s.grad_bytes()) * q_heads;  // dO, dQ
  const double dkv = head_slice_bytes(s, s.grad_bytes()) * kv_heads;
  calls.push_back({comm::CollectiveOp::all_to_all, q, 2, "Q, O (forward)", true});
  calls.push_back({comm::CollectiveOp::all_to_all, kv, 2, "K, V (forward)", true});
  calls.push_back({comm::CollectiveOp::all_to_all, dq, 2, "dO, dQ (backward)", false});
  calls.push_back({comm::CollectiveOp::all_to_all, dkv, 2, "dK, dV (backward)", false});
  if (reruns > 0) {
    calls.push_back({comm::CollectiveOp::all_to_all, q, 2, "Q, O (recompute)", false});
    calls.push_back({comm::CollectiveOp::all_to_all, kv, 2, "K, V (recompute)", false});
  }
  return calls;
}

CpLayerTraffic cp_all_gather_traffic_per_layer(const CpShape& s, Recompute recompute) {
  const std::vector<CollectiveCall> calls =
      cp_collectives_per_layer(s, CpAlgorithm::all_gather, recompute);
  return {collective_pass(calls, true, s.cp), collective_pass(calls, false, s.cp)};
}

CpLayerTraffic cp_ulysses_traffic_per_layer(const CpShape& s, Recompute recompute) {
  const std::vector<CollectiveCall> calls =
      cp_collectives_per_layer(s, CpAlgorithm::ulysses, recompute);
  return {collective_pass(calls, true, s.cp), collective_pass(calls, false, s.cp)};
}

CpLayerTraffic cp_traffic_per_layer(const CpShape& s, CpAlgorithm algo, Recompute recompute) {
  switch (algo) {
    case CpAlgorithm::ring:
      return cp_ring_traffic_per_layer(s, recompute);
    case CpAlgorithm::all_gather:
      return cp_all_gather_traffic_per_layer(s, recompute);
    case CpAlgorithm::ulysses:
      return cp_ulysses_traffic_per_layer(s, recompute);
    case CpAlgorithm::automatic:
      break;
  }
  throw Error("cp_traffic_per_layer: resolve --cp-algo auto with choose_cp_algorithm first");
}

double cp_attention_state_bytes_per_layer(const ActivationShape& whole, int cp, CpAlgorithm algo) {
  DTRAIN_CHECK(cp >= 1 && whole.seq % cp == 0, "--cp ", cp, " does not divide --seq-length ",
               whole.seq);
  if (cp == 1) return 0;
  DTRAIN_CHECK(algo != CpAlgorithm::automatic,
               "cp_attention_state_bytes_per_layer: resolve --cp-algo auto first");
  const double s = static_cast<double>(whole.seq / cp), b = static_cast<double>(whole.micro_batch);
  const double t = static_cast<double>(whole.tp), n = static_cast<double>(cp);
  const double heads_local = static_cast<double>(whole.heads) / t;
  const double ew = whole.elementwise_bytes_per_element > 0
                        ? static_cast<double>(whole.elementwise_bytes_per_element)
                        : static_cast<double>(whole.bytes_per_element);
  // One rank's K and V (its T/N tokens), and its Q (= its output's size), in elements.
  // (K/V heads as TP holds them: a copy of one a rank above them.)
  const double kv_ratio = whole.kv_heads > 0
                              ? static_cast<double>(std::max<int64_t>(whole.kv_heads, whole.tp)) /
                                    static_cast<double>(whole.heads)
                              : 1.0;
  const double q = s * b * static_cast<double>(whole.hidden) / t;
  const double kv = 2 * kv_ratio * q;
  const double lse = 4.0 * heads_local * s * b;  // fp32, one per query row and head
  switch (algo) {
    case CpAlgorithm::ring:
      return lse;
    case CpAlgorithm::all_gather:
      return lse + ew * n * kv;  // the gathered [K|V], the rank's own block included
    case CpAlgorithm::ulysses:
      return lse + ew * (2 * q + kv);  // Q, K, V and O again, split by heads
    case CpAlgorithm::automatic:
      break;
  }
  return 0;
}

double cp_activation_bytes_per_layer(const ActivationShape& whole, int cp, CpAlgorithm algo) {
  DTRAIN_CHECK(cp >= 1 && whole.seq % cp == 0, "--cp ", cp, " does not divide --seq-length ",
               whole.seq);
  if (cp == 1) return activation_bytes_per_layer(whole);
  DTRAIN_CHECK(algo != CpAlgorithm::automatic,
               "cp_activation_bytes_per_layer: resolve --cp-algo auto first");
  ActivationShape local = whole;
  local.seq = whole.seq / cp;
  if (whole.recompute == Recompute::full) {
    return activation_bytes_per_layer(local);  // the layer input alone, at T/N tokens
  }
  // Every per-token tensor at T/N tokens but no score term in any mode (selective's set), and
  // the state the algorithm keeps in its place.
  local.recompute = Recompute::selective;
  return activation_bytes_per_layer(local) + cp_attention_state_bytes_per_layer(whole, cp, algo);
}

double cp_ring_block_bytes(const ActivationShape& whole, int cp) {
  DTRAIN_CHECK(cp >= 1 && whole.seq % cp == 0, "--cp ", cp, " does not divide --seq-length ",
               whole.seq);
  const double s = static_cast<double>(whole.seq / cp);
  const double ew = whole.elementwise_bytes_per_element > 0
                        ? static_cast<double>(whole.elementwise_bytes_per_element)
                        : static_cast<double>(whole.bytes_per_element);
  return static_cast<double>(whole.heads) / static_cast<double>(whole.tp) * s * s *
         static_cast<double>(whole.micro_batch) * ew;
}

int64_t causal_attention_pairs(int64_t seq, int cp, int rank, CpSplit split) {
  DTRAIN_CHECK(cp >= 1 && rank >= 0 && rank < cp, "causal_attention_pairs: rank ", rank,
               " outside 0..", cp - 1);
  // Rows [first, first + count): row i attends to keys 0..i, i + 1 pairs.
  auto rows = [](int64_t first, int64_t count) { return count * first + count * (count + 1) / 2; };
  if (split == CpSplit::contiguous) {
    DTRAIN_CHECK(seq % cp == 0, "--cp ", cp, " does not divide --seq-length ", seq);
    const int64_t l = seq / cp;
    return rows(rank * l, l);
  }
  DTRAIN_CHECK(seq % (2 * cp) == 0, "the balanced split needs --seq-length ", seq,
               " divisible by 2 x --cp ", cp);
  const int64_t c = seq / (2 * cp);
  return rows(rank * c, c) + rows((2 * cp - 1 - rank) * c, c);
}

double causal_work_imbalance(int64_t seq, int cp, CpSplit split) {
  int64_t busiest = 0, total = 0;
  for (int r = 0; r < cp; ++r) {
    const int64_t pairs = causal_attention_pairs(seq, cp, r, split);
    busiest = std::max(busiest, pairs);
    total += pairs;
  }
  return static_cast<double>(busiest) * cp / static_cast<double>(total);
}

double cp_contiguous_imbalance_limit(int cp) {
  DTRAIN_CHECK(cp >= 1, "--cp must be >= 1, got ", cp);
  return 2.0 - 1.0 / cp;
}

CpChoice choose_cp_algorithm(const CpShape& s, Recompute recompute, bool ring_hidden,
                             bool explain) {
  CpChoice c;
  if (s.cp == 1) {
    if (explain) c.why = "no context parallelism (cp=1)";
    return c;
  }
  const bool ring_ok = cp_layout_ok(s, CpAlgorithm::ring);
  const bool gather_ok = cp_layout_ok(s, CpAlgorithm::all_gather);
  const bool ulysses_ok = cp_layout_ok(s, CpAlgorithm::ulysses);
  if (!ring_ok && !gather_ok && !ulysses_ok) {
    throw Error(
        str(cp_layout_error(s, CpAlgorithm::ring), "; ", cp_layout_error(s, CpAlgorithm::ulysses)));
  }
  auto bytes = [&](CpAlgorithm a) { return cp_traffic_per_layer(s, a, recompute).bytes_sent(); };
  enum class Reason { fewest_bytes, hidden_hops, gather, only_one };
  Reason reason = Reason::only_one;
  if (ulysses_ok && (!ring_ok || bytes(CpAlgorithm::ulysses) <= bytes(CpAlgorithm::ring)) &&
      (!gather_ok || bytes(CpAlgorithm::ulysses) <= bytes(CpAlgorithm::all_gather))) {
    c.algorithm = CpAlgorithm::ulysses;
    reason = Reason::fewest_bytes;
  } else if (ring_ok && ring_hidden) {
    c.algorithm = CpAlgorithm::ring;
    reason = Reason::hidden_hops;
  } else if (gather_ok) {
    c.algorithm = CpAlgorithm::all_gather;
    reason = Reason::gather;
  } else {
    c.algorithm = ring_ok ? CpAlgorithm::ring : CpAlgorithm::ulysses;
  }
  if (!explain) return c;
  // Why, in words (a search decides thousands of layouts and explains the few it reports).
  std::string costs;
  for (CpAlgorithm a : {CpAlgorithm::ring, CpAlgorithm::all_gather, CpAlgorithm::ulysses}) {
    if (!cp_layout_ok(s, a)) continue;
    costs += str(costs.empty() ? "" : ", ", name(a), " ", format_gb(bytes(a)));
  }
  costs = str(" (bytes per layer and micro-batch, both passes: ", costs, ")");
  switch (reason) {
    case Reason::fewest_bytes:
      c.why = str("ulysses: the heads divide cp x tp and its 8 all-to-alls send the fewest bytes",
                  costs);
      break;
    case Reason::hidden_hops:
      c.why = str("ring: each K/V hop hides behind one block's attention compute", costs);
      break;
    case Reason::gather:
      c.why =
          str("all-gather: ",
              ulysses_ok ? "ulysses sends more bytes"
                         : str("ulysses cannot split ", s.heads, " heads (", s.kv_heads_or_heads(),
                               " K/V) over cp x tp = ", int64_t{s.cp} * s.tp),
              ", and the ring's hops would not hide behind its block compute", costs);
      break;
    case Reason::only_one:
      c.why = str(name(c.algorithm), ": the only algorithm that can run", costs);
      break;
  }
  return c;
}

}  // namespace dtrain::plan
