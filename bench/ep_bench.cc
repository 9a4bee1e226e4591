// bench ep: the replicated and the expert-parallel MoE step, timed and measured on the same
// ranks (single-threaded OpenBLAS, one core a rank), rounds interleaved so both see the same
// machine.
#include "bench/ep_bench.h"

#include <algorithm>
#include <mutex>

#include "bench/bench_util.h"
#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/core/timer.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "dtrain/model/gemm.h"

namespace dtrain::bench {
namespace {

train::StepConfig step_config(const EpBenchOptions& o) {
  train::StepConfig c;
  c.model.vocab = 256;
  c.model.context = o.seq;
  c.model.layers = o.layers;
  c.model.heads = o.heads;
  c.model.channels = o.channels;
  c.model.moe = {.experts = o.experts, .top_k = o.top_k, .every = 1};
  c.batch = o.batch_per_rank * o.ranks;
  c.seq = o.seq;
  c.threads = 1;
  return c;
}

EpBenchRow run_layout(const EpBenchOptions& o, int ep, const data::Batch& batch) {
  train::LayoutOptions layout;
  layout.dp = o.ranks;
  layout.ep = ep;
  const train::EngineConfig config = train::make_engine_config(step_config(o), layout);
  std::vector<std::vector<double>> step_us(static_cast<size_t>(o.ranks));
  EpBenchRow row;
  row.ep = ep;
  std::mutex m;
  comm::threads::run_ranks(o.ranks, [&](comm::Communicator& comm) {
    train::Engine engine(config, comm);
    std::vector<double>& mine = step_us[static_cast<size_t>(comm.rank())];
    for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
      comm.barrier();  // every rank starts the step together
      Stopwatch watch;
      (void)engine.train_step(batch, 1e-4f);
      if (s >= o.warmup) mine.push_back(watch.elapsed_us());
    }
    const std::lock_guard<std::mutex> lock(m);
    row.peak_bytes = std::max(row.peak_bytes, engine.memory().peak_total_bytes());
    if (comm.rank() == 0) {
      row.param_count = engine.model().param_count();
      row.ep_bytes_per_step = static_cast<double>(engine.traffic().ep.total().bytes_sent) /
                              static_cast<double>(engine.steps());
    }
  });
  std::vector<double> slowest(static_cast<size_t>(o.steps), 0.0);
  for (const std::vector<double>& r : step_us) {
    for (size_t s = 0; s < slowest.size(); ++s) slowest[s] = std::max(slowest[s], r[s]);
  }
  row.step_ms = median(slowest) * 1e-3;
  return row;
}

}  // namespace

EpBenchReport run_ep_bench(const EpBenchOptions& o) {
  DTRAIN_CHECK(o.ranks >= 2, "bench ep: --ranks must be at least 2 (got ", o.ranks, ")");
  DTRAIN_CHECK(o.experts % o.ranks == 0, "bench ep: --ranks ", o.ranks,
               " does not divide --experts ", o.experts);
  const train::StepConfig c = step_config(o);
  data::Batch batch;
  batch.resize(c.batch, c.seq);
  Rng rng(1);
  for (int32_t& t : batch.inputs) t = static_cast<int32_t>(rng.uniform_int(c.model.vocab));
  for (int32_t& t : batch.targets) t = static_cast<int32_t>(rng.uniform_int(c.model.vocab));
  EpBenchReport r;
  r.options = o;
  const int before = model::blas_threads();
  model::set_blas_threads(1);  // one core per rank
  for (int round = 0; round < o.rounds; ++round) {
    for (int ep : {1, o.ranks}) {
      const EpBenchRow row = run_layout(o, ep, batch);
      EpBenchRow& best = ep == 1 ? r.replicated : r.expert_parallel;
      if (round == 0 || row.step_ms < best.step_ms) best = row;
    }
  }
  model::set_blas_threads(before);
  return r;
}

void print_ep_bench(std::ostream& out, const EpBenchReport& r) {
  const EpBenchOptions& o = r.options;
  out << "bench ep: MoE step (L" << o.layers << " C" << o.channels << " T" << o.seq << " E"
      << o.experts << " k" << o.top_k << ", " << o.batch_per_rank << " sequences per rank) on "
      << o.ranks << " DP ranks (threads), experts replicated vs --ep " << o.ranks << "\n";
  out << "  layout        step ms   peak bytes/rank   params/rank   EP all-to-all bytes/step\n";
  for (const EpBenchRow* row : {&r.replicated, &r.expert_parallel}) {
    out << "  "
        << (row->ep == 1 ? std::string("replicated  ") : "ep " + lpad(std::to_string(row->ep), 9))
        << lpad(fixed(row->step_ms, 3), 9) << lpad(std::to_string(row->peak_bytes), 18)
        << lpad(std::to_string(row->param_count), 14) << lpad(fixed(row->ep_bytes_per_step, 0), 27)
        << "\n";
  }
  out << "  ratio EP / replicated: time " << fixed(r.time_ratio(), 3) << ", peak memory "
      << fixed(r.memory_ratio(), 3) << " (median step of the slowest rank, best of " << o.rounds
      << " rounds; this machine: shared cores, so time ratios move between runs)\n";
}

nlohmann::json ep_bench_to_json(const EpBenchReport& r) {
  auto row = [](const EpBenchRow& x) {
    return nlohmann::json{{"ep", x.ep},
                          {"step_ms", x.step_ms},
                          {"peak_bytes_per_rank", x.peak_bytes},
                          {"params_per_rank", x.param_count},
                          {"ep_bytes_per_step", x.ep_bytes_per_step}};
  };
  const EpBenchOptions& o = r.options;
  return {{"ranks", o.ranks},
          {"model",
           {{"layers", o.layers},
            {"channels", o.channels},
            {"seq", o.seq},
            {"experts", o.experts},
            {"top_k", o.top_k}}},
          {"batch_per_rank", o.batch_per_rank},
          {"replicated", row(r.replicated)},
          {"expert_parallel", row(r.expert_parallel)},
          {"time_ratio", r.time_ratio()},
          {"memory_ratio", r.memory_ratio()}};
}

}  // namespace dtrain::bench
