// Double-precision reference of every GPT op and of the whole model's loss, written as plain
// loops straight from the definitions (no caching, no BLAS). The gradient tests differentiate
// these numerically (central differences in double) and compare with the fp32 backward ops.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "dtrain/model/gpt_config.h"
#include "dtrain/model/param_table.h"

namespace dtrain::model::ref {

using Vec = std::vector<double>;

// out (N, C) = (x - mean) / sqrt(var + 1e-5) * w + b, per row.
inline Vec layernorm(const Vec& x, const double* w, const double* b, int64_t N, int64_t C) {
  Vec out(static_cast<size_t>(N * C));
  for (int64_t r = 0; r < N; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < C; ++i) mean += x[r * C + i];
    mean /= static_cast<double>(C);
    for (int64_t i = 0; i < C; ++i) var += (x[r * C + i] - mean) * (x[r * C + i] - mean);
    var /= static_cast<double>(C);
    const double s = 1.0 / std::sqrt(var + 1e-5);
    for (int64_t i = 0; i < C; ++i) out[r * C + i] = (x[r * C + i] - mean) * s * w[i] + b[i];
  }
  return out;
}

// out (N, OC) = x (N, C) @ w^T + bias; w is (OC, C).
inline Vec matmul(const Vec& x, const double* w, const double* bias, int64_t N, int64_t C,
                  int64_t OC) {
  Vec out(static_cast<size_t>(N * OC));
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t o = 0; o < OC; ++o) {
      double acc = bias != nullptr ? bias[o] : 0.0;
      for (int64_t i = 0; i < C; ++i) acc += x[r * C + i] * w[o * C + i];
      out[r * OC + o] = acc;
    }
  }
  return out;
}

// Causal softmax(q k^T / sqrt(HS)) v per (b, head); qkv (B, T, 3C) -> out (B, T, C).
inline Vec attention(const Vec& qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t HS = C / NH;
  Vec out(static_cast<size_t>(B * T * C), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> score(static_cast<size_t>(i + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < HS; ++d) {
            dot +=
                qkv[(b * T + i) * 3 * C + h * HS + d] * qkv[(b * T + j) * 3 * C + C + h * HS + d];
          }
          score[j] = dot / std::sqrt(static_cast<double>(HS));
          mx = std::max(mx, score[j]);
        }
        double total = 0;
        for (double& s : score) total += (s = std::exp(s - mx));
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t d = 0; d < HS; ++d) {
            out[(b * T + i) * C + h * HS + d] +=
                score[j] / total * qkv[(b * T + j) * 3 * C + 2 * C + h * HS + d];
          }
        }
      }
    }
  }
  return out;
}

inline Vec gelu(const Vec& x) {
  Vec out(x.size());
  const double s = std::sqrt(2.0 / std::numbers::pi);
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] = 0.5 * x[i] * (1.0 + std::tanh(s * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  }
  return out;
}

// Mean over rows of -log softmax(logits)[target].
inline double crossentropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t N,
                           int64_t V) {
  double total = 0;
  for (int64_t r = 0; r < N; ++r) {
    double mx = -1e300;
    for (int64_t i = 0; i < V; ++i) mx = std::max(mx, logits[r * V + i]);
    double s = 0;
    for (int64_t i = 0; i < V; ++i) s += std::exp(logits[r * V + i] - mx);
    total += std::log(s) - (logits[r * V + targets[r]] - mx);
  }
  return total / static_cast<double>(N);
}

// The whole GPT: logits (B, T, V) for `tokens` (B, T), parameters laid out by `table`.
inline Vec gpt_logits(const GptConfig& g, const ParamTable& table, const Vec& params,
                      const std::vector<int32_t>& tokens, int64_t B, int64_t T) {
  const int64_t C = g.channels, BT = B * T;
  auto p = [&](const std::string& name) {
    return params.data() + table[static_cast<size_t>(table.index_of(name))].offset;
  };
  Vec x(static_cast<size_t>(BT * C));
  for (int64_t r = 0; r < BT; ++r) {
    for (int64_t i = 0; i < C; ++i) {
      x[r * C + i] = p("wte")[tokens[r] * C + i] + p("wpe")[(r % T) * C + i];
    }
  }
  for (int64_t l = 0; l < g.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const Vec ln1 = layernorm(x, p(h + "ln1.w"), p(h + "ln1.b"), BT, C);
    const Vec qkv = matmul(ln1, p(h + "attn.qkv.w"), p(h + "attn.qkv.b"), BT, C, 3 * C);
    const Vec y = attention(qkv, B, T, C, g.heads);
    const Vec proj = matmul(y, p(h + "attn.proj.w"), p(h + "attn.proj.b"), BT, C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    const Vec ln2 = layernorm(x, p(h + "ln2.w"), p(h + "ln2.b"), BT, C);
    const Vec fc = gelu(matmul(ln2, p(h + "mlp.fc.w"), p(h + "mlp.fc.b"), BT, C, 4 * C));
    const Vec mlp = matmul(fc, p(h + "mlp.proj.w"), p(h + "mlp.proj.b"), BT, 4 * C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += mlp[i];
  }
  const Vec lnf = layernorm(x, p("lnf.w"), p("lnf.b"), BT, C);
  return matmul(lnf, p("wte"), nullptr, BT, C, g.vocab);
}

inline double gpt_loss(const GptConfig& g, const ParamTable& table, const Vec& params,
                       const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                       int64_t B, int64_t T) {
  return crossentropy(gpt_logits(g, table, params, tokens, B, T), targets, B * T, g.vocab);
}

}  // namespace dtrain::model::ref
