// The MoE layer (model/ops/moe.h) against a double-precision reference of its forward: the
// gradients of L = sum(out * w) + a * aux with respect to the input, the router and every
// expert tensor by central differences, dropless and with capacity dropping; an expert that
// receives no token (its gradients exactly 0); deterministic ties; the capacity rule.
// Tolerance: |fp32 analytic - double numeric| <= 2e-3 * |numeric| + 2e-4 (fp32 rounding of the
// expert GEMMs and the softmax; the numeric side, h = 1e-6 in double, is exact to ~1e-9). The
// routing is discrete: the inputs are drawn so no perturbation of size h flips a choice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "dtrain/model/ops/moe.h"
#include "dtrain/model/param_table.h"
#include "gradcheck.h"

namespace dtrain::model {
namespace {

using test::expect_close;
using test::numeric_gradient;
using test::random_floats;
using test::to_double;

struct MoeCase {
  int64_t N = 8, C = 4;
  int64_t F = 0;  // > 0: SwiGLU experts of F (Mixtral's: [gate | up], down; no biases)
  MoeConfig m;
  std::vector<float> x, router, fc_w, fc_b, proj_w, proj_b, w;  // w: dL/dout
  MoeExpertWidths widths() const { return moe_expert_widths(C, F, F > 0); }
};

MoeCase make_case(int64_t E, int64_t k, double capacity, double aux, uint64_t seed,
                  int64_t swiglu_ffn = 0) {
  MoeCase c;
  c.m.experts = E;
  c.m.top_k = k;
  c.m.capacity_factor = capacity;
  c.m.aux_loss_coef = aux;
  c.F = swiglu_ffn;
  const int64_t N = c.N, C = c.C, H = c.widths().fc, A = c.widths().act;
  c.x = random_floats(static_cast<size_t>(N * C), seed);
  c.router = random_floats(static_cast<size_t>(E * C), seed + 1, 0.8);
  c.fc_w = random_floats(static_cast<size_t>(E * H * C), seed + 2, 0.5);
  c.proj_w = random_floats(static_cast<size_t>(E * C * A), seed + 4, 0.5);
  if (c.F == 0) {
    c.fc_b = random_floats(static_cast<size_t>(E * H), seed + 3, 0.1);
    c.proj_b = random_floats(static_cast<size_t>(E * C), seed + 5, 0.1);
  }
  c.w = random_floats(static_cast<size_t>(N * C), seed + 6);
  return c;
}

// A vector's data, or null when it is empty (a SwiGLU expert's absent biases).
template <typename T>
T* data_or_null(std::vector<T>& v) {
  return v.empty() ? nullptr : v.data();
}
template <typename T>
const T* data_or_null(const std::vector<T>& v) {
  return v.empty() ? nullptr : v.data();
}

double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// L = sum(out * w) + a * aux in double, with the layer's routing rules.
double reference_loss(const MoeCase& c, const std::vector<double>& x,
                      const std::vector<double>& router, const std::vector<double>& fc_w,
                      const std::vector<double>& fc_b, const std::vector<double>& proj_w,
                      const std::vector<double>& proj_b) {
  const int64_t N = c.N, C = c.C, E = c.m.experts, k = c.m.top_k;
  const int64_t F = c.F, H = F > 0 ? F : 4 * C;  // proj's inputs: SwiGLU's F, or GELU's 4C
  const int64_t capacity = moe_capacity(c.m, N);
  std::vector<int64_t> taken(static_cast<size_t>(E), 0), chosen(static_cast<size_t>(E), 0);
  std::vector<double> prob_sum(static_cast<size_t>(E), 0.0);
  double loss = 0;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> p(static_cast<size_t>(E));
    double max = -1e300, sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      double z = 0;
      for (int64_t i = 0; i < C; ++i) z += x[n * C + i] * router[e * C + i];
      p[e] = z;
      max = std::max(max, z);
    }
    for (double& v : p) sum += (v = std::exp(v - max));
    for (int64_t e = 0; e < E; ++e) prob_sum[e] += (p[e] /= sum);
    std::vector<int64_t> pick;
    double picked = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        if (std::find(pick.begin(), pick.end(), e) != pick.end()) continue;
        if (best < 0 || p[e] > p[best]) best = e;
      }
      pick.push_back(best);
      picked += p[best];
      ++chosen[best];
    }
    for (int64_t e : pick) {
      if (taken[e]++ >= capacity) continue;  // dropped
      const double gate = p[e] / picked;
      // The expert's activation: GELU(fc x + b), or silu(gate x) * (up x) (Mixtral's w1, w3).
      std::vector<double> act(static_cast<size_t>(H));
      for (int64_t h = 0; h < H; ++h) {
        if (F > 0) {
          double g = 0, u = 0;
          for (int64_t i = 0; i < C; ++i) {
            g += fc_w[(e * 2 * F + h) * C + i] * x[n * C + i];
            u += fc_w[(e * 2 * F + F + h) * C + i] * x[n * C + i];
          }
          act[h] = g / (1 + std::exp(-g)) * u;
          continue;
        }
        double a = fc_b[e * H + h];
        for (int64_t i = 0; i < C; ++i) a += fc_w[(e * H + h) * C + i] * x[n * C + i];
        act[h] = gelu(a);
      }
      for (int64_t o = 0; o < C; ++o) {
        double y = F > 0 ? 0.0 : proj_b[e * C + o];
        for (int64_t h = 0; h < H; ++h) y += proj_w[(e * C + o) * H + h] * act[h];
        loss += gate * y * c.w[n * C + o];
      }
    }
  }
  double aux = 0;
  for (int64_t e = 0; e < E; ++e) aux += static_cast<double>(chosen[e]) * prob_sum[e];
  aux *= static_cast<double>(E) / (static_cast<double>(N * k) * static_cast<double>(N));
  return loss + c.m.aux_loss_coef * aux;
}

