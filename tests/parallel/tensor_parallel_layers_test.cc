// Tensor-parallel layers against their serial reference (DESIGN.md test 3): shard a serial
// layer with model::tp_slice, run the parallel one on N in {2, 4} rank threads, and compare the
// outputs and each rank's gradient slice. Each test states which comparisons are exact (the
// same arithmetic in the same order, whatever the BLAS kernel) and which are bounded: a GEMM's
// element summed in another order (a slice of W is another GEMM shape, which a BLAS kernel may
// tile and so sum differently; N partial sums added by an all-reduce).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/rng.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/ops/attention.h"
#include "dtrain/model/ops/crossentropy.h"
#include "dtrain/model/ops/encoder.h"
#include "dtrain/model/ops/matmul.h"
#include "dtrain/model/ops/vocab_parallel.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/parallel/tensor_parallel.h"

namespace dtrain::parallel {
namespace {

using model::ParamTensor;

// A GEMM element is a sum of K products; summed in another order it rounds differently. Each
// addition rounds by at most u = 2^-24 of a partial sum, and a partial sum is at most
// s = sum_k |a_k b_k|, the element's accumulated magnitude. The worst case for two orders is
// 2 (K - 1) u s; the K roundings have random signs, so two orders differ by about u sqrt(K) s,
// and kOrderUlps of those is well beyond what any order gives (observed up to 0.82 under
// OpenBLAS's Haswell kernels, 0.25 under Prescott, Sandybridge and SkylakeX) and still about 10^4
// times below one wrong or missing product (an error of order s / K).
constexpr double kOrderUlps = 4.0;
constexpr double kUnitRoundoff = 1.0 / 16777216.0;  // 2^-24

std::vector<float> random_values(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return m;
}

std::vector<float> absolute(const std::vector<float>& v) {
  std::vector<float> a(v.size());
  std::transform(v.begin(), v.end(), a.begin(), [](float x) { return std::fabs(x); });
  return a;
}

// Columns [c0, c0 + n) of a (rows, cols) matrix.
std::vector<float> columns(const std::vector<float>& m, int64_t rows, int64_t cols, int64_t c0,
                           int64_t n) {
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r) {
    out.insert(out.end(), m.begin() + r * cols + c0, m.begin() + r * cols + c0 + n);
  }
  return out;
}

// The per-rank results of one parallel run, compared on the main thread.
struct RankDiffs {
  double exact = 0;           // comparisons expected to be bit-identical
  double tolerant = 0;        // comparisons after an all-reduce of partial sums
  double reordered = 0;       // GEMM sums in another order: max |d|
  double reordered_ulps = 0;  // ... and max |d| / (u sqrt(K) s), at most kOrderUlps

