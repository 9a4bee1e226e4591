// The engine clock's compute: each kernel dtrain's GPT block, head, embedding and optimizer run,
// CP's blockwise attention and the MoE layer (router, experts, EP's exchanges), priced with the
// measured rates; products between their cold and warm samples (cache_model.h).
#include "dtrain/clock/engine_clock.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dtrain/clock/cache_model.h"
#include "dtrain/clock/engine_clock_internal.h"
#include "dtrain/core/check.h"
#include "dtrain/cost/moe.h"

namespace dtrain::plan {
namespace {

using comm::CollectiveOp;
using detail::busiest_stage_moe_layers;

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

namespace {

// One MLP on one TP rank as the engine holds it, dense or one expert: GPT's fc and proj split
// with fc's bias, proj's bias whole; or Llama's [gate | up] and down split, no biases.
int64_t engine_mlp_param_count(const ModelShape& m, int tp) {
  const int64_t h = m.hidden, ffn = m.ffn_or_default();
  return m.family == ModelFamily::llama ? 3 * h * ffn / tp : (2 * h * ffn + ffn) / tp + h;
}

}  // namespace

int64_t engine_moe_expert_param_count(const ModelShape& m, int ep, int tp) {
  return m.moe.experts / std::max(1, ep) * engine_mlp_param_count(m, std::max(1, tp));
}

int64_t engine_moe_layer_param_count(const ModelShape& m, int ep, int tp) {
  tp = std::max(1, tp);
  return engine_layer_param_count(m, tp) - engine_mlp_param_count(m, tp) +
         m.moe.experts * m.hidden + engine_moe_expert_param_count(m, ep, tp);
}

int64_t engine_layer_param_count(const ModelShape& m, int tp) {
  const int64_t h = m.hidden, ffn = m.ffn_or_default();
  if (m.family == ModelFamily::llama) {
    // q and o, and the MLP split; K and V of kv / tp heads a rank (with more TP ranks than K/V
    // heads a copy of one); the two RMSNorms whole.
    const int64_t hs = h / m.heads, kv = m.kv_heads_or_heads();
    const int64_t kv_local = kv >= tp ? kv / tp : 1;
    return (h * h + h * h + 3 * h * ffn) / tp + 2 * kv_local * hs * h + 2 * h;
  }
  const int64_t split = 3 * h * h + 3 * h + h * h + ffn * h + ffn + h * ffn;
  return split / tp + 6 * h;  // + ln1 and ln2 (2h each), attn.proj.b and mlp.proj.b (h each)
}

}  // namespace dtrain::plan