struct MoeRun {
  MoeRouting routing;
  std::vector<float> out, dx, drouter, dfc_w, dfc_b, dproj_w, dproj_b;
};

MoeRun run_layer(const MoeCase& c) {
  MoeRun r;
  const int64_t N = c.N, C = c.C;
  const MoeWeights w{c.router.data(), c.fc_w.data(),          data_or_null(c.fc_b),
                     c.proj_w.data(), data_or_null(c.proj_b), c.widths()};
  moe_route(r.routing, c.x.data(), c.router.data(), N, C, c.m);
  MoeExpertCache cache;
  r.out.assign(c.x.size(), 0.0f);
  moe_forward(r.out.data(), cache, r.routing, c.x.data(), w, N, C, c.m);
  r.dx.assign(c.x.size(), 0.0f);
  r.drouter.assign(c.router.size(), 0.0f);
  r.dfc_w.assign(c.fc_w.size(), 0.0f);
  r.dfc_b.assign(c.fc_b.size(), 0.0f);
  r.dproj_w.assign(c.proj_w.size(), 0.0f);
  r.dproj_b.assign(c.proj_b.size(), 0.0f);
  const MoeGrads g{r.drouter.data(), r.dfc_w.data(), data_or_null(r.dfc_b), r.dproj_w.data(),
                   data_or_null(r.dproj_b)};
  moe_backward(r.dx.data(), g, c.w.data(), cache, r.routing, c.x.data(), w, N, C, c.m,
               c.m.aux_loss_coef);
  return r;
}

