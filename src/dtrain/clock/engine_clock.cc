// The engine's clock: each kernel dtrain's GPT block, head, embedding and optimizer run, priced
// with the measured rates, then the step composed from the stage times, the TP collectives,
// the pipeline's schedule simulated on them and the DP communication thread's overlap.
#include "dtrain/clock/engine_clock.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <utility>

#include "dtrain/clock/cache_model.h"
#include "dtrain/core/check.h"
#include "dtrain/cost/collective_cost.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/cost/memory_model.h"
#include "dtrain/cost/moe.h"
#include "dtrain/schedule/pipeline_schedule.h"
#include "dtrain/schedule/pipeline_simulation.h"

namespace dtrain::plan {
namespace {

using comm::CollectiveOp;

// The engine's attention (model/ops/attention.cc) splits its (batch row, head) pairs over the
// rank's team when they hold at least 2^18 multiply-adds per member; each pair's products then
// run on one thread.
constexpr double kAttentionMinWorkPerMember = 262144;

// The engine's elementwise kernels compute in fp32 whatever the products' precision (bf16 keeps
// fp32 working copies), so they are priced at fp32's rates.
struct Kernels {
  const MeasuredRates& r;
  double seconds(KernelOp op, double elements, double calls = 1) const {
    return kernel_seconds(r, op, Precision::fp32, elements, calls);
  }
};

struct Shape {
  double B, T, C, NH, HS, F, t, BT, rows, C_local, F_local, NH_local;
};

Shape shape_of(const EngineClockInput& in) {
  const ModelShape& m = in.model;
  DTRAIN_CHECK(in.tp >= 1 && m.heads % in.tp == 0, "engine clock: --tp ", in.tp,
               " must divide the heads ", m.heads);
  DTRAIN_CHECK(in.cp >= 1 && m.seq % in.cp == 0, "engine clock: --cp ", in.cp,
               " must divide the sequence ", m.seq);
  Shape s{};
  s.B = static_cast<double>(in.micro_batch);
  s.T = static_cast<double>(m.seq / in.cp);  // a CP rank's tokens of each sequence
  s.C = static_cast<double>(m.hidden);
  s.NH = static_cast<double>(m.heads);
  s.HS = s.C / s.NH;
  s.F = static_cast<double>(m.ffn_or_default());
  s.t = in.tp;
  s.BT = s.B * s.T;
  s.rows = in.sequence_parallel && in.tp > 1 ? s.BT / s.t : s.BT;  // LayerNorm, residual rows
  s.C_local = s.C / s.t;
  s.F_local = s.F / s.t;
  s.NH_local = s.NH / s.t;
  return s;
}

// Which of a product's operands (A: m x k, B: k x n, C: m x n) the kernel just before touched;
// the others are stale (cache_model.h).
enum Fresh : int { kFreshA = 1, kFreshB = 2, kFreshC = 4 };

// The products of one layout, each priced between its cold and warm samples by where its
// operands live (cache_model.h's warm_share). The engine keeps every operand in fp32 (the bf16
// path rounds them on the fly inside sgemm), so each element is 4 bytes.
struct Products {
  const EngineClockInput& in;
  const MeasuredRates& r;
  double cache_bytes = 0, pass_bytes = 0;
  Products(const EngineClockInput& input, const MeasuredRates& rates)
      : in(input),
        r(rates),
        cache_bytes(engine_cache_bytes(input, rates)),
        pass_bytes(engine_pass_bytes(input)) {}
  double operator()(int threads, double m, double n, double k, int fresh) const {
    constexpr double e = 4;
    ProductOperands ops;
    ((fresh & kFreshA) ? ops.fresh_bytes : ops.stale_bytes) += m * k * e;
    ((fresh & kFreshB) ? ops.fresh_bytes : ops.stale_bytes) += k * n * e;
    ((fresh & kFreshC) ? ops.fresh_bytes : ops.stale_bytes) += m * n * e;
    return gemm_seconds_cached(r, in.precision, threads, m, n, k,
                               warm_share(ops, cache_bytes, pass_bytes));
  }
};

// The attention core of one micro-batch (attention_forward / attention_backward): per pair, two
// products forward (Q K^T: T x T x HS; att V: T x HS x T) and four backward (dV, datt, dQ, dK),
// and the causal softmax; the pairs shared out over the members.
struct Attention {
  double forward_s = 0, backward_s = 0;
};
Attention attention_seconds(const EngineClockInput& in, const Shape& s, const MeasuredRates& r) {
  const double pairs = s.B * s.NH_local;
  const double work = pairs * s.T * s.T * s.HS;
  const int members =
      in.threads > 1 && pairs >= 2 && work >= kAttentionMinWorkPerMember * in.threads ? in.threads
                                                                                      : 1;
  const double per_member = std::ceil(pairs / members);
  const double causal = s.T * (s.T + 1) / 2;  // elements of a pair's softmax
  const Kernels k{r};
  const Products product(in, r);
  auto gemm1 = [&](double m, double n, double kk, int fresh) {
    return product(1, m, n, kk, fresh);
  };
  constexpr int all = kFreshA | kFreshB | kFreshC;
  Attention a;
  // Forward: Q K^T and att V on the QKV just written and the scores just softmaxed.
  a.forward_s = per_member * (gemm1(s.T, s.T, s.HS, all) + gemm1(s.T, s.HS, s.T, all)) +
                k.seconds(KernelOp::softmax_forward, per_member * causal, per_member);
  // Backward: each product reads the gradient just computed and one tensor saved by the
  // forward (att for dV; V for datt; K, Q for dQ, dK), writing a fresh gradient.
  a.backward_s = per_member * (gemm1(s.T, s.HS, s.T, kFreshB | kFreshC) +
                               2 * gemm1(s.T, s.HS, s.T, kFreshA | kFreshC) +
                               gemm1(s.T, s.T, s.HS, kFreshA | kFreshC)) +
                 k.seconds(KernelOp::softmax_backward, per_member * causal, per_member);
  return a;
}

// A dense MLP of the engine's shape on `rows` rows (fc: C -> F_local, GELU, proj: F_local -> C):
// what engine_layer_seconds prices for the block's MLP, and what each expert runs on its rows.
PassTimes mlp_seconds(const EngineClockInput& in, const Shape& s, const MeasuredRates& r,
                      double rows) {
  PassTimes p;
  if (rows <= 0) return p;
  const Kernels k{r};
  const Products product(in, r);
  auto gemm = [&](double m, double n, double kk) {
    return product(in.threads, m, n, kk, kFreshA | kFreshC);
  };
  auto gemm_backward = [&](double m, double n, double kk) {
    return product(in.threads, m, n, kk, kFreshA);
  };
  p.forward_s = gemm(rows, s.F_local, s.C) + k.seconds(KernelOp::gelu_forward, rows * s.F_local) +
                gemm(rows, s.C, s.F_local);
  p.backward_input_s = gemm_backward(rows, s.F_local, s.C) +
                       k.seconds(KernelOp::gelu_backward, rows * s.F_local) +
                       gemm_backward(rows, s.C, s.F_local);
  p.backward_weight_s = gemm_backward(s.C, s.F_local, rows) + gemm_backward(s.F_local, s.C, rows);
  return p;
}

// Context parallelism's blockwise attention (model/ops/blockwise_attention.cc) on the critical
// CP rank: `blocks` (query block, key block) pairs with a visible key, each computed in full for
// `pairs` (batch row, head) pairs of T/cp queries and keys, on one thread. ring and all-gather:
// balanced, rank r's chunks r and 2N-1-r reach a key of every rank's first chunk, so all N
// blocks; contiguous, rank r computes blocks 0..r and the last rank all N. ulysses: N query
// blocks against the key blocks at or before them, over NH_local / N heads.
struct CpBlocks {
  double blocks = 0, pairs = 0;
};
CpBlocks cp_blocks(const EngineClockInput& in, const Shape& s) {
  const double N = in.cp;
  if (in.cp_algorithm == CpAlgorithm::ulysses) return {N * (N + 1) / 2, s.B * s.NH_local / N};
  return {N, s.B * s.NH_local};
}

// The blockwise attention's compute: per (block, pair) forward Q K^T (Tq x Tk x HS) and P V
// (Tq x HS x Tk) and the masked online softmax over the block's Tq x Tk scores; backward P
// recomputed (Q K^T), dV, dP, dQ, dK and the elementwise exp and dS. Around them the memory-bound
// copies: K/V packed for the exchange, the output's merge init and finish (forward), the row dot
// and dK/dV added back (backward), ulysses' head-split packing (4 tensors each way).
Attention cp_attention_compute(const EngineClockInput& in, const Shape& s, const MeasuredRates& r) {
  const CpBlocks b = cp_blocks(in, s);
  const double calls = b.blocks * b.pairs;
  const Kernels k{r};
  const Products product(in, r);
  auto gemm1 = [&](double m, double n, double kk) {
    return product(1, m, n, kk, kFreshA | kFreshB | kFreshC);
  };
  const double T = s.T, scores = T * T;
  const double local = s.BT * s.C_local;  // one (B, T/cp, C_local) tensor
  const double copies_forward =
      3 * local + (in.cp_algorithm == CpAlgorithm::ulysses ? 4 * local : 0);
  const double copies_backward =
      3 * local + (in.cp_algorithm == CpAlgorithm::ulysses ? 4 * local : 0);
  Attention a;
  a.forward_s = calls * (gemm1(T, T, s.HS) + gemm1(T, s.HS, T)) +
                k.seconds(KernelOp::softmax_forward, calls * scores, calls) +
                k.seconds(KernelOp::residual_forward, copies_forward);
  a.backward_s = calls * (2 * gemm1(T, T, s.HS) + 3 * gemm1(T, s.HS, T)) +
                 k.seconds(KernelOp::softmax_backward, calls * scores, calls) +
                 k.seconds(KernelOp::residual_forward, copies_backward);
  return a;
}

}  // namespace

double engine_pass_bytes(const EngineClockInput& in) {
  const Shape s = shape_of(in);
  // The tensors model/gpt.cc keeps per block: LN1 and LN2 outputs, QKV, the attention output,
  // its projection and the residual after it, the MLP's fc and GELU outputs, its projection and
  // the last residual; the pre-softmax scores and the probabilities of every (row, head) pair.
  const double kept =
      s.BT * (2 * s.C + 3 * s.C_local + s.C_local + 2 * s.C + 2 * s.F_local + 2 * s.C) +
      2 * s.B * s.NH_local * s.T * s.T;
  const double layers = static_cast<double>(in.model.layers / std::max(1, in.pp));
  return 4 * (2 * static_cast<double>(in.stage_params) + layers * kept);
}

double engine_cache_bytes(const EngineClockInput& in, const MeasuredRates& r) {
  const int ranks = in.ranks();
  const int on_node = in.ranks_per_node > 0 ? std::min(ranks, in.ranks_per_node) : ranks;
  return rank_cache_bytes(r.cache, in.threads, ranks_per_l3(r.cache, r.cores, on_node));
}

PassTimes engine_layer_seconds(const EngineClockInput& in, const MeasuredRates& r) {
  const Shape s = shape_of(in);
  const Kernels k{r};
  const Products product(in, r);
  // A forward product reads the activation the kernel before wrote and writes its output over
  // the bias just copied in; the weight is a pass old. A backward product (input or weight
  // gradient) reads the gradient just computed; the weight, the saved input and the gradient
  // buffers it accumulates into are a pass old.
  auto gemm = [&](double m, double n, double kk) {
    return product(in.threads, m, n, kk, kFreshA | kFreshC);
  };
  auto gemm_backward = [&](double m, double n, double kk) {
    return product(in.threads, m, n, kk, kFreshA);
  };
  const Attention attention =
      in.cp > 1 ? cp_attention_compute(in, s, r) : attention_seconds(in, s, r);
  // block_forward_dense / _sp: LN1, QKV, attention, projection, residual, LN2, fc, GELU,
  // fc_proj, residual (sgemm(M = rows of the output, N = its columns, K = the inner size)).
  double forward =
      k.seconds(KernelOp::layernorm_forward, s.rows * s.C) + gemm(s.BT, 3 * s.C_local, s.C) +
      attention.forward_s + gemm(s.BT, s.C, s.C_local) +
      k.seconds(KernelOp::residual_forward, s.rows * s.C) +
      k.seconds(KernelOp::layernorm_forward, s.rows * s.C) + gemm(s.BT, s.F_local, s.C) +
      k.seconds(KernelOp::gelu_forward, s.BT * s.F_local) + gemm(s.BT, s.C, s.F_local) +
      k.seconds(KernelOp::residual_forward, s.rows * s.C);
  // bf16: pack_block rounds the kept tensors to bf16 after the forward, unpack_block widens
  // them again before the backward (LN outputs, QKV, attention output, GELU output).
  double conversions = 0;
  if (in.precision == Precision::bf16) {
    const double packed =
        2 * s.rows * s.C + s.BT * 3 * s.C_local + s.BT * s.C_local + s.BT * s.F_local;
    conversions = k.seconds(KernelOp::bf16_convert, packed, 5);
  }
  // B: each linear's input gradient (dinp (BT, in) = dout (BT, out) W), GELU, the LayerNorms,
  // the attention core's backward.
  const double backward_input =
      gemm_backward(s.BT, s.F_local, s.C) + k.seconds(KernelOp::gelu_backward, s.BT * s.F_local) +
      gemm_backward(s.BT, s.C, s.F_local) + k.seconds(KernelOp::layernorm_backward, s.rows * s.C) +
      gemm_backward(s.BT, s.C_local, s.C) + attention.backward_s +
      gemm_backward(s.BT, s.C, 3 * s.C_local) +
      k.seconds(KernelOp::layernorm_backward, s.rows * s.C);
  // W: each weight's gradient (dW (out, in) += dout^T (out, BT) inp (BT, in)).
  const double backward_weight =
      gemm_backward(s.C, s.F_local, s.BT) + gemm_backward(s.F_local, s.C, s.BT) +
      gemm_backward(s.C, s.C_local, s.BT) + gemm_backward(3 * s.C_local, s.C, s.BT);
  double recompute = 0;
  // Selective recompute reruns the attention core; under CP the blockwise attention keeps no
  // scores (its backward recomputes them from the log-sum-exp), so nothing reruns.
  if (in.recompute == Recompute::selective && in.cp == 1) recompute = attention.forward_s;
  if (in.recompute == Recompute::full) recompute = forward;
  PassTimes p;
  p.forward_s = forward + conversions;
  p.recompute_s = recompute;
  p.backward_input_s = backward_input + recompute + conversions;
  p.backward_weight_s = backward_weight;
  return p;
}

PassTimes engine_head_seconds(const EngineClockInput& in, const MeasuredRates& r) {
  const Shape s = shape_of(in);
  const Kernels k{r};
  // The vocabulary rows this TP rank holds (model::tp_vocab_local: V padded to a multiple of tp).
  const double V = static_cast<double>(in.model.vocab);
  const double V_local = in.tp > 1 ? std::ceil(V / s.t) : V;
  const Products product(in, r);
  PassTimes p;
  // As a block's products: the logits on the final LayerNorm just written (the tied embedding
  // a pass old), the backward's on the logits' gradient just computed.
  p.forward_s = k.seconds(KernelOp::layernorm_forward, s.rows * s.C) +
                product(in.threads, s.BT, V_local, s.C, kFreshA | kFreshC) +
                k.seconds(KernelOp::crossentropy_forward, s.BT * V_local);
  p.backward_input_s = k.seconds(KernelOp::crossentropy_backward, s.BT * V_local) +
                       product(in.threads, s.BT, s.C, V_local, kFreshA) +
                       k.seconds(KernelOp::layernorm_backward, s.rows * s.C);
  p.backward_weight_s = product(in.threads, V_local, s.C, s.BT, kFreshA);
  return p;
}

PassTimes engine_embedding_seconds(const EngineClockInput& in, const MeasuredRates& r) {
  const Shape s = shape_of(in);
  const Kernels k{r};
  PassTimes p;
  p.forward_s = k.seconds(KernelOp::encoder_forward, s.BT * s.C);
  p.backward_input_s = k.seconds(KernelOp::encoder_backward, s.BT * s.C);
  return p;
}

double engine_optimizer_seconds(double params, double grad_elements, Precision precision,
                                const MeasuredRates& r) {
  const Kernels k{r};
  double s = k.seconds(KernelOp::grad_norm, grad_elements) + k.seconds(KernelOp::adamw, params);
  // Mixed precision: the updated fp32 master weights rounded into the bf16 weights.
  if (precision == Precision::bf16) s += k.seconds(KernelOp::bf16_convert, params);
  return s;
}

namespace {

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

namespace {

// Routed blocks on the stage that holds the most of them.
int64_t busiest_stage_moe_layers(const EngineClockInput& in) {
  const int64_t layers = in.model.layers / in.pp;
  int64_t routed = 0;
  for (int stage = 0; stage < in.pp; ++stage) {
    routed = std::max(routed, moe_layers_in(in.model, stage * layers, layers));
  }
  return routed;
}

}  // namespace

CpAttention engine_cp_attention_seconds(const EngineClockInput& in, const Cluster& c) {
  CpAttention out;
  if (in.cp == 1) return out;
  const Shape s = shape_of(in);
  const Attention compute = cp_attention_compute(in, s, c.gpu.measured);
  const CpBlocks blocks = cp_blocks(in, s);
  out.visible_blocks = static_cast<int>(blocks.blocks);
  // The engine exchanges fp32 buffers whatever the precision.
  CpShape cs;
  cs.seq = in.model.seq;
  cs.micro_batch = in.micro_batch;
  cs.hidden = in.model.hidden;
  cs.heads = in.model.heads;
  cs.tp = in.tp;
  cs.cp = in.cp;
  cs.bytes_per_element = 4;
  const double N = in.cp;
  if (in.cp_algorithm == CpAlgorithm::ring) {
    // Forward: hop i's [K|V] is in flight while block i is merged, waited for after it; what the
    // hop takes beyond the block shows. Backward: each hop (send_recv) blocks before its block.
    const double kv = cp_kv_block_bytes(cs);
    const double hop_s = engine_send_seconds(c, kv, in.inter_node_cp);
    const double block_s = compute.forward_s / blocks.blocks;
    out.comm_forward_s = (N - 1) * std::max(0.0, hop_s - block_s);
    out.comm_backward_s = (N - 1) * engine_send_seconds(c, 2 * kv, in.inter_node_cp) +
                          engine_send_seconds(c, kv, in.inter_node_cp);
    out.comm_total_s = (N - 1) * hop_s + out.comm_backward_s;
  } else {
    for (const CollectiveCall& call :
         cp_collectives_per_layer(cs, in.cp_algorithm, Recompute::none)) {
      const double one =
          call.op == CollectiveOp::all_to_all
              ? engine_all_to_all_seconds(c, call.bytes * (N - 1) / N, in.cp, in.inter_node_cp)
              : engine_collective_seconds(c, call.op, comm::Algorithm::ring, call.bytes, in.cp,
                                          in.inter_node_cp);
      (call.overlaps_forward ? out.comm_forward_s : out.comm_backward_s) +=
          one * static_cast<double>(call.count);
    }
  }
  if (in.cp_algorithm != CpAlgorithm::ring)
    out.comm_total_s = out.comm_forward_s + out.comm_backward_s;
  out.forward_s = compute.forward_s + out.comm_forward_s;
  out.backward_s = compute.backward_s + out.comm_backward_s;
  return out;
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

void MoeMlp::add_scaled(const MoeMlp& o, double w) {
  pass += o.pass.scaled(w);
  comm_forward_s += w * o.comm_forward_s;
  comm_backward_s += w * o.comm_backward_s;
  busiest_rows += w * o.busiest_rows;
}

MoeMlp engine_moe_mlp_seconds(const EngineClockInput& in, const Cluster& c) {
  MoeMlp out;
  const ModelShape& m = in.model;
  if (!m.moe.enabled()) return out;
  if (!in.block_routings.empty()) {
    EngineClockInput one = in;
    one.block_routings.clear();
    const double w = 1.0 / static_cast<double>(in.block_routings.size());
    for (const std::vector<double>& rows : in.block_routings) {
      DTRAIN_CHECK(static_cast<int64_t>(rows.size()) == m.moe.experts, "engine clock: a block's ",
                   "routing has ", rows.size(), " experts; the model has ", m.moe.experts);
      one.tokens_per_expert = rows;
      out.add_scaled(engine_moe_mlp_seconds(one, c), w);
    }
    return out;
  }
  const std::string gap =
      engine_clock_moe_gap(true, in.tp, in.ep, in.zero_stage, in.recompute, in.precision);
  DTRAIN_CHECK(gap.empty(), "engine clock: ", gap);
  const MeasuredRates& r = c.gpu.measured;
  const Shape s = shape_of(in);
  const Kernels k{r};
  const Products product(in, r);
  const double N = s.BT, E = static_cast<double>(m.moe.experts);
  const double top_k = static_cast<double>(m.moe.top_k);
  MoeDispatch d;
  d.tokens = N;
  d.hidden = m.hidden;
  d.top_k = m.moe.top_k;
  d.experts = m.moe.experts;
  d.ep = in.ep;
  d.bytes_per_element = 4;  // the engine's rows travel in fp32
  d.tokens_per_expert = in.tokens_per_expert;
  // The critical rank: the EP rank whose experts take the most rows, each expert its share of
  // the EP group's ep N k routed rows (one rank's N k without EP).
  const int64_t per_rank = m.moe.experts / in.ep;
  double routed = 0;
  for (const double t : in.tokens_per_expert) routed += t;
  auto rows_of = [&](int64_t e) {
    const double share = in.tokens_per_expert.empty()
                             ? 1 / E
                             : in.tokens_per_expert[static_cast<size_t>(e)] / routed;
    return in.ep * N * top_k * share;
  };
  int rank = 0;
  for (int q = 0; q < in.ep; ++q) {
    double rows = 0;
    for (int64_t e = q * per_rank; e < (q + 1) * per_rank; ++e) rows += rows_of(e);
    if (rows > out.busiest_rows) {
      out.busiest_rows = rows;
      rank = q;
    }
  }
  auto rank_experts = [&](int q) {
    PassTimes t;
    for (int64_t e = q * per_rank; e < (q + 1) * per_rank; ++e) {
      t += mlp_seconds(in, s, r, rows_of(e));
    }
    return t;
  };
  PassTimes experts = rank_experts(rank);
  // Every rank of the group waits at the combine for the busiest. With more threads than cores
  // the waiting ranks give their cores back (the engine's waits spin only microseconds), so the
  // busiest runs unshared while the others wait: the block's experts take the longer of the
  // busiest alone and every rank's work shared over the cores. The caller stretches by the
  // oversubscription, so that is the busiest over it, or the mean rank.
  const double over = oversubscription(in.ranks(), in.threads, r.cores);
  if (in.ep > 1 && over > 1) {
    auto total = [](const PassTimes& t) {
      return t.forward_s + t.backward_input_s + t.backward_weight_s;
    };
    double mean = 0;
    for (int q = 0; q < in.ep; ++q) mean += total(rank_experts(q)) / in.ep;
    const double busiest = total(experts);
    if (busiest > 0) experts = experts.scaled(std::max(1 / over, mean / busiest));
  }
  // The router: logits (N x E x C), softmax and top-k over the E probabilities; backward the
  // probabilities' gradient and the logits' input and weight gradients. The rows: gathered and
  // combined (N k rows of C) forward, the combine's and the gather's gradients backward.
  const double assignments = N * top_k * s.C;
  PassTimes p = experts;
  p.forward_s += product(in.threads, N, E, s.C, kFreshA | kFreshC) +
                 k.seconds(KernelOp::softmax_forward, N * E) +
                 k.seconds(KernelOp::residual_forward, 2 * assignments);
  p.backward_input_s += k.seconds(KernelOp::softmax_backward, N * E) +
                        product(in.threads, N, s.C, E, kFreshA) +
                        k.seconds(KernelOp::residual_forward, 3 * assignments);
  p.backward_weight_s += product(in.threads, E, s.C, N, kFreshA);
  if (in.ep > 1) {
    // model/moe_dispatch.cc: the row counts, the dispatch and the combine forward; backward the
    // outputs' gradients as the dispatch and the inputs' as the combine. Each waits for the
    // rank that moves the most bytes, sent or received.
    const int movers = busiest_ep_rank(d);
    const MoeA2aRank dispatch = dispatch_bytes(d, movers), combine = combine_bytes(d, movers);
    const double dispatch_s = engine_all_to_all_seconds(
        c, std::max(dispatch.sent_total(), dispatch.received_total()), in.ep, in.inter_node_dp);
    const double combine_s = engine_all_to_all_seconds(
        c, std::max(combine.sent_total(), combine.received_total()), in.ep, in.inter_node_dp);
    const double counts_s = engine_all_to_all_seconds(c, ep_counts_bytes(m.moe.experts, in.ep),
                                                      in.ep, in.inter_node_dp);
    out.comm_forward_s = counts_s + dispatch_s + combine_s;
    out.comm_backward_s = dispatch_s + combine_s;
    p.forward_s += out.comm_forward_s;
    p.backward_input_s += out.comm_backward_s;
  }
  out.pass = p;
  return out;
}

PassTimes engine_block_seconds(const EngineClockInput& in, const Cluster& c) {
  const MeasuredRates& r = c.gpu.measured;
  PassTimes dense = engine_layer_seconds(in, r);
  if (in.cp > 1) {
    const CpAttention a = engine_cp_attention_seconds(in, c);
    dense.forward_s += a.comm_forward_s;
    dense.backward_input_s += a.comm_backward_s;
    if (in.recompute == Recompute::full) {  // the forward rerun exchanges again
      dense.recompute_s += a.comm_forward_s;
      dense.backward_input_s += a.comm_forward_s;
    }
  }
  const ModelShape& m = in.model;
  if (!m.moe.enabled()) return dense;
  const int64_t layers = m.layers / in.pp;
  const int64_t routed = busiest_stage_moe_layers(in);
  if (routed == 0) return dense;
  // A routed block: the dense block with its MLP replaced (the forward rerun under full
  // recompute too).
  const Shape s = shape_of(in);
  const PassTimes mlp = mlp_seconds(in, s, r, s.BT);
  const MoeMlp moe = engine_moe_mlp_seconds(in, c);
  PassTimes routed_block = dense;
  const double forward_delta = moe.pass.forward_s - mlp.forward_s;
  routed_block.forward_s += forward_delta;
  routed_block.backward_input_s += moe.pass.backward_input_s - mlp.backward_input_s;
  routed_block.backward_weight_s += moe.pass.backward_weight_s - mlp.backward_weight_s;
  if (in.recompute == Recompute::full) {
    routed_block.recompute_s += forward_delta;
    routed_block.backward_input_s += forward_delta;
  }
  const double share = static_cast<double>(routed) / static_cast<double>(layers);
  PassTimes mean = dense.scaled(1 - share);
  mean += routed_block.scaled(share);
  return mean;
}

int64_t engine_moe_expert_param_count(const ModelShape& m, int ep) {
  const int64_t h = m.hidden, ffn = m.ffn_or_default();
  return m.moe.experts / std::max(1, ep) * (2 * h * ffn + ffn + h);
}

int64_t engine_moe_layer_param_count(const ModelShape& m, int ep) {
  const int64_t h = m.hidden, ffn = m.ffn_or_default();
  return engine_layer_param_count(m, 1) - (2 * h * ffn + ffn + h) + m.moe.experts * h +
         engine_moe_expert_param_count(m, ep);
}

int64_t engine_layer_param_count(const ModelShape& m, int tp) {
  const int64_t h = m.hidden, ffn = m.ffn_or_default();
  const int64_t split = 3 * h * h + 3 * h + h * h + ffn * h + ffn + h * ffn;
  return split / tp + 6 * h;  // + ln1 and ln2 (2h each), attn.proj.b and mlp.proj.b (h each)
}

double oversubscription(int ranks, int threads, int cores) {
  if (cores <= 0) return 1;
  return std::max(1.0, static_cast<double>(ranks) * threads / cores);
}

DpOverlap dp_overlap(double comm_s, double last_piece_s, double window_s, double interference) {
  DpOverlap o;
  if (comm_s <= 0) return o;
  o.exposed_s = exposed_time(comm_s, last_piece_s, window_s);
  o.slowdown_s = (std::max(1.0, interference) - 1) * (comm_s - o.exposed_s);
  return o;
}

std::string engine_clock_moe_gap(bool moe, int tp, int ep, int zero_stage, Recompute recompute,
                                 Precision precision) {
  if (!moe) return {};
  if (tp > 1) {
    return str("--tp ", tp,
               " with --experts: the engine clock (a cluster file with gpu.measured) does not "
               "price the MoE layer under TP (expert tensor parallelism) yet");
  }
  if (ep > 1 && (zero_stage != 0 || recompute == Recompute::full || precision != Precision::fp32)) {
    return str("--ep ", ep,
               ": the engine clock (a cluster file with gpu.measured) prices EP at --zero 0, "
               "fp32, without full recompute so far (here: --zero ",
               zero_stage, ", ", name(precision), ", recompute ", name(recompute), ")");
  }
  return {};
}

bool has_measured_rates(const Cluster& c) {
  return c.gpu.measured.present;
}

namespace {

// ZeRO-3's syncs on the busiest stage (the last when `head`, else the first; a single stage
// both): its units' sizes and compute from the layout, their collectives from `dp_seconds`, run
// through zero3_steps. The exposed part is what the timeline adds to the compute; the hidden
// collectives slow compute by `interference`, booked to forward for the forward's gathers
// (`forward`'s slowdown) and to backward for the rest (the result's).
template <typename DpSeconds>
DpOverlap zero3_overlap(const EngineClockInput& in, const Cluster& c, bool head, double stretch,
                        const TpSeconds& stage_tp, DpSeconds&& dp_seconds, PartnerWaits waits,
                        double interference, double* comm_s, DpOverlap* forward) {
  const MeasuredRates& r = c.gpu.measured;
  Zero3Stage z;
  z.head = head;
  z.embedding = in.pp == 1 || !head;
  z.embeddings_deferred = in.pp > 1;
  z.blocks = in.model.layers / in.pp;
  const double layers = std::max(1, z.blocks);
  const PassTimes block = engine_block_seconds(in, c).scaled(stretch);
  const TpSeconds block_tp = engine_tp_seconds(in, c, false, false);
  z.block.forward_s = block.forward_s + block_tp.forward_s / layers;
  z.block.backward_s =
      block.backward_input_s + block.backward_weight_s + block_tp.backward_s / layers;
  const PassTimes embedding = engine_embedding_seconds(in, r).scaled(stretch);
  const PassTimes head_pass = engine_head_seconds(in, r).scaled(stretch);
  if (z.embedding) {
    z.embeddings.forward_s = embedding.forward_s;
    z.embeddings.backward_s = embedding.backward_input_s + embedding.backward_weight_s;
  }
  if (z.head) {
    z.final_norm.forward_s = head_pass.forward_s;
    z.final_norm.backward_s = head_pass.backward_input_s + head_pass.backward_weight_s;
  }
  // The vocabulary's TP reductions go with the head's compute (with the embedding's on a
  // first stage).
  Zero3Unit& vocab = z.head ? z.final_norm : z.embeddings;
  vocab.forward_s += std::max(0.0, stage_tp.forward_s - block_tp.forward_s);
  vocab.backward_s += std::max(0.0, stage_tp.backward_s - block_tp.backward_s);
  // Parameters: blocks as the engine cuts them, the final LayerNorm (2C), the embeddings the rest
  // of the stage's.
  // A routed block holds its router and E / ep experts: the stage's mean block.
  double block_params = static_cast<double>(engine_layer_param_count(in.model, in.tp));
  if (in.model.moe.enabled() && z.blocks > 0) {
    const double routed = static_cast<double>(busiest_stage_moe_layers(in));
    block_params += routed / z.blocks *
                    static_cast<double>(engine_moe_layer_param_count(in.model, in.ep) -
                                        engine_layer_param_count(in.model, in.tp));
  }
  const double norm_params = z.head ? 2.0 * static_cast<double>(in.model.hidden) : 0;
  const double embedding_params =
      std::max(0.0, static_cast<double>(in.stage_params) - z.blocks * block_params - norm_params);
  const double param_bytes = in.precision == Precision::bf16 ? 2 : 4, grad_bytes = 4;
  auto collectives = [&](Zero3Unit& u, double params) {
    if (params <= 0) return;
    u.gather_s = dp_seconds(CollectiveOp::all_gather, comm::Algorithm::ring, params * param_bytes);
    u.reduce_scatter_s =
        dp_seconds(CollectiveOp::reduce_scatter, comm::Algorithm::ring, params * grad_bytes);
  };
  collectives(z.block, block_params);
  collectives(z.final_norm, norm_params);
  collectives(z.embeddings, embedding_params);

  const CommTimeline t = run_comm_timeline(zero3_steps(z, in.microbatches), waits);
  *comm_s = t.comm_s;
  DpOverlap o;
  o.exposed_s = std::max(0.0, t.span_s - t.compute_s);
  const double slowdown = (interference - 1) * std::max(0.0, t.comm_s - o.exposed_s);
  const double forward_gathers =
      in.microbatches * ((z.embedding || z.head ? z.embeddings.gather_s : 0) +
                         z.blocks * z.block.gather_s + (z.head ? z.final_norm.gather_s : 0));
  const double forward_share = t.comm_s > 0 ? std::min(1.0, forward_gathers / t.comm_s) : 0;
  forward->slowdown_s = slowdown * forward_share;
  o.slowdown_s = slowdown - forward->slowdown_s;
  return o;
}

}  // namespace

EngineClock engine_clock(const EngineClockInput& in, const Cluster& c) {
  DTRAIN_CHECK(c.gpu.measured.present, "cluster ", c.name,
               ": the engine's clock needs \"gpu.measured\" (run dtrain calibrate --compute)");
  DTRAIN_CHECK(in.pp >= 1 && in.chunks >= 1 && in.microbatches >= 1 && in.dp >= 1 &&
                   in.threads >= 1 && in.model.layers % (in.pp * in.chunks) == 0,
               "engine clock: inconsistent layout (pp ", in.pp, ", chunks ", in.chunks,
               ", microbatches ", in.microbatches, ", layers ", in.model.layers, ")");
  const MeasuredRates& r = c.gpu.measured;
  if (in.ranks_per_node == 0 && c.gpus_per_node > 0) {
    EngineClockInput on_nodes = in;
    on_nodes.ranks_per_node = c.gpus_per_node;
    return engine_clock(on_nodes, c);
  }
  const bool has_cache = r.cache.l1d_bytes > 0 || r.cache.l2_bytes > 0 || r.cache.l3_bytes > 0;
  if ((!in.price_cache_residency && has_cache) ||
      (!in.price_partner_waits && r.oversubscribed_wait_s > 0)) {
    // The effects left unpriced are taken out of the rates once: no caches known prices every
    // product cold, and no wait prices collectives at their idle-machine rates.
    Cluster plain = c;
    if (!in.price_cache_residency) {
      plain.gpu.measured.cache.l1d_bytes = 0;
      plain.gpu.measured.cache.l2_bytes = 0;
      plain.gpu.measured.cache.l3_bytes = 0;
    }
    if (!in.price_partner_waits) plain.gpu.measured.oversubscribed_wait_s = 0;
    return engine_clock(in, plain);
  }
  EngineClock clock;
  // Threads beyond the cores wait for one (oversubscription); those that have one share the
  // cache and memory bus with the others (corun_factor).
  const int compute_threads = in.ranks() * in.threads;
  const double over = oversubscription(in.ranks(), in.threads, r.cores);
  clock.stretch = over * corun_factor(r, compute_threads);

  // The busiest stage per micro-batch: its blocks, plus the embedding on the first and the
  // head on the last (both with one stage).
  const double layers = static_cast<double>(in.model.layers / in.pp);
  const PassTimes block = engine_block_seconds(in, c).scaled(layers);
  PassTimes first = block, last = block;
  first += engine_embedding_seconds(in, r);
  last += engine_head_seconds(in, r);
  if (in.pp == 1) last += engine_embedding_seconds(in, r);
  const TpSeconds tp_first = engine_tp_seconds(in, c, true, in.pp == 1);
  const TpSeconds tp_last = engine_tp_seconds(in, c, in.pp == 1, true);
  auto sum = [](const PassTimes& p, const TpSeconds& t) {
    return p.forward_s + p.backward_input_s + p.backward_weight_s + t.forward_s + t.backward_s;
  };
  const bool last_busiest = sum(last, tp_last) >= sum(first, tp_first);
  const PassTimes stage = (last_busiest ? last : first).scaled(clock.stretch);
  const TpSeconds tp = last_busiest ? tp_last : tp_first;
  clock.stage = stage;
  clock.tp_forward_s = tp.forward_s;
  clock.tp_backward_s = tp.backward_s;

  // Pipeline sends: one per chunk each way per micro-batch (in the engine's fp32 or bf16).
  const int64_t e = in.precision == Precision::bf16 ? 2 : 4;
  if (in.pp > 1) {
    const double bytes = pp_bytes_per_microbatch(in.micro_batch, in.model.seq / in.cp,
                                                 in.model.hidden, e, in.tp, in.sequence_parallel);
    clock.send_s = engine_send_seconds(c, bytes, in.inter_node_pp) * in.chunks;
  }
  // The schedule the executor runs, replayed on each virtual stage's times (pipeline_
  // simulation.h): L / (P v) blocks with their TP collectives, the embedding on the first, the
  // head on the last; a rank is held by its sends (one message per chunk each way).
  const ScheduleKind kind = in.chunks > 1 ? ScheduleKind::interleaved : in.schedule;
  const auto schedule = cached_pipeline_replay(kind, in.pp, in.microbatches, in.chunks);
  const TpSeconds tp_blocks = engine_tp_seconds(in, c, false, false);
  const TpSeconds tp_embedding = engine_tp_seconds(in, c, true, false);
  const TpSeconds tp_head = engine_tp_seconds(in, c, false, true);
  auto stage_times = [](const PassTimes& p, double stretch, double tp_forward_s,
                        double tp_backward_s) {
    return StageTimes{p.forward_s * stretch + tp_forward_s,
                      p.backward_input_s * stretch + tp_backward_s, p.backward_weight_s * stretch};
  };
  auto simulate = [&](double stretch) {
    PipelineSimulationInput sim;
    sim.virtual_stage_times = virtual_stage_times(
        in.pp, in.chunks, stage_times(block, stretch, tp_blocks.forward_s, tp_blocks.backward_s),
        stage_times(engine_embedding_seconds(in, r), stretch,
                    tp_embedding.forward_s - tp_blocks.forward_s,
                    tp_embedding.backward_s - tp_blocks.backward_s),
        stage_times(engine_head_seconds(in, r), stretch, tp_head.forward_s - tp_blocks.forward_s,
                    tp_head.backward_s - tp_blocks.backward_s));
    sim.send_s = clock.send_s / in.chunks;
    return schedule->run(sim);
  };
  const PipelineSimulation pipeline = simulate(clock.stretch);
  const double own_sends_s = pipeline.ranks[static_cast<size_t>(pipeline.critical_rank)].sending_s;
  const double M = in.microbatches;

  // DP and ZeRO on the communication thread: gradient syncs behind backward (the last
  // micro-batch's at ZeRO 0-1, every one's at 2), ZeRO 1-2's gather of the updated weights
  // waited for before the next step, ZeRO-3's per-unit gathers and reduce-scatters run through
  // the executor's order (zero3_steps). With more threads than cores (each DP rank's
  // communication thread beside the compute threads) every collective waits for its partner.
  DpOverlap forward_overlap, backward_overlap;
  if (in.data_ranks() > 1) {
    const int ranks = in.ranks();
    // Beside compute the ranks' compute and communication threads want the cores; while the
    // compute threads wait for a collective, only the communication threads do.
    const PartnerWaits waits{partner_wait_seconds(r, compute_threads + ranks),
                             partner_wait_seconds(r, ranks)};
    auto dp_seconds = [&](CollectiveOp op, comm::Algorithm algo, double bytes) {
      return engine_dp_collective_seconds(in, c, op, algo, bytes);
    };
    const double interference = std::max(1.0, r.comm_interference);
    if (in.zero_stage == 3) {
      const DpOverlap z = zero3_overlap(in, c, last_busiest, clock.stretch, tp, dp_seconds, waits,
                                        interference, &clock.dp_comm_s, &forward_overlap);
      backward_overlap = z;
      clock.phases.exposed_dp_s = z.exposed_s;
    } else {
      const StateBytes bytes{in.precision == Precision::bf16 ? 2 : 4, 4, 8};
      double backward_comm = 0, backward_piece = 0, after_update = 0;
      // Under EP (ZeRO 0) each bucket's dense part is reduced over DP and its experts' part over
      // the expert-data-parallel group (dp / ep ranks: nothing when dp = ep), one after the other
      // on the communication thread.
      const int64_t expert_params = in.ep > 1 ? in.stage_expert_params : 0;
      EngineClockInput expert_group = in;
      expert_group.dp = in.dp / std::max(1, in.ep);
      expert_group.cp = 1;
      expert_group.dp_ranks_per_node = std::min(in.dp_ranks_per_node, expert_group.dp);
      std::vector<std::pair<CollectiveCall, bool>> calls;  // (call, on the expert group)
      for (const CollectiveCall& call :
           dp_collectives(in.stage_params - expert_params, in.zero_stage, bytes, in.microbatches,
                          std::max<int64_t>(1, in.dp_pieces), 1)) {
        calls.emplace_back(call, false);
      }
      if (expert_params > 0 && expert_group.dp > 1) {
        for (const CollectiveCall& call :
             dp_collectives(expert_params, in.zero_stage, bytes, in.microbatches,
                            std::max<int64_t>(1, in.dp_pieces), 1)) {
          calls.emplace_back(call, true);
        }
      }
      for (const auto& [call, experts] : calls) {
        const comm::Algorithm algo =
            call.op == CollectiveOp::all_reduce ? in.dp_algorithm : comm::Algorithm::ring;
        // Under bf16 the gradients and the gathered weights travel and reduce as bf16.
        const double idle =
            experts ? engine_dp_collective_seconds(expert_group, c, call.op, algo, call.bytes)
                    : dp_seconds(call.op, algo, call.bytes);
        const auto count = static_cast<double>(call.count);
        if (call.overlaps_forward) {
          // ZeRO 1-2: the engine gathers the updated weights at once, compute waiting.
          after_update += (idle + waits.alone_s) * count;
          clock.dp_comm_s += (idle + waits.alone_s) * count;
        } else {
          // Beside backward; the last piece (what shows) runs with compute done.
          backward_comm += (idle + waits.beside_compute_s) * (count - 1) + idle + waits.alone_s;
          clock.dp_comm_s += (idle + waits.beside_compute_s) * (count - 1) + idle + waits.alone_s;
          backward_piece = std::max(backward_piece, idle + waits.alone_s);
        }
      }
      const double backward_one = stage.backward_input_s + stage.backward_weight_s;
      backward_overlap =
          dp_overlap(backward_comm, backward_piece,
                     in.zero_stage >= 2 ? M * backward_one : backward_one, interference);
      clock.phases.exposed_dp_s = backward_overlap.exposed_s + after_update;
    }
  }

  // The optimizer on this rank's part: its ZeRO shard at stages 1-3, everything at 0; the
  // norm's sum of squares over the gradients it owns (the same part).
  const double owned =
      static_cast<double>(in.stage_params) / (in.zero_stage >= 1 ? in.data_ranks() : 1);

  // CP's and EP's share of forward and backward, for the reports: per block, the stage's blocks
  // (the routed ones for EP), every micro-batch; full recompute runs the forward's again.
  const double reruns = in.recompute == Recompute::full ? 2 : 1;
  if (in.cp > 1) {
    const CpAttention a = engine_cp_attention_seconds(in, c);
    const double per_step = M * layers * clock.stretch;
    clock.cp_s = per_step * (reruns * a.comm_forward_s + a.comm_backward_s);
    clock.cp_total_s = per_step * (a.comm_total_s + (reruns - 1) * a.comm_forward_s);
  }
  if (in.ep > 1 && in.model.moe.enabled()) {
    const MoeMlp moe = engine_moe_mlp_seconds(in, c);
    clock.ep_s = M * static_cast<double>(busiest_stage_moe_layers(in)) * clock.stretch *
                 (reruns * moe.comm_forward_s + moe.comm_backward_s);
  }
  clock.phases.optimizer_s =
      engine_optimizer_seconds(owned, owned, in.precision, r) * clock.stretch;

  EnginePhases& p = clock.phases;
  p.forward_s = M * stage.forward_s + forward_overlap.slowdown_s;
  p.backward_s =
      M * (stage.backward_input_s + stage.backward_weight_s) + backward_overlap.slowdown_s;
  p.tp_comm_s = M * (tp.forward_s + tp.backward_s);
  const double busy = p.forward_s + p.backward_s + p.tp_comm_s;
  const double slowdown_s = forward_overlap.slowdown_s + backward_overlap.slowdown_s;
  // A rank waiting in the schedule's bubble gives its core back (the engine's waits spin only
  // microseconds, then yield or sleep), so with more threads than cores the step is the longer
  // of the ranks' stretched work and the schedule's critical path without oversubscription.
  const double schedule_s =
      over > 1
          ? std::max(busy + own_sends_s, simulate(clock.stretch / over).makespan_s + slowdown_s)
          : pipeline.makespan_s + slowdown_s;
  // The makespan sums the same seconds in another order: clamp the rounding (-1e-19 at P = 1).
  p.pipeline_wait_s = std::max(0.0, schedule_s - busy);
  // The bubble as the critical rank sees it (pipeline.bubble() without oversubscription).
  clock.pipeline_sends_s = own_sends_s;
  clock.bubble.ideal_time = busy + own_sends_s;
  clock.bubble.total_time = busy + p.pipeline_wait_s;
  clock.bubble.bubble_time = std::max(0.0, p.pipeline_wait_s - own_sends_s);
  clock.bubble.fraction_of_total =
      clock.bubble.total_time > 0 ? clock.bubble.bubble_time / clock.bubble.total_time : 0;
  clock.bubble.fraction_of_ideal =
      clock.bubble.ideal_time > 0 ? clock.bubble.bubble_time / clock.bubble.ideal_time : 0;
  p.step_s =
      p.forward_s + p.backward_s + p.tp_comm_s + p.pipeline_wait_s + p.exposed_dp_s + p.optimizer_s;
  return clock;
}

}  // namespace dtrain::plan