  // `got` against `want`, sums of `terms` products whose absolute values sum to `magnitude`.
  void reordered_sums(const std::vector<float>& got, const std::vector<float>& want,
                      const std::vector<float>& magnitude, int64_t terms) {
    EXPECT_EQ(got.size(), want.size());
    EXPECT_EQ(magnitude.size(), want.size());
    const double unit = kUnitRoundoff * std::sqrt(static_cast<double>(terms));
    for (size_t i = 0; i < std::min({got.size(), want.size(), magnitude.size()}); ++i) {
      const double d = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
      reordered = std::max(reordered, d);
      reordered_ulps = std::max(reordered_ulps, d / (unit * static_cast<double>(magnitude[i])));
    }
  }
};

template <typename Body>
std::vector<RankDiffs> on_ranks(int N, Body body) {
  std::vector<RankDiffs> diffs(static_cast<size_t>(N));
  comm::threads::run_ranks(N, [&](comm::Communicator& world) {
    TensorParallelGroup tp(world);
    body(tp, diffs[static_cast<size_t>(world.rank())]);
  });
  return diffs;
}

void expect_diffs(const std::vector<RankDiffs>& diffs, double tol, const char* what) {
  for (size_t r = 0; r < diffs.size(); ++r) {
    std::printf(
        "  %s N=%zu rank %zu: exact max|d| %.3g, tolerant max|d| %.3g, reordered sums max|d| "
        "%.3g = %.3g u sqrt(K) s\n",
        what, diffs.size(), r, diffs[r].exact, diffs[r].tolerant, diffs[r].reordered,
        diffs[r].reordered_ulps);
    EXPECT_EQ(diffs[r].exact, 0.0) << what << " rank " << r;
    EXPECT_LE(diffs[r].tolerant, tol) << what << " rank " << r;
    EXPECT_LE(diffs[r].reordered_ulps, kOrderUlps) << what << " rank " << r;
  }
}

const model::GptConfig kConfig{.vocab = 250, .context = 8, .layers = 1, .heads = 4, .channels = 16};

TEST(TensorParallelLayers, ColumnParallelLinear) {
  // MLP first linear, W (4C, C) cut by rows. Exact: db (a plain loop, each column summed as
  // serially). Reordered sums: each rank's output columns and dW rows (the serial products, in a
  // GEMM of another shape) and dX (N partial sums over OC added by f's all-reduce).
  const int64_t BT = 12, C = kConfig.channels, OC = 4 * C;
  const ParamTensor w_t{"h.0.mlp.fc.w", {OC, C}, 0, OC * C}, b_t{"h.0.mlp.fc.b", {OC}, 0, OC};
  const auto x = random_values(BT * C, 1), w = random_values(OC * C, 2), b = random_values(OC, 3);
  const auto dout = random_values(BT * OC, 4);
  std::vector<float> out(static_cast<size_t>(BT * OC)), dx(static_cast<size_t>(BT * C), 0.0f);
  std::vector<float> dw(w.size(), 0.0f), db(b.size(), 0.0f);
  model::matmul_forward(out.data(), x.data(), w.data(), b.data(), BT, C, OC);
  model::matmul_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), BT, C,
                         OC);
  // The accumulated magnitudes: the same products of absolute values.
  std::vector<float> out_s(out.size()), dx_s(dx.size(), 0.0f), dw_s(dw.size(), 0.0f);
  model::matmul_forward_reference(out_s.data(), absolute(x).data(), absolute(w).data(),
                                  absolute(b).data(), BT, C, OC);
  model::matmul_backward_reference(dx_s.data(), dw_s.data(), nullptr, absolute(dout).data(),
                                   absolute(x).data(), absolute(w).data(), BT, C, OC);
  for (int N : {2, 4}) {
    const int64_t OC_local = OC / N;
    expect_diffs(
        on_ranks(N,
                 [&](TensorParallelGroup& tp, RankDiffs& d) {
                   const int r = tp.rank();
                   const auto w_r = model::tp_slice(w_t, w, kConfig, N, r);
                   const auto b_r = model::tp_slice(b_t, b, kConfig, N, r);
                   const auto dout_r = columns(dout, BT, OC, r * OC_local, OC_local);
                   std::vector<float> out_r(static_cast<size_t>(BT * OC_local));
                   std::vector<float> dx_r(dx.size(), 0.0f), dw_r(w_r.size(), 0.0f),
                       db_r(b_r.size(), 0.0f);
                   model::matmul_forward(out_r.data(), x.data(), w_r.data(), b_r.data(), BT, C,
                                         OC_local);  // f: identity
                   model::matmul_backward(dx_r.data(), dw_r.data(), db_r.data(), dout_r.data(),
                                          x.data(), w_r.data(), BT, C, OC_local);
                   tp.f_backward(dx_r.data(), BT * C);
                   d.exact = max_diff(db_r, model::tp_slice(b_t, db, kConfig, N, r));
                   d.reordered_sums(out_r, columns(out, BT, OC, r * OC_local, OC_local),
                                    columns(out_s, BT, OC, r * OC_local, OC_local), C + 1);
                   d.reordered_sums(dw_r, model::tp_slice(w_t, dw, kConfig, N, r),
                                    model::tp_slice(w_t, dw_s, kConfig, N, r), BT);
                   d.reordered_sums(dx_r, dx, dx_s, OC);
                 }),
        0.0, "column-parallel linear");
  }
}