// Every gradient against finite differences of reference_loss; returns the largest difference.
double check_gradients(const MoeCase& c, const MoeRun& r) {
  std::vector<double> x = to_double(c.x), router = to_double(c.router), fc_w = to_double(c.fc_w),
                      fc_b = to_double(c.fc_b), proj_w = to_double(c.proj_w),
                      proj_b = to_double(c.proj_b);
  auto loss = [&] { return reference_loss(c, x, router, fc_w, fc_b, proj_w, proj_b); };
  // The forward too: sum(out * w) + a * aux of the fp32 layer against the double reference.
  double fp32 = c.m.aux_loss_coef * r.routing.aux_loss;
  for (size_t i = 0; i < r.out.size(); ++i) fp32 += static_cast<double>(r.out[i]) * c.w[i];
  EXPECT_NEAR(fp32, loss(), 1e-4 + 1e-4 * std::fabs(loss()));
  const double rtol = 2e-3, atol = 2e-4;
  double worst = 0;
  worst = std::max(worst, expect_close(r.dx, numeric_gradient(loss, x), rtol, atol, "dx"));
  worst = std::max(worst,
                   expect_close(r.drouter, numeric_gradient(loss, router), rtol, atol, "drouter"));
  worst = std::max(worst, expect_close(r.dfc_w, numeric_gradient(loss, fc_w), rtol, atol, "dfc_w"));
  if (c.F == 0) {
    worst =
        std::max(worst, expect_close(r.dfc_b, numeric_gradient(loss, fc_b), rtol, atol, "dfc_b"));
  }
  worst = std::max(worst,
                   expect_close(r.dproj_w, numeric_gradient(loss, proj_w), rtol, atol, "dproj_w"));
  if (c.F == 0) {
    worst = std::max(
        worst, expect_close(r.dproj_b, numeric_gradient(loss, proj_b), rtol, atol, "dproj_b"));
  }
  return worst;
}

int64_t sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

TEST(MoeOp, DroplessBackwardMatchesFiniteDifferences) {
  const MoeCase c = make_case(4, 2, 0.0, 0.5, 11);
  const MoeRun r = run_layer(c);
  EXPECT_EQ(r.routing.dropped, 0);
  EXPECT_EQ(sum(r.routing.kept), c.N * 2);
  std::printf("dropless: max |analytic - numeric| = %.3g\n", check_gradients(c, r));
}

// Mixtral's experts: SwiGLU over each expert's [gate | up] rows, then down, no biases; dropless
// top-2 of 4 and with capacity dropping.
TEST(MoeOp, SwigluExpertsBackwardMatchesFiniteDifferences) {
  for (const double capacity : {0.0, 0.5}) {
    const MoeCase c = make_case(4, 2, capacity, 0.5, 61, /*swiglu_ffn=*/6);
    const MoeRun r = run_layer(c);
    EXPECT_TRUE(r.dfc_b.empty() && r.dproj_b.empty());
    EXPECT_EQ(r.dfc_w.size(), static_cast<size_t>(4 * 2 * 6 * c.C));
    EXPECT_EQ(r.dproj_w.size(), static_cast<size_t>(4 * c.C * 6));
    EXPECT_EQ(r.routing.dropped > 0, capacity > 0);
    std::printf("swiglu experts, capacity %.1f: max |analytic - numeric| = %.3g\n", capacity,
                check_gradients(c, r));
  }
}

TEST(MoeOp, Top1WithAuxLossMatchesFiniteDifferences) {
  const MoeCase c = make_case(3, 1, 0.0, 1.0, 21);
  std::printf("top-1: max |analytic - numeric| = %.3g\n", check_gradients(c, run_layer(c)));
}

TEST(MoeOp, CapacityDropsInTokenOrderAndBackwardMatches) {
  // capacity = ceil(0.5 * 8 * 2 / 4) = 2 assignments per expert
  const MoeCase c = make_case(4, 2, 0.5, 0.25, 31);
  const MoeRun r = run_layer(c);
  EXPECT_EQ(moe_capacity(c.m, c.N), 2);
  EXPECT_GT(r.routing.dropped, 0);
  for (int64_t kept : r.routing.kept) EXPECT_LE(kept, 2);
  EXPECT_EQ(sum(r.routing.kept) + r.routing.dropped, c.N * 2);
  // The kept ones are each expert's first choices in token order.
  std::vector<int64_t> seen(4, 0);
  for (int64_t i = 0; i < c.N * 2; ++i) {
    const int32_t e = r.routing.expert[static_cast<size_t>(i)];
    EXPECT_EQ(r.routing.slot[static_cast<size_t>(i)] >= 0, seen[static_cast<size_t>(e)]++ < 2);
  }
  std::printf("capacity 0.5 (%lld dropped): max |analytic - numeric| = %.3g\n",
              static_cast<long long>(r.routing.dropped), check_gradients(c, r));
}

