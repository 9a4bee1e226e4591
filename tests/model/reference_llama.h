// Double-precision reference of the Llama-family model's loss, straight from the definitions
// (Hugging Face's LlamaModel: RMSNorm, q/k/v with rotate_half RoPE at each token's position,
// repeat_kv grouped attention, SwiGLU MLP, final RMSNorm, untied or tied head), over a parameter
// table laid out as gpt_param_table's Llama form. The whole-model gradient test differentiates it
// numerically.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "reference_gpt.h"

namespace dtrain::model::ref {

inline Vec rmsnorm(const Vec& x, const double* w, int64_t N, int64_t C, double eps) {
  Vec out(x.size());
  for (int64_t r = 0; r < N; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < C; ++i) ms += x[r * C + i] * x[r * C + i];
    const double s = 1.0 / std::sqrt(ms / static_cast<double>(C) + eps);
    for (int64_t i = 0; i < C; ++i) out[r * C + i] = x[r * C + i] * s * w[i];
  }
  return out;
}

// q (rows of NH heads) and k (NKV heads) of a qkv row rotated in place at position t.
inline void rope_row(double* row, int64_t heads, int64_t HS, int64_t t, double theta) {
  const int64_t half = HS / 2;
  for (int64_t h = 0; h < heads; ++h) {
    double* x = row + h * HS;
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(t) * std::pow(theta, -2.0 * i / HS);
      const double a = x[i], b = x[i + half];
      x[i] = a * std::cos(angle) - b * std::sin(angle);
      x[i + half] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
}

// Causal attention with query head h reading K/V head h / (NH / NKV) (repeat_kv).
inline Vec gqa_attention(const Vec& qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                         int64_t HS) {
  const int64_t C = NH * HS, W = (NH + 2 * NKV) * HS;
  Vec out(static_cast<size_t>(B * T * C), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t g = h / (NH / NKV);
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> score(static_cast<size_t>(i + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < HS; ++d) {
            dot += qkv[(b * T + i) * W + h * HS + d] * qkv[(b * T + j) * W + C + g * HS + d];
          }
          score[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(HS));
          mx = std::max(mx, score[static_cast<size_t>(j)]);
        }
        double total = 0;
        for (double& s : score) total += (s = std::exp(s - mx));
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t d = 0; d < HS; ++d) {
            out[(b * T + i) * C + h * HS + d] += score[static_cast<size_t>(j)] / total *
                                                 qkv[(b * T + j) * W + C + NKV * HS + g * HS + d];
          }
        }
      }
    }
  }
  return out;
}

inline Vec llama_logits(const GptConfig& g, const ParamTable& table, const Vec& params,
                        const std::vector<int32_t>& tokens, int64_t B, int64_t T) {
  const int64_t C = g.channels, BT = B * T, NH = g.heads, NKV = g.kv_heads_or_heads();
  const int64_t HS = g.head_size(), W = (NH + 2 * NKV) * HS, F = g.ffn();
  const double eps = g.norm_eps;
  auto p = [&](const std::string& name) {
    return params.data() + table[static_cast<size_t>(table.index_of(name))].offset;
  };
  Vec x(static_cast<size_t>(BT * C));
  for (int64_t r = 0; r < BT; ++r) {
    for (int64_t i = 0; i < C; ++i) x[r * C + i] = p("wte")[tokens[r] * C + i];
  }
  for (int64_t l = 0; l < g.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const Vec n1 = rmsnorm(x, p(h + "ln1.w"), BT, C, eps);
    Vec qkv = matmul(n1, p(h + "attn.qkv.w"), nullptr, BT, C, W);
    for (int64_t r = 0; r < BT; ++r)
      rope_row(qkv.data() + r * W, NH + NKV, HS, r % T, g.rope_theta);
    const Vec y = gqa_attention(qkv, B, T, NH, NKV, HS);
    const Vec proj = matmul(y, p(h + "attn.proj.w"), nullptr, BT, C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    const Vec n2 = rmsnorm(x, p(h + "ln2.w"), BT, C, eps);
    const Vec gu = matmul(n2, p(h + "mlp.fc.w"), nullptr, BT, C, 2 * F);
    Vec act(static_cast<size_t>(BT * F));
    for (int64_t r = 0; r < BT; ++r) {
      for (int64_t i = 0; i < F; ++i) {
        const double gate = gu[r * 2 * F + i], up = gu[r * 2 * F + F + i];
        act[r * F + i] = gate / (1.0 + std::exp(-gate)) * up;
      }
    }
    const Vec down = matmul(act, p(h + "mlp.proj.w"), nullptr, BT, F, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  const Vec nf = rmsnorm(x, p("lnf.w"), BT, C, eps);
  return matmul(nf, p(g.tied_head() ? "wte" : "lm_head.w"), nullptr, BT, C, g.vocab);
}

inline double llama_loss(const GptConfig& g, const ParamTable& table, const Vec& params,
                         const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                         int64_t B, int64_t T) {
  return crossentropy(llama_logits(g, table, params, tokens, B, T), targets, B * T, g.vocab);
}

}  // namespace dtrain::model::ref