TEST(TensorParallelLayers, RowParallelLinear) {
  // MLP second linear, W (C, 4C) cut by columns, its input by the same columns. Reordered sums:
  // each rank's dX and dW columns (the serial products, in a GEMM of another shape) and the
  // output (N partial products over 4C added by g's all-reduce).
  const int64_t BT = 12, C = kConfig.channels, K = 4 * C;
  const ParamTensor w_t{"h.0.mlp.proj.w", {C, K}, 0, C * K};
  const auto x = random_values(BT * K, 5), w = random_values(C * K, 6);
  const auto dout = random_values(BT * C, 7);
  std::vector<float> out(static_cast<size_t>(BT * C)), dx(x.size(), 0.0f), dw(w.size(), 0.0f);
  model::matmul_forward(out.data(), x.data(), w.data(), nullptr, BT, K, C);
  model::matmul_backward(dx.data(), dw.data(), nullptr, dout.data(), x.data(), w.data(), BT, K, C);
  std::vector<float> out_s(out.size()), dx_s(dx.size(), 0.0f), dw_s(dw.size(), 0.0f);
  model::matmul_forward_reference(out_s.data(), absolute(x).data(), absolute(w).data(), nullptr, BT,
                                  K, C);
  model::matmul_backward_reference(dx_s.data(), dw_s.data(), nullptr, absolute(dout).data(),
                                   absolute(x).data(), absolute(w).data(), BT, K, C);
  for (int N : {2, 4}) {
    const int64_t K_local = K / N;
    expect_diffs(on_ranks(N,
                          [&](TensorParallelGroup& tp, RankDiffs& d) {
                            const int r = tp.rank();
                            const auto w_r = model::tp_slice(w_t, w, kConfig, N, r);
                            const auto x_r = columns(x, BT, K, r * K_local, K_local);
                            std::vector<float> out_r(out.size());
                            std::vector<float> dx_r(x_r.size(), 0.0f), dw_r(w_r.size(), 0.0f);
                            model::matmul_forward(out_r.data(), x_r.data(), w_r.data(), nullptr, BT,
                                                  K_local, C);
                            tp.g_forward(out_r.data(), BT * C);
                            model::matmul_backward(dx_r.data(), dw_r.data(), nullptr, dout.data(),
                                                   x_r.data(), w_r.data(), BT, K_local,
                                                   C);  // g: identity
                            d.reordered_sums(dx_r, columns(dx, BT, K, r * K_local, K_local),
                                             columns(dx_s, BT, K, r * K_local, K_local), C);
                            d.reordered_sums(dw_r, model::tp_slice(w_t, dw, kConfig, N, r),
                                             model::tp_slice(w_t, dw_s, kConfig, N, r), BT);
                            d.reordered_sums(out_r, out, out_s, K);
                          }),
                 0.0, "row-parallel linear");
  }
}

TEST(TensorParallelLayers, AttentionHeadsSplitAcrossRanks) {
  // The attention core on qkv cut by heads (the layout tp_slice gives attn.qkv.w's rows, i.e.
  // qkv's columns): each rank runs NH/N heads. Exact: its output columns and its dqkv columns
  // (every head is computed alone, as serially).
  const int64_t B = 2, T = 8, C = kConfig.channels, NH = kConfig.heads;
  const ParamTensor qkv_t{"h.0.attn.qkv.b", {3 * C}, 0, 3 * C};  // the column layout of qkv
  const auto qkv = random_values(B * T * 3 * C, 8), dout = random_values(B * T * C, 9);
  std::vector<float> out(static_cast<size_t>(B * T * C)), att(static_cast<size_t>(B * NH * T * T));
  std::vector<float> dqkv(qkv.size(), 0.0f), scratch(static_cast<size_t>(T * T));
  model::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  model::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T,
                            C, NH);
  // Rows of qkv (B*T of them, 3C wide) cut like the bias: [q_r | k_r | v_r].
  auto cut_rows = [&](const std::vector<float>& m, int N, int r) {
    std::vector<float> o;
    for (int64_t i = 0; i < B * T; ++i) {
      const std::vector<float> row(m.begin() + i * 3 * C, m.begin() + (i + 1) * 3 * C);
      const auto s = model::tp_slice(qkv_t, row, kConfig, N, r);
      o.insert(o.end(), s.begin(), s.end());
    }
    return o;
  };
  for (int N : {2, 4}) {
    const int64_t C_local = C / N, NH_local = NH / N;
    expect_diffs(
        on_ranks(N,
                 [&](TensorParallelGroup& tp, RankDiffs& d) {
                   const int r = tp.rank();
                   const auto qkv_r = cut_rows(qkv, N, r);
                   const auto dout_r = columns(dout, B * T, C, r * C_local, C_local);
                   std::vector<float> out_r(static_cast<size_t>(B * T * C_local));
                   std::vector<float> att_r(static_cast<size_t>(B * NH_local * T * T));
                   std::vector<float> dqkv_r(qkv_r.size(), 0.0f);
                   model::attention_forward(out_r.data(), att_r.data(), qkv_r.data(), B, T, C_local,
                                            NH_local);
                   std::vector<float> scratch_r(static_cast<size_t>(T * T));  // this rank's
                   model::attention_backward(dqkv_r.data(), scratch_r.data(), dout_r.data(),
                                             qkv_r.data(), att_r.data(), B, T, C_local, NH_local);
                   d.exact = std::max(max_diff(out_r, columns(out, B * T, C, r * C_local, C_local)),
                                      max_diff(dqkv_r, cut_rows(dqkv, N, r)));
                 }),
        0.0, "attention");
  }
}