TEST(MoeOp, ExpertWithoutTokensHasZeroGradients) {
  MoeCase c = make_case(4, 2, 0.0, 0.5, 41);
  // Expert 3's router row points away from every input: its probability is never in a top 2.
  for (float& v : c.x) v = std::fabs(v) + 0.1f;
  for (int64_t i = 0; i < c.C; ++i) c.router[static_cast<size_t>(3 * c.C + i)] = -2.0f;
  const MoeRun r = run_layer(c);
  ASSERT_EQ(r.routing.kept[3], 0);
  EXPECT_EQ(r.routing.chosen[3], 0);
  const int64_t C = c.C, H = 4 * C;
  auto all_zero = [](const std::vector<float>& v, int64_t begin, int64_t count) {
    return std::all_of(v.begin() + begin, v.begin() + begin + count,
                       [](float g) { return g == 0; });
  };
  EXPECT_TRUE(all_zero(r.dfc_w, 3 * H * C, H * C));
  EXPECT_TRUE(all_zero(r.dfc_b, 3 * H, H));
  EXPECT_TRUE(all_zero(r.dproj_w, 3 * C * H, C * H));
  EXPECT_TRUE(all_zero(r.dproj_b, 3 * C, C));
  EXPECT_FALSE(all_zero(r.drouter, 3 * C, C));  // its probability still has a gradient
  std::printf("empty expert: max |analytic - numeric| = %.3g\n", check_gradients(c, r));
}

TEST(MoeOp, TiesGoToTheLowerExpertIndex) {
  MoeCase c = make_case(4, 2, 0.0, 0.0, 51);
  std::fill(c.router.begin(), c.router.end(), 0.0f);  // every probability 1/4
  const MoeRun r = run_layer(c);
  for (int64_t n = 0; n < c.N; ++n) {
    EXPECT_EQ(r.routing.expert[static_cast<size_t>(2 * n)], 0);
    EXPECT_EQ(r.routing.expert[static_cast<size_t>(2 * n + 1)], 1);
    EXPECT_FLOAT_EQ(r.routing.gate[static_cast<size_t>(2 * n)], 0.5f);
  }
  EXPECT_EQ(r.routing.kept, (std::vector<int64_t>{8, 8, 0, 0}));
  // Uniform router probabilities make aux = E * sum_e f_e / E = 1 however the choices fall (the
  // loss pushes on P_e, which is already balanced).
  EXPECT_NEAR(r.routing.aux_loss, 1.0, 1e-6);
}

// The sorted top-k against the k arg-max scans it replaced, on rows with many ties (the
// probabilities drawn from a few values), distinct values and a NaN, for k from 1 to E.
TEST(MoeOp, TopKMatchesRepeatedArgMaxScans) {
  std::vector<int32_t> order;
  for (const int64_t E : {1, 2, 5, 16, 33}) {
    for (int64_t k = 1; k <= E; ++k) {
      for (uint64_t seed = 0; seed < 4; ++seed) {
        std::vector<float> p = random_floats(static_cast<size_t>(E), 100 + seed + 7 * E);
        if (seed % 2 == 0) {
          for (float& v : p) v = std::round(v * 2) / 2;  // a handful of values: ties
        }
        if (seed == 3) p[static_cast<size_t>(E / 2)] = std::nanf("");
        std::vector<int32_t> fast(static_cast<size_t>(k), -2), scans(static_cast<size_t>(k), -2);
        choose_top_k(fast.data(), p.data(), E, k, order);
        choose_top_k_by_scans(scans.data(), p.data(), E, k);
        EXPECT_EQ(fast, scans) << "E " << E << " k " << k << " seed " << seed;
      }
    }
  }
}

