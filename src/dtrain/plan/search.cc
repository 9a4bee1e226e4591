// search: enumerates every (dp, tp, pp) split of the GPUs, then every micro-batch, interleave
// factor, ZeRO stage, recompute mode and sequence-parallel switch that the split allows; keeps
// the fastest plans, and for each family of alternatives (tp across nodes, no pipeline, ZeRO-3,
// no recompute, ...) its best member, to say why it lost. Every layout's memory comes first (a
// layout whose model states alone rule it out, and out of the closest misses, is not priced);
// each fitting layout then gets a lower bound on its step (no schedule replayed), and only those
// the bound cannot rule out are replayed, in ascending order of the bound, so the result is the
// exhaustive search's.
#include <algorithm>
#include <bit>
#include <functional>
#include <limits>
#include <map>
#include <optional>

#include "dtrain/clock/engine_clock.h"
#include "dtrain/core/check.h"
#include "dtrain/machine/format.h"
#include "dtrain/plan/planner.h"
#include "dtrain/plan/pricing_memo.h"

namespace dtrain::plan {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    out.push_back(d);
    if (d != n / d) out.push_back(n / d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A replayed plan with its place in the enumeration (for_each_layout's order).
struct Ranked {
  Plan plan;
  int64_t index = 0;
};

// Faster first, then less memory, then earlier in the enumeration: the exhaustive search kept
// the first of equals, and the pruned one replays out of that order.
bool better(const Ranked& a, const Ranked& b) {
  if (a.plan.time.step_s != b.plan.time.step_s) return a.plan.time.step_s < b.plan.time.step_s;
  if (a.plan.memory.total() != b.plan.memory.total()) {
    return a.plan.memory.total() < b.plan.memory.total();
  }
  return a.index < b.index;
}

// Whether no layout whose step is at least `bound` can improve `best`: it is strictly faster
// (a layout as fast could still win on memory).
bool settled(const std::optional<Ranked>& best, double bound) {
  return best && best->plan.time.step_s < bound;
}

// A plan with its memory alone (what a closest miss is until it is reported).
Plan memory_plan(const Layout& l, const MemoryBreakdown& memory) {
  Plan p;
  p.layout = l;
  p.memory = memory;
  return p;
}

// A family of alternatives, with its best fitting member and its least-overfull one.
struct Family {
  std::function<std::string(const Layout&)> label;  // given the member it is illustrated by
  int64_t count = 0;
  int64_t fitting = 0;
  std::optional<Ranked> best;   // replayed
  std::optional<Plan> closest;  // memory only (evaluate_memory) until it is reported

  // Memory decisions need no step time: every member is offered here, bound or replayed.
  void count_member(const Layout& l, const MemoryBreakdown& memory) {
    ++count;
    if (memory.fits()) {
      ++fitting;
    } else if (!closest || memory.headroom() > closest->memory.headroom()) {
      closest = memory_plan(l, memory);
    }
  }
  void offer_replayed(const Ranked& r) {
    if (!best || better(r, *best)) best = r;
  }
};

// The families, in make_families' order: family_members sets bit f for families[f].
enum FamilyIndex : uint32_t {
  kTpAcrossNodes,
  kNoPipeline,
  kPipeline,
  kInterleaved,
  kNoZero,
  kZero12,
  kZero3,
  kNoRecompute,
  kSelective,
  kFullRecompute,
  kTpWithoutSp,
  kSp,
  kNoCp,
  kCp,
  kNoEp,
  kEp,
  kFamilyCount
};

// Which families a layout belongs to: asked of every layout of a search (1e5 of them), so one
// function of plain comparisons.
uint32_t family_members(const Layout& l, int gpus_per_node) {
  auto bit = [](FamilyIndex f, bool member) { return member ? uint32_t{1} << f : 0u; };
  return bit(kTpAcrossNodes, l.tp > gpus_per_node) | bit(kNoPipeline, l.pp == 1) |
         bit(kPipeline, l.pp > 1) | bit(kInterleaved, l.vp > 1) | bit(kNoZero, l.zero_stage == 0) |
         bit(kZero12, l.zero_stage == 1 || l.zero_stage == 2) | bit(kZero3, l.zero_stage == 3) |
         bit(kNoRecompute, l.recompute == Recompute::none) |
         bit(kSelective, l.recompute == Recompute::selective) |
         bit(kFullRecompute, l.recompute == Recompute::full) |
         bit(kTpWithoutSp, l.tp > 1 && !l.sequence_parallel) | bit(kSp, l.sequence_parallel) |
         bit(kNoCp, l.cp == 1) | bit(kCp, l.cp > 1) | bit(kNoEp, l.ep == 1) | bit(kEp, l.ep > 1);
}

std::vector<Family> make_families(const Cluster& c) {
  const int g = c.gpus_per_node;
  auto fixed = [](std::string text) {
    return [text = std::move(text)](const Layout&) { return text; };
  };
  std::vector<Family> f(kFamilyCount);
  f[kTpAcrossNodes].label = [g, inter = c.inter_node.name](const Layout& l) {
    return str("tp=", l.tp, " crosses the node boundary (", g,
               " GPUs per node): its all-reduces would run over ", inter);
  };
  f[kNoPipeline].label = fixed("no pipeline (pp=1)");
  f[kPipeline].label = fixed("pipeline parallelism (pp>1)");
  f[kInterleaved].label = fixed("interleaved pipeline (v>1)");
  f[kNoZero].label = fixed("no ZeRO (optimizer state replicated)");
  f[kZero12].label = fixed("ZeRO-1/2 (optimizer state, gradients sharded)");
  f[kZero3].label = fixed("ZeRO-3 / FSDP (weights sharded too)");
  f[kNoRecompute].label = fixed("no activation recompute");
  f[kSelective].label = fixed("selective recompute");
  f[kFullRecompute].label = fixed("full recompute");
  f[kTpWithoutSp].label = fixed("TP without sequence parallelism");
  f[kSp].label = fixed("sequence parallelism");
  f[kNoCp].label = fixed("no context parallelism (cp=1)");
  f[kCp].label = fixed("context parallelism (cp>1)");
  f[kNoEp].label = fixed("experts replicated (ep=1)");
  f[kEp].label = fixed("expert parallelism (ep>1)");
  return f;
}

// The component of `worse`'s step that grew most against `ref`, in words.
std::string main_cause(const Plan& worse, const Plan& ref, const Cluster& c) {
  const TimeBreakdown& a = worse.time;
  const TimeBreakdown& b = ref.time;
  struct Part {
    double delta;
    std::string text;
  };
  bool tp_inter = false;
  for (const GroupTraffic& g : worse.traffic) tp_inter |= g.group == "TP" && g.inter_node;
  const Part parts[] = {
      {a.compute_s - b.compute_s,
       str("compute ", format_seconds(a.compute_s), " per step vs ", format_seconds(b.compute_s),
           a.recompute_s > b.recompute_s ? " (recompute)" : "")},
      {a.bubble_s - b.bubble_s,
       str("pipeline bubble ", format_seconds(a.bubble_s), " vs ", format_seconds(b.bubble_s))},
      {a.tp_s - b.tp_s,
       str("TP communication ", format_seconds(a.tp_s), " vs ", format_seconds(b.tp_s),
           tp_inter ? str(" (over ", c.inter_node.name, ")") : std::string())},
      {a.pp_s - b.pp_s,
       str("pipeline sends ", format_seconds(a.pp_s), " vs ", format_seconds(b.pp_s))},
      {a.dp_exposed_s - b.dp_exposed_s,
       str("exposed DP/ZeRO communication ", format_seconds(a.dp_exposed_s), " vs ",
           format_seconds(b.dp_exposed_s))},
  };
  const Part* top = &parts[0];
  for (const Part& p : parts) {
    if (p.delta > top->delta) top = &p;
  }
  if (top->delta <= 0) return "same step time, more memory";
  return top->text;
}

std::string slower(const Plan& worse, const Plan& ref) {
  return format_percent(worse.time.step_s / ref.time.step_s - 1) + " slower";
}

std::string why_winner(const Plan& p, const Cluster& c) {
  const TimeBreakdown& t = p.time;
  std::string s =
      str("step ", format_seconds(t.step_s), " = compute ", format_percent(t.compute_s / t.step_s));
  if (t.bubble_s > 0) s += str(", bubble ", format_percent(t.bubble_s / t.step_s));
  if (t.tp_s > 0) s += str(", TP ", format_percent(t.tp_s / t.step_s));
  if (t.pp_s > 0) s += str(", PP ", format_percent(t.pp_s / t.step_s));
  if (t.dp_exposed_s > 0) s += str(", exposed DP ", format_percent(t.dp_exposed_s / t.step_s));
  bool tp_intra = p.layout.tp > 1;
  for (const GroupTraffic& g : p.traffic) tp_intra &= !(g.group == "TP" && g.inter_node);
  if (tp_intra) s += str("; TP stays on ", c.intra_node.name);
  s += str("; ", format_gb(p.memory.total()), " of ", format_gb(p.memory.capacity));
  return s;
}

// Every layout search() evaluates, in its order: each (dp, tp, pp) split of the GPUs, then each
// micro-batch, interleave factor, ZeRO stage, recompute mode and sequence-parallel switch the
// split allows. `reject` hears each split that is invalid, with why; `splits` counts them all.
// Splits and options outside `fixed` are skipped before anything is evaluated or rejected.
void for_each_layout(const PlanInput& in, const SearchConstraints& fixed,
                     const std::function<void(const Layout&)>& visit,
                     const std::function<void(const std::string&, const Layout&)>& reject,
                     int64_t* splits) {
  const ModelShape& m = in.model;
  const int64_t gpus = in.cluster.world();
  const int64_t batch = in.training.global_batch;
  // Context parallelism is searched on GPU clusters only: the engine clock (measured rates)
  // prices a CP layout given with --cp, but its search over CP is not done yet.
  const bool cp_searched = !has_measured_rates(in.cluster);
  // The engine clock (measured rates) prices dtrain's MoE layer without TP, and EP at ZeRO 0,
  // fp32, without full recompute (planner.cc's layout_error says so for a given layout).
  const bool engine_moe = has_measured_rates(in.cluster) && m.moe.enabled();
  const bool constrained = fixed.any();  // else every layout below is admitted
  for (int64_t tp : divisors(gpus)) {
    if (fixed.tp && *fixed.tp != tp) continue;
    for (int64_t pp : divisors(gpus / tp)) {
      if (fixed.pp && *fixed.pp != pp) continue;
      for (int64_t cp : divisors(gpus / (tp * pp))) {
        if (fixed.cp && *fixed.cp != cp) continue;
        if (!fixed.cp && cp > 1 && !cp_searched) continue;
        if (fixed.dp && *fixed.dp != gpus / (tp * pp * cp)) continue;
        ++*splits;
        Layout base;
        base.tp = static_cast<int>(tp);
        base.pp = static_cast<int>(pp);
        base.cp = static_cast<int>(cp);
        base.cp_algo = fixed.cp_algo.value_or(CpAlgorithm::automatic);
        base.dp = static_cast<int>(gpus / (tp * pp * cp));
        if (cp > 1) {
          // The sequence must divide (2 x cp for the balanced ring and all-gather; the heads over
          // cp x tp for ulysses): the same check evaluate makes.
          CpShape shape;
          shape.seq = m.seq;
          shape.hidden = m.hidden;
          shape.heads = m.heads;
          shape.kv_heads = m.kv_heads;
          shape.tp = base.tp;
          shape.cp = base.cp;
          const std::string error =
              base.cp_algo != CpAlgorithm::automatic
                  ? cp_layout_error(shape, base.cp_algo)
                  : (cp_layout_error(shape, CpAlgorithm::ring).empty() ||
                             cp_layout_error(shape, CpAlgorithm::ulysses).empty()
                         ? std::string()
                         : cp_layout_error(shape, CpAlgorithm::ring));
          if (!error.empty()) {
            reject(m.seq % cp != 0 ? str("cp not dividing the sequence of ", m.seq)
                   : base.cp_algo == CpAlgorithm::ulysses
                       ? str("cp x tp not dividing the ", m.heads, " heads and ",
                             m.kv_heads_or_heads(), " key/value heads (ulysses)")
                       : str("2 x cp not dividing the sequence of ", m.seq, " (balanced ring)"),
                   base);
            continue;
          }
        }
        if (m.heads % tp != 0) {
          reject(str("tp not dividing the ", m.heads, " attention heads"), base);
          continue;
        }
        if (engine_moe && tp > 1) {
          reject("tp with an MoE model (the engine clock does not price the MoE layer under TP)",
                 base);
          continue;
        }
        if (m.kv_heads_or_heads() % tp != 0 && tp % m.kv_heads_or_heads() != 0) {
          reject(str("tp neither dividing nor a multiple of the ", m.kv_heads_or_heads(),
                     " key/value heads"),
                 base);
          continue;
        }
        // A pp that does not divide the layers gets the balanced split (pipeline_stages.h: the
        // first and the last stage the lighter), except on the engine clock, which prices equal
        // stages only.
        if (pp > m.layers) {
          reject(str("pp above the ", m.layers, " layers"), base);
          continue;
        }
        if (has_measured_rates(in.cluster) && m.layers % pp != 0) {
          reject(str("pp not dividing the ", m.layers,
                     " layers (the engine clock prices equal "
                     "stages only)"),
                 base);
          continue;
        }
        if (batch % base.dp != 0) {
          reject(str("dp not dividing the global batch of ", batch), base);
          continue;
        }
        // Expert parallelism: the divisors of dp that divide the experts (EP with CP is not
        // modelled).
        std::vector<int> eps{1};
        if (m.moe.enabled() && base.cp == 1) {
          for (int64_t e : divisors(base.dp)) {
            if (e > 1 && m.moe.experts % e == 0) eps.push_back(static_cast<int>(e));
          }
        }
        // Interleave factors v > 1 whose v * pp chunks split the layers evenly: once per split,
        // not once per micro-batch size (a model of 1e5 layers makes this loop long).
        std::vector<int> interleaved;
        for (int64_t v = 2; pp > 1 && v * pp <= m.layers; ++v) {
          if (m.layers % (v * pp) == 0) interleaved.push_back(static_cast<int>(v));
        }
        for (int64_t b : divisors(batch / base.dp)) {
          if (fixed.micro_batch && *fixed.micro_batch != b) continue;
          const int64_t microbatches = batch / base.dp / b;
          if (fixed.microbatches && *fixed.microbatches != microbatches) continue;
          std::vector<int> vps{1};
          if (pp > 1 && microbatches % pp == 0) {
            vps.insert(vps.end(), interleaved.begin(), interleaved.end());
          }
          // One layout filled in axis by axis as the loops turn (a copy per layout showed in
          // the search's profile).
          Layout l = base;
          l.micro_batch = b;
          for (int v : vps) {
            l.vp = v;
            l.schedule = v > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b;
            for (int zero = 0; zero <= (base.dp * base.cp > 1 ? 3 : 0); ++zero) {
              l.zero_stage = zero;
              for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
                l.recompute = rc;
                for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
                  l.sequence_parallel = sp == 1;
                  for (int ep : eps) {
                    l.ep = ep;
                    if (engine_moe && ep > 1 &&
                        (zero > 0 || rc == Recompute::full || in.training.activation_bytes < 4)) {
                      continue;
                    }
                    if (!constrained || fixed.admits(l, batch)) visit(l);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace

std::string describe(const SearchConstraints& c) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : " ") + part; };
  if (c.dp) add(str("dp=", *c.dp));
  if (c.tp) add(str("tp=", *c.tp));
  if (c.pp) add(str("pp=", *c.pp));
  if (c.vp) add(str("v=", *c.vp));
  if (c.zero_stage) add(str("zero=", *c.zero_stage));
  if (c.micro_batch) add(str("b=", *c.micro_batch));
  if (c.microbatches) add(str("M=", *c.microbatches));
  if (c.recompute) add(str("rc=", name(*c.recompute)));
  if (c.sequence_parallel) add(*c.sequence_parallel ? "sp" : "no sp");
  if (c.cp) add(str("cp=", *c.cp));
  if (c.cp_algo) add(str("cp-algo=", name(*c.cp_algo)));
  if (c.ep) add(str("ep=", *c.ep));
  return s;
}

bool SearchConstraints::admits(const Layout& l, int64_t global_batch) const {
  const int64_t per_micro_batch = static_cast<int64_t>(l.dp) * l.micro_batch;
  return (!microbatches ||
          (per_micro_batch > 0 && *microbatches * per_micro_batch == global_batch)) &&
         (!dp || *dp == l.dp) && (!tp || *tp == l.tp) && (!pp || *pp == l.pp) &&
         (!vp || *vp == l.vp) && (!zero_stage || *zero_stage == l.zero_stage) &&
         (!micro_batch || *micro_batch == l.micro_batch) &&
         (!recompute || *recompute == l.recompute) &&
         (!sequence_parallel || *sequence_parallel == l.sequence_parallel) &&
         (!cp || *cp == l.cp) && (!cp_algo || *cp_algo == l.cp_algo) && (!ep || *ep == l.ep);
}

SearchSize search_size(const PlanInput& in, const SearchConstraints& fixed) {
  SearchSize size;
  int64_t splits = 0;
  double group_ranks = 0;
  for_each_layout(
      in, fixed,
      [&](const Layout& l) {
        ++size.layouts;
        group_ranks += static_cast<double>(l.dp) + l.tp + l.pp + l.cp;
      },
      [](const std::string&, const Layout&) {}, &splits);
  size.seconds =
      (static_cast<double>(size.layouts) * kSecondsPerLayout + group_ranks * kSecondsPerGroupRank);
  return size;
}

std::vector<Layout> search_layouts(const PlanInput& in, const SearchConstraints& fixed) {
  std::vector<Layout> layouts;
  int64_t splits = 0;
  for_each_layout(
      in, fixed, [&](const Layout& l) { layouts.push_back(l); },
      [](const std::string&, const Layout&) {}, &splits);
  return layouts;
}

SearchResult search(const PlanInput& in, const SearchOptions& options) {
  validate(in);
  DTRAIN_CHECK(options.top >= 1, "--top must be >= 1, got ", options.top);
  // Counted first (cheap: no layout is evaluated), so a search that would run for minutes is
  // refused before it starts.
  const SearchSize size = search_size(in, options.fixed);
  DTRAIN_CHECK(size.seconds <= kMaxSearchSeconds, "--search would evaluate ", size.layouts,
               " layouts (every split of the ", in.cluster.world(),
               " GPUs, then every micro-batch size dividing --global-batch ",
               in.training.global_batch, " and every interleave factor dividing --layers ",
               in.model.layers, "), about ", static_cast<int64_t>(size.seconds), " s; at most ",
               kMaxSearchSeconds, " s of search is started");
  const Cluster& c = in.cluster;
  SearchResult result;
  std::vector<Family> families = make_families(c);
  std::map<std::string, Rejection> invalid;
  std::optional<Plan> closest;

  auto reject = [&](const std::string& reason, const Layout& l) {
    Rejection& r = invalid[reason];
    if (r.count++ == 0) {
      r.reason = reason;
      r.example = str("dp=", l.dp, " tp=", l.tp, " pp=", l.pp, ": ", layout_error(in, l));
    }
  };

  // First every layout's memory: which fit and the least-overfull ones; then a bound on each
  // fitting layout's step, the lower bound on its pipeline (no replay).
  struct Candidate {
    Layout layout;
    int64_t index = 0;  // enumeration order
    double step_s = 0;  // step_compute_bound's, then step_lower_bound's: never above evaluate's
    bool exact_bound = false;  // step_s is step_lower_bound's
    uint32_t families = 0;     // bit f: a member of families[f]
  };
  static_assert(kFamilyCount <= 32, "family_members keeps one bit per family");
  std::vector<Candidate> fitting;
  // The pieces shared by layouts alike in some axes (the exhaustive search prices each layout
  // on its own: the pruned one is compared with it).
  detail::PricingMemo memo;
  // The closest misses' totals, of the search and of each family (infinite while none): what a
  // layout's memory bound is held to.
  double closest_total = std::numeric_limits<double>::infinity();
  std::vector<double> family_closest_total(families.size(),
                                           std::numeric_limits<double>::infinity());
  result.fixed = options.fixed;
  for_each_layout(
      in, options.fixed,
      [&](const Layout& l) {
        const int64_t index = result.evaluated++;
        const uint32_t member_of = family_members(l, c.gpus_per_node);
        // A layout whose model states alone are over the GPU's memory, and at least the closest
        // miss's total of the search and of each of its families, can neither fit nor become a
        // closest miss (a later one replaces it only when strictly closer): it is counted, not
        // priced. The exhaustive search prices every layout.
        if (!options.exhaustive) {
          auto sets_aside = [&](double bound) {
            if (!(bound > c.gpu.memory_bytes && bound >= closest_total)) return false;
            for (uint32_t rest = member_of; rest != 0; rest &= rest - 1) {
              if (!(bound >= family_closest_total[static_cast<size_t>(std::countr_zero(rest))])) {
                return false;
              }
            }
            return true;
          };
          // The model states first (a lookup and a sum), then with the blocks' activations.
          const double states = detail::first_stage_states(in, l, memo);
          const bool aside =
              sets_aside(states) || sets_aside(detail::memory_lower_bound(in, l, memo, states));
          if (aside) {
            for (size_t f = 0; f < families.size(); ++f) {
              if ((member_of >> f & 1) != 0) ++families[f].count;
            }
            return;
          }
        }
        // The memory first: a layout that does not fit is never timed.
        const MemoryBreakdown memory =
            options.exhaustive ? evaluate_memory(in, l).memory : detail::layout_memory(in, l, memo);
        ++result.priced;
        for (size_t f = 0; f < families.size(); ++f) {
          if ((member_of >> f & 1) == 0) continue;
          families[f].count_member(l, memory);
          if (families[f].closest) family_closest_total[f] = families[f].closest->memory.total();
        }
        if (!memory.fits()) {
          if (!closest || memory.headroom() > closest->memory.headroom()) {
            closest = memory_plan(l, memory);
            closest_total = closest->memory.total();
          }
          return;
        }
        ++result.fitting;
        // The exhaustive search bounds each step in full; the pruned one first by the first
        // stage's compute (a few products), and in full only when that cannot rule it out.
        if (options.exhaustive) {
          ++result.bounded;
          fitting.push_back({l, index, step_lower_bound(in, l), true, member_of});
        } else {
          fitting.push_back({l, index, detail::step_compute_bound(in, l, memo), false, member_of});
        }
      },
      reject, &result.splits);

  // Then the fitting layouts in ascending order of their bound, each replayed only while it
  // could still enter the top list or be its family's best: once the slowest kept plan (or a
  // family's best) is faster than a layout's bound, it is faster than that layout's step and
  // than every later one's, whose bounds are no lower. A layout bounded by its compute alone
  // goes back in line with its full bound when it is still needed at its turn (a bound only
  // grows, so the line stays in ascending order of what each layout can still be).
  struct InLine {       // a fitting layout's place in line: small, so the heap's moves are cheap
    double step_s = 0;  // the candidate's bound
    int64_t index = 0;  // its enumeration order
    uint32_t candidate = 0;  // fitting[candidate]
  };
  auto later = [](const InLine& a, const InLine& b) {  // a min-heap on (bound, order)
    return a.step_s != b.step_s ? a.step_s > b.step_s : a.index > b.index;
  };
  std::vector<InLine> line;
  line.reserve(fitting.size());
  // Members of each family still in line: once the top list is full and faster than the head of
  // the line, and every family with members left is settled there, nothing left is needed.
  std::vector<int64_t> waiting(families.size(), 0);
  for (size_t i = 0; i < fitting.size(); ++i) {
    line.push_back({fitting[i].step_s, fitting[i].index, static_cast<uint32_t>(i)});
    for (uint32_t rest = fitting[i].families; rest != 0; rest &= rest - 1) {
      ++waiting[static_cast<size_t>(std::countr_zero(rest))];
    }
  }
  std::make_heap(line.begin(), line.end(), later);
  std::vector<Ranked> top;
  const auto top_count = static_cast<size_t>(options.top);
  auto all_settled = [&](double bound) {
    if (options.exhaustive || top.size() < top_count || !(top.back().plan.time.step_s < bound)) {
      return false;
    }
    for (size_t f = 0; f < families.size(); ++f) {
      if (waiting[f] > 0 && !settled(families[f].best, bound)) return false;
    }
    return true;
  };
  while (!line.empty() && !all_settled(line.front().step_s)) {
    std::pop_heap(line.begin(), line.end(), later);
    Candidate& candidate = fitting[line.back().candidate];
    bool needed = options.exhaustive || top.size() < top_count ||
                  !(top.back().plan.time.step_s < candidate.step_s);
    for (size_t f = 0; !needed && f < families.size(); ++f) {
      needed = (candidate.families >> f & 1) != 0 && !settled(families[f].best, candidate.step_s);
    }
    if (needed && !candidate.exact_bound) {  // back in line with its full bound
      candidate.step_s = detail::step_lower_bound(in, candidate.layout, memo);
      candidate.exact_bound = true;
      ++result.bounded;
      line.back().step_s = candidate.step_s;
      std::push_heap(line.begin(), line.end(), later);
      continue;
    }
    line.pop_back();
    for (uint32_t rest = candidate.families; rest != 0; rest &= rest - 1) {
      --waiting[static_cast<size_t>(std::countr_zero(rest))];
    }
    if (!needed) continue;
    Ranked r{evaluate(in, candidate.layout), candidate.index};
    ++result.simulated;
    DTRAIN_CHECK(r.plan.memory.fits(), "search: ", describe(candidate.layout),
                 " fit under its bound but not replayed");
    for (size_t f = 0; f < families.size(); ++f) {
      if ((candidate.families >> f & 1) != 0) families[f].offer_replayed(r);
    }
    if (top.size() < top_count || better(r, top.back())) {
      top.insert(std::upper_bound(top.begin(), top.end(), r, better), std::move(r));
      if (top.size() > top_count) top.pop_back();
    }
  }

  DTRAIN_CHECK(result.evaluated > 0 || !options.fixed.any(), "--search: no valid layout has ",
               describe(options.fixed), " on ", in.cluster.world(), " GPUs",
               invalid.empty() ? "" : str(" (", invalid.begin()->second.example, ")"));
  for (auto& [reason, r] : invalid) result.invalid_splits.push_back(r);
  std::sort(result.invalid_splits.begin(), result.invalid_splits.end(),
            [](const Rejection& a, const Rejection& b) { return a.count > b.count; });

  if (top.empty()) {
    if (closest) {
      closest = evaluate(in, closest->layout);  // what is reported comes from a replay
      result.explanations.push_back(str("no layout fits in ", format_gb(c.gpu.memory_bytes),
                                        " per GPU; the closest, ", describe(closest->layout),
                                        ", needs ", format_gb(closest->memory.total()),
                                        " (over by ", format_gb(-closest->memory.headroom()), ")"));
    }
    return result;
  }
  const Plan& winner = top.front().plan;
  for (size_t i = 0; i < top.size(); ++i) {
    const Plan& p = top[i].plan;
    RankedPlan r{p, {}};
    r.why = i == 0 ? why_winner(p, c)
                   : str(slower(p, winner), " than #1: ", main_cause(p, winner, c), "; ",
                         format_gb(p.memory.total()));
    result.top.push_back(std::move(r));
  }
  if (result.evaluated > result.fitting) {
    result.explanations.push_back(str(result.evaluated - result.fitting, " of ", result.evaluated,
                                      " layouts do not fit in ", format_gb(c.gpu.memory_bytes),
                                      " per GPU"));
  }
  const uint32_t winner_families = family_members(winner.layout, c.gpus_per_node);
  for (size_t index = 0; index < families.size(); ++index) {
    Family& f = families[index];
    if (f.count == 0 || (winner_families >> index & 1) != 0) continue;
    if (f.best) {
      const Plan& best = f.best->plan;
      result.explanations.push_back(str(f.label(best.layout), ": best is ", describe(best.layout),
                                        ", ", slower(best, winner), ": ",
                                        main_cause(best, winner, c)));
    } else if (f.closest) {
      f.closest = evaluate(in, f.closest->layout);  // what is reported comes from a replay
      result.explanations.push_back(str(f.label(f.closest->layout), ": none of ", f.count,
                                        " fits; closest is ", describe(f.closest->layout), " at ",
                                        format_gb(f.closest->memory.total()), " (over by ",
                                        format_gb(-f.closest->memory.headroom()), ")"));
    }
  }
  return result;
}

}  // namespace dtrain::plan