TEST(TensorParallelLayers, TransformerBlockAttentionAndMlp) {
  // One GPT block (LN1, column-parallel QKV, heads split, row-parallel projection, g; LN2,
  // column-parallel fc, GELU, row-parallel proj, g; f on both LN outputs' gradients) as the model
  // runs it. Exact: every rank's initial parameters equal the slices of the serial ones.
  // Tolerance: the block output, the input gradient and each rank's gradient slices (everything
  // downstream of an all-reduce of partial sums), 1e-5 on values of order 1.
  const model::GptConfig g = kConfig;
  const int64_t B = 2, T = 8, BTC = B * T * g.channels;
  const auto x = random_values(BTC, 10), dout = random_values(BTC, 11);
  MemoryTracker tracker;
  model::GptModel serial(g, &tracker);
  serial.init_params(3);
  serial.set_batch_shape(B, T);
  auto run_block = [&](model::GptModel& m) {
    model::GptActivations& a = m.activations();
    model::GptWorkspace& ws = m.workspace();
    std::copy(x.begin(), x.end(), a.layer(0).ln1_in);
    m.block_forward(a, ws, 0);
    std::vector<float> out(a.block_output(0), a.block_output(0) + BTC);
    std::copy(dout.begin(), dout.end(), ws.dres);
    m.zero_grads();
    m.block_backward(a, ws, 0);
    std::vector<float> dx(ws.dres, ws.dres + BTC);
    return std::make_pair(out, dx);
  };
  const auto [out, dx] = run_block(serial);
  const model::ParamTable& table = serial.param_table();
  for (int N : {2, 4}) {
    expect_diffs(
        on_ranks(
            N,
            [&](TensorParallelGroup& tp, RankDiffs& d) {
              MemoryTracker local_tracker;
              model::GptModel m(g, &local_tracker, &tp);
              m.init_params(3);
              m.set_batch_shape(B, T);
              const auto [out_r, dx_r] = run_block(m);
              d.tolerant = std::max(max_diff(out_r, out), max_diff(dx_r, dx));
              for (size_t i = 0; i < table.size(); ++i) {
                if (!table[i].name.starts_with("h.")) continue;
                const auto idx = static_cast<int>(i);
                const std::span<float> sp = serial.param(idx), sg = serial.grad(idx);
                const std::span<float> p = m.param(idx), gr = m.grad(idx);
                d.exact = std::max(
                    d.exact,
                    max_diff({p.begin(), p.end()},
                             model::tp_slice(table[i], {sp.begin(), sp.end()}, g, N, tp.rank())));
                d.tolerant = std::max(
                    d.tolerant,
                    max_diff({gr.begin(), gr.end()},
                             model::tp_slice(table[i], {sg.begin(), sg.end()}, g, N, tp.rank())));
              }
            }),
        1e-5, "block");
  }
}

TEST(TensorParallelLayers, VocabParallelEmbeddingWithPadding) {
  // V = 250 is padded to 252 for N = 4 (63 rows per rank; the last rank's last 2 are padding).
  // Exact: the embedding output (one non-zero term per element in the all-reduce, then + wpe as
  // serially), each rank's dwte rows (padding rows stay 0) and dwpe.
  const model::GptConfig g = kConfig;
  const int64_t B = 2, T = 8, C = g.channels, V = g.vocab;
  const ParamTensor wte_t{"wte", {V, C}, 0, V * C};
  const auto wte = random_values(V * C, 12), wpe = random_values(g.context * C, 13);
  const auto dout = random_values(B * T * C, 14);
  std::vector<int32_t> tokens(static_cast<size_t>(B * T));
  Rng rng(15);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));
  tokens[0] = static_cast<int32_t>(V - 1);  // the last real row, next to the padding
  std::vector<float> out(static_cast<size_t>(B * T * C)), dwte(wte.size(), 0.0f),
      dwpe(wpe.size(), 0.0f);
  model::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  model::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  for (int N : {2, 4}) {
    expect_diffs(
        on_ranks(N,
                 [&](TensorParallelGroup& tp, RankDiffs& d) {
                   const int r = tp.rank();
                   const int64_t V_local = model::tp_vocab_local(V, N);
                   const int64_t begin = model::tp_vocab_begin(V, N, r);
                   const auto wte_r = model::tp_slice(wte_t, wte, g, N, r);
                   std::vector<float> out_r(out.size());
                   model::vocab_embedding_forward(out_r.data(), tokens.data(), wte_r.data(), begin,
                                                  V_local, B * T, C);
                   tp.all_reduce_sum(out_r.data(), B * T * C);
                   for (int64_t i = 0; i < B * T; ++i) {
                     for (int64_t c = 0; c < C; ++c) {
                       float& o = out_r[static_cast<size_t>(i * C + c)];
                       o = o + wpe[static_cast<size_t>((i % T) * C + c)];
                     }
                   }
                   std::vector<float> dwte_r(wte_r.size(), 0.0f), dwpe_r(wpe.size(), 0.0f);
                   model::vocab_embedding_backward(dwte_r.data(), dwpe_r.data(), dout.data(),
                                                   tokens.data(), begin, V_local, B, T, C);
                   d.exact = std::max({max_diff(out_r, out),
                                       max_diff(dwte_r, model::tp_slice(wte_t, dwte, g, N, r)),
                                       max_diff(dwpe_r, dwpe)});
                 }),
        0.0, "vocab-parallel embedding");
  }
}