// E = k = 256 (every expert chosen by every token, which the scans took O(k^2 E) a token for):
// the router's choices equal the scans' on its own probabilities, and nothing is dropped.
TEST(MoeOp, RoutingWithManyExpertsMatchesTheScans) {
  MoeConfig m;
  m.experts = 256;
  m.top_k = 256;
  const int64_t N = 64, C = 4, E = m.experts, k = m.top_k;
  const std::vector<float> x = random_floats(static_cast<size_t>(N * C), 61);
  const std::vector<float> router = random_floats(static_cast<size_t>(E * C), 62);
  MoeRouting r;
  moe_route(r, x.data(), router.data(), N, C, m);
  EXPECT_EQ(r.dropped, 0);
  EXPECT_EQ(r.kept, std::vector<int64_t>(static_cast<size_t>(E), N));
  for (int64_t n = 0; n < 4; ++n) {  // the scans are slow: a few tokens
    std::vector<int32_t> scans(static_cast<size_t>(k));
    choose_top_k_by_scans(scans.data(), r.probs.data() + n * E, E, k);
    EXPECT_TRUE(std::equal(scans.begin(), scans.end(), r.expert.begin() + n * k)) << "token " << n;
  }
}

// A capacity factor past what any expert can take (an expert gets at most one row per token)
// is dropless: the capacity saturates at N * k instead of overflowing into "drop everything".
TEST(MoeOp, HugeCapacityFactorDropsNothing) {
  MoeCase c = make_case(4, 2, 1e17, 0.0, 71);
  EXPECT_EQ(moe_capacity(c.m, c.N), c.N * c.m.top_k);
  c.m.capacity_factor = 1e300;
  EXPECT_EQ(moe_capacity(c.m, c.N), c.N * c.m.top_k);
  const MoeRun r = run_layer(c);
  EXPECT_EQ(r.routing.dropped, 0);
  EXPECT_EQ(sum(r.routing.kept), c.N * c.m.top_k);
}

TEST(MoeParamTable, ExpertsReplaceEveryNthMlpAndCountMatches) {
  GptConfig g{.vocab = 64, .context = 8, .layers = 4, .heads = 2, .channels = 8};
  g.moe = {.experts = 3, .top_k = 2, .every = 2};
  const ParamTable t = gpt_param_table(g);
  EXPECT_EQ(t.total_count(), gpt_param_count(g));
  EXPECT_EQ(t.size(), static_cast<size_t>(2 + 4 * 12 + 2 + 2));  // + a router per MoE block
  EXPECT_TRUE(t.contains("h.0.mlp.fc.w"));
  EXPECT_TRUE(t.contains("h.1.moe.fc.w"));
  EXPECT_FALSE(t.contains("h.1.mlp.fc.w"));
  EXPECT_EQ(t[static_cast<size_t>(t.index_of("h.3.moe.proj.w"))].shape,
            (std::vector<int64_t>{3, 8, 32}));
  EXPECT_EQ(t[static_cast<size_t>(gpt_layer_param(g, 3, LayerParam::moe_router_w))].name,
            "h.3.moe.router.w");
  EXPECT_EQ(t[static_cast<size_t>(gpt_layer_param(g, 2, LayerParam::qkv_w))].name,
            "h.2.attn.qkv.w");
  EXPECT_EQ(t[static_cast<size_t>(gpt_lnf_b_index(g))].name, "lnf.b");
  // Dense part unchanged: 12C^2+13C per block; an MoE block's MLP is E of them plus the router.
  const int64_t C = 8, mlp = 8 * C * C + 5 * C;
  EXPECT_EQ(gpt_param_count(g),
            64 * C + 8 * C + 4 * (12 * C * C + 13 * C) + 2 * C + 2 * (2 * mlp + 3 * C));
}

}  // namespace
}  // namespace dtrain::model
