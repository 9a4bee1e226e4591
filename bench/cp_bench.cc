// bench cp: the data-parallel and the context-parallel step at one long sequence, timed and
// measured on the same ranks (single-threaded OpenBLAS, one core a rank), rounds interleaved so
// both see the same machine.
#include "bench/cp_bench.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "bench/bench_util.h"
#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/core/timer.h"
#include "dtrain/cost/context_parallel.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "dtrain/model/bf16_gemm.h"
#include "dtrain/model/gemm.h"

namespace dtrain::bench {
namespace {

train::StepConfig step_config(const CpBenchOptions& o) {
  train::StepConfig c;
  c.model.vocab = 256;
  c.model.context = o.seq;
  c.model.layers = o.layers;
  c.model.heads = o.heads;
  c.model.channels = o.channels;
  if (o.kv_heads > 0) {
    c.model.family = model::ModelFamily::llama;
    c.model.kv_heads = o.kv_heads;
  }
  c.batch = o.batch;
  c.seq = o.seq;
  c.threads = 1;
  return c;
}

CpBenchRow run_layout(const CpBenchOptions& o, int cp, const data::Batch& batch) {
  train::LayoutOptions layout;
  layout.dp = o.ranks / cp;
  layout.cp = cp;
  layout.cp_algorithm = o.algorithm;
  const train::EngineConfig config = train::make_engine_config(step_config(o), layout);
  std::vector<std::vector<double>> step_us(static_cast<size_t>(o.ranks));
  CpBenchRow row;
  row.dp = layout.dp;
  row.cp = cp;
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
    const MemoryTracker& t = engine.memory();
    row.activation_peak_bytes =
        std::max(row.activation_peak_bytes, t.peak_bytes(MemoryTag::activations));
    row.peak_bytes = std::max(row.peak_bytes, t.peak_total_bytes());
    if (comm.rank() == 0) {
      const parallel::ContextParallelCounters& k = engine.cp_counters();
      const int64_t sent = k.forward.traffic.bytes_sent + k.backward.traffic.bytes_sent +
                           k.recompute.traffic.bytes_sent;
      row.cp_bytes_per_step = static_cast<double>(sent) / static_cast<double>(engine.steps());
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

CpBenchReport run_cp_bench(const CpBenchOptions& o) {
  DTRAIN_CHECK(o.ranks >= 2, "bench cp: --ranks must be at least 2 (got ", o.ranks, ")");
  DTRAIN_CHECK(o.batch % o.ranks == 0, "bench cp: --ranks ", o.ranks,
               " does not divide --global-batch ", o.batch,
               " (the DP run gives each rank batch / ranks sequences)");
  DTRAIN_CHECK(o.algorithm != plan::CpAlgorithm::automatic,
               "bench cp: --cp-algo must be ring, all-gather or ulysses");
  const train::StepConfig c = step_config(o);
  data::Batch batch;
  batch.resize(c.batch, c.seq);
  Rng rng(1);
  for (int32_t& t : batch.inputs) t = static_cast<int32_t>(rng.uniform_int(c.model.vocab));
  for (int32_t& t : batch.targets) t = static_cast<int32_t>(rng.uniform_int(c.model.vocab));
  CpBenchReport r;
  r.options = o;
  r.cpu = model::bf16_support().cpu_model;
  const int before = model::blas_threads();
  model::set_blas_threads(1);  // one core per rank
  CpBenchOptions mha = o;
  mha.kv_heads = o.heads;
  const bool compare_heads = o.kv_heads > 0 && o.kv_heads < o.heads;
  for (int round = 0; round < o.rounds; ++round) {
    for (int cp : {1, o.ranks}) {
      const CpBenchRow row = run_layout(o, cp, batch);
      CpBenchRow& best = cp == 1 ? r.data_parallel : r.context_parallel;
      if (round == 0 || row.step_ms < best.step_ms) best = row;
    }
    if (compare_heads) {
      const CpBenchRow row = run_layout(mha, o.ranks, batch);
      if (round == 0 || row.step_ms < r.multi_head.step_ms) r.multi_head = row;
    }
  }
  model::set_blas_threads(before);
  if (compare_heads) {
    r.kv_bytes_ratio = r.context_parallel.cp_bytes_per_step / r.multi_head.cp_bytes_per_step;
    // plan/'s bytes of one layer at each head count, on the engine's fp32 wire.
    plan::CpShape s{.seq = o.seq,
                    .micro_batch = o.batch,
                    .hidden = o.channels,
                    .heads = o.heads,
                    .kv_heads = o.kv_heads,
                    .cp = o.ranks};
    s = plan::with_engine_wire(s, plan::Precision::fp32);
    const double gqa = plan::cp_traffic_per_layer(s, o.algorithm, Recompute::none).bytes_sent();
    s.kv_heads = o.heads;
    const double full = plan::cp_traffic_per_layer(s, o.algorithm, Recompute::none).bytes_sent();
    r.kv_bytes_ratio_planned = gqa / full;
  }
  return r;
}

void print_cp_bench(std::ostream& out, const CpBenchReport& r) {
  const CpBenchOptions& o = r.options;
  out << "bench cp: training step (L" << o.layers << " C" << o.channels << " NH" << o.heads
      << (o.kv_heads > 0 ? " llama NKV" + std::to_string(o.kv_heads) : "") << " T" << o.seq
      << ", global batch " << o.batch << ") on " << o.ranks
      << " ranks (threads, one core each): --dp " << o.ranks << " vs --cp " << o.ranks << " ("
      << plan::name(o.algorithm) << ")\n";
  out << "  CPU: " << r.cpu << "\n";
  out << "  layout      step ms   activation peak/rank   peak bytes/rank   CP bytes/step\n";
  std::vector<const CpBenchRow*> rows = {&r.data_parallel, &r.context_parallel};
  if (r.has_multi_head()) rows.push_back(&r.multi_head);
  for (const CpBenchRow* row : rows) {
    std::string name =
        row->cp == 1 ? "dp " + std::to_string(row->dp) : "cp " + std::to_string(row->cp);
    if (row == &r.multi_head) name += " MHA";
    out << "  " << name << std::string(name.size() < 8 ? 8 - name.size() : 0, ' ')
        << lpad(fixed(row->step_ms, 3), 11) << lpad(std::to_string(row->activation_peak_bytes), 23)
        << lpad(std::to_string(row->peak_bytes), 18) << lpad(fixed(row->cp_bytes_per_step, 0), 16)
        << "\n";
  }
  out << "  ratio CP / DP: time " << fixed(r.time_ratio(), 3) << ", activation peak "
      << fixed(r.activation_ratio(), 3) << ", peak memory " << fixed(r.memory_ratio(), 3)
      << " (median step of the slowest rank, best of " << o.rounds
      << " rounds; shared cores move time ratios between runs)\n";
  if (r.has_multi_head()) {
    out << "  CP bytes, grouped-query (" << o.kv_heads << " K/V heads) over multi-head (" << o.heads
        << "): measured " << fixed(r.kv_bytes_ratio, 4) << ", plan/ "
        << fixed(r.kv_bytes_ratio_planned, 4) << "\n";
  }
}

nlohmann::json cp_bench_to_json(const CpBenchReport& r) {
  auto row = [](const CpBenchRow& x) {
    return nlohmann::json{{"dp", x.dp},
                          {"cp", x.cp},
                          {"step_ms", x.step_ms},
                          {"activation_peak_bytes_per_rank", x.activation_peak_bytes},
                          {"peak_bytes_per_rank", x.peak_bytes},
                          {"cp_bytes_per_step", x.cp_bytes_per_step}};
  };
  const CpBenchOptions& o = r.options;
  nlohmann::json j = {{"ranks", o.ranks},
                      {"cpu", r.cpu},
                      {"model",
                       {{"layers", o.layers},
                        {"channels", o.channels},
                        {"heads", o.heads},
                        {"kv_heads", o.kv_heads > 0 ? o.kv_heads : o.heads},
                        {"family", o.kv_heads > 0 ? "llama" : "gpt"},
                        {"seq", o.seq}}},
                      {"batch", o.batch},
                      {"cp_algorithm", std::string(plan::name(o.algorithm))},
                      {"data_parallel", row(r.data_parallel)},
                      {"context_parallel", row(r.context_parallel)},
                      {"time_ratio", r.time_ratio()},
                      {"activation_ratio", r.activation_ratio()},
                      {"memory_ratio", r.memory_ratio()}};
  if (r.has_multi_head()) {
    j["multi_head_context_parallel"] = row(r.multi_head);
    j["kv_bytes_ratio"] = r.kv_bytes_ratio;
    j["kv_bytes_ratio_planned"] = r.kv_bytes_ratio_planned;
  }
  return j;
}

}  // namespace dtrain::bench