TEST(TensorParallelLayers, VocabParallelCrossEntropyWithPadding) {
  // Logits (BT, V = 250) cut by columns (padded to 252 for N = 4). Exact: padded columns have
  // probability and gradient 0. Tolerance: per-row losses, the mean loss, probabilities and
  // dlogits (the sum of exponentials is N partial sums added by the all-reduce): 1e-6.
  const int64_t BT = 16, V = kConfig.vocab;
  const ParamTensor wte_t{"wte", {V, 1}, 0, V};  // one logit row, cut like wte's rows
  const auto logits = random_values(BT * V, 16);
  std::vector<int32_t> targets(static_cast<size_t>(BT));
  Rng rng(17);
  for (int32_t& t : targets) t = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));
  targets[1] = static_cast<int32_t>(V - 1);
  std::vector<float> probs(logits.size()), losses(static_cast<size_t>(BT));
  const float loss = model::crossentropy_softmax_forward(probs.data(), losses.data(), logits.data(),
                                                         targets.data(), BT, V);
  std::vector<float> dlogits(logits.size(), 0.0f);
  model::crossentropy_softmax_backward(dlogits.data(), probs.data(), targets.data(), 1.0f, BT, V);
  auto rank_columns = [&](const std::vector<float>& m, int N, int r) {
    std::vector<float> o;
    for (int64_t i = 0; i < BT; ++i) {
      const std::vector<float> row(m.begin() + i * V, m.begin() + (i + 1) * V);
      const auto s = model::tp_slice(wte_t, row, kConfig, N, r);
      o.insert(o.end(), s.begin(), s.end());
    }
    return o;
  };
  for (int N : {2, 4}) {
    expect_diffs(
        on_ranks(
            N,
            [&](TensorParallelGroup& tp, RankDiffs& d) {
              const int r = tp.rank();
              const int64_t V_local = model::tp_vocab_local(V, N);
              const int64_t begin = model::tp_vocab_begin(V, N, r);
              auto z = rank_columns(logits, N, r);
              std::vector<float> losses_r(static_cast<size_t>(BT));
              const float loss_r = model::vocab_parallel_crossentropy_forward(
                  z.data(), losses_r.data(), targets.data(), BT, begin, V_local, V, tp);
              const auto probs_r = z;
              model::vocab_parallel_crossentropy_backward(z.data(), targets.data(), 1.0f, BT, begin,
                                                          V_local);
              for (int64_t i = 0; i < BT; ++i) {
                for (int64_t c = std::max<int64_t>(V - begin, 0); c < V_local; ++c) {
                  d.exact = std::max(
                      {d.exact,
                       std::fabs(
                           static_cast<double>(probs_r[static_cast<size_t>(i * V_local + c)])),
                       std::fabs(static_cast<double>(z[static_cast<size_t>(i * V_local + c)]))});
                }
              }
              d.tolerant = std::max({max_diff(losses_r, losses),
                                     max_diff(probs_r, rank_columns(probs, N, r)),
                                     max_diff(z, rank_columns(dlogits, N, r)),
                                     static_cast<double>(std::fabs(loss_r - loss))});
            }),
        1e-6, "vocab-parallel cross-entropy");
  }
}

}  // namespace
}  // namespace dtrain::parallel
