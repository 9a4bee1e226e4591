// run_train_bench: per thread count, a fresh engine (one rank: the run of `dtrain train`) on a
// fixed batch; a clean timed pass
// for ms/step, a second pass with sgemm timing for the GEMM share; then the sgemm peak.
#include "bench/train_bench.h"
#include "bench/bench_util.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/buffer.h"
#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/core/timer.h"
#include "dtrain/core/units.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "dtrain/model/bf16_gemm.h"
#include "dtrain/model/gemm.h"
#include "dtrain/report/layout_report.h"
#include "dtrain/run/trainer.h"

namespace dtrain::bench {
namespace {

// The peer's data: one batch of uniform random tokens, targets shifted by one.
data::Batch fixed_random_batch(int64_t B, int64_t T, int64_t V) {
  Rng rng(1234);
  std::vector<int32_t> seq(static_cast<size_t>(B * (T + 1)));
  for (int32_t& t : seq) t = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));
  data::Batch batch;
  batch.resize(B, T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      batch.inputs[static_cast<size_t>(b * T + t)] = seq[static_cast<size_t>(b * (T + 1) + t)];
      batch.targets[static_cast<size_t>(b * T + t)] = seq[static_cast<size_t>(b * (T + 1) + t + 1)];
    }
  }
  return batch;
}

// The timed steps on `engine`: a clean pass for ms/step and the phases, then a pass with every
// sgemm call timed for the GEMM share.
void measure_engine(const TrainBenchOptions& o, train::Engine& engine, const data::Batch& batch,
                    TrainBenchRow& row) {
  const float lr = 3e-4f;
  for (int64_t i = 0; i < o.warmup; ++i) {
    const float loss = engine.train_step(batch, lr).loss;
    if (i == 0) row.loss_first = loss;
  }
  std::vector<double> step_ms, fwd, bwd, opt;
  for (int64_t i = 0; i < o.steps; ++i) {
    Stopwatch watch;
    const train::StepStats s = engine.train_step(batch, lr);
    step_ms.push_back(watch.elapsed_us() * 1e-3);
    fwd.push_back(s.forward_ms);
    bwd.push_back(s.backward_ms);
    opt.push_back(s.optimizer_ms);
    if (o.warmup == 0 && i == 0) row.loss_first = s.loss;
    row.loss_last = s.loss;
  }
  row.ms_per_step = median(step_ms);
  row.best_ms_per_step = *std::min_element(step_ms.begin(), step_ms.end());
  row.tokens_per_s = static_cast<double>(batch.batch * batch.seq) / (row.ms_per_step * 1e-3);
  row.forward_ms = median(fwd);
  row.backward_ms = median(bwd);
  row.optimizer_ms = median(opt);
  row.activation_peak_bytes = engine.memory().peak_bytes(MemoryTag::activations);

  // Second pass with every sgemm call timed.
  model::GemmStats gemm;
  engine.model().set_gemm_stats(&gemm);
  double total_ms = 0;
  for (int64_t i = 0; i < o.steps; ++i) {
    Stopwatch watch;
    engine.train_step(batch, lr);
    total_ms += watch.elapsed_us() * 1e-3;
  }
  engine.model().set_gemm_stats(nullptr);
  const auto n = static_cast<double>(o.steps);
  row.gemm_ms_per_step = gemm.time_us * 1e-3 / n;
  row.gemm_fraction = gemm.time_us * 1e-3 / total_ms;
  row.gemm_gflop_per_step = gemm.flops / n * 1e-9;
  row.gemm_gflops = gemm.flops / (gemm.time_us * 1e-6) * 1e-9;
  row.step_gflops = row.gemm_gflop_per_step / (row.ms_per_step * 1e-3);
}

TrainBenchRow bench_threads(const TrainBenchOptions& o, train::StepConfig config,
                            const data::Batch& batch, int threads, bool openblas,
                            Recompute recompute, model::Precision precision) {
  model::set_blas_threads(openblas ? threads : 1);
  config.threads = openblas ? 1 : threads;
  config.recompute = recompute;
  config.precision = precision;
  // The peak is measured before and after the steps and the higher kept, so that a burst of
  // load from other processes during one measurement does not set it.
  // OpenBLAS runs the peak GEMM with `threads` of its own threads, whatever the row.
  model::set_blas_threads(threads);
  const double peak_before = measure_sgemm_gflops(o.sgemm_size, o.sgemm_seconds / 2);
  model::set_blas_threads(openblas ? threads : 1);
  TrainBenchRow row;
  row.threads = threads;
  row.openblas = openblas;
  row.recompute = recompute;
  row.precision = precision;
  comm::threads::run_ranks(1, [&](comm::Communicator& world) {
    train::Engine engine(train::make_engine_config(config, {}), world);
    measure_engine(o, engine, batch, row);
  });
  model::set_blas_threads(threads);
  row.sgemm_peak_gflops =
      std::max(peak_before, measure_sgemm_gflops(o.sgemm_size, o.sgemm_seconds / 2));
  row.gemm_vs_peak = row.gemm_gflops / row.sgemm_peak_gflops;
  return row;
}

// The peer's Llama block: the same K/V heads, SwiGLU width, theta and head.
std::string peer_family_flags(const model::GptConfig& m) {
  if (!m.llama()) return "";
  std::ostringstream f;
  f << " --family llama --kv-heads " << m.kv_heads_or_heads() << " --ffn-hidden " << m.ffn()
    << " --rope-theta " << m.rope_theta << (m.tied_head() ? " --tie-embeddings" : "");
  return f.str();
}

// The peer at every precision, with the model, batch and step counts of our rows.
void run_peer(const TrainBenchOptions& o, TrainBenchReport& r) {
  std::string threads;
  for (int t : o.threads) {
    if (!threads.empty()) threads += ',';
    threads += std::to_string(t);
  }
  for (model::Precision p : o.precision) {
    const std::string command =
        o.python + " " + o.peer + " --precision " + std::string(model::precision_name(p)) +
        " --threads " + threads + " --vocab " + std::to_string(r.model.vocab) + " --ctx " +
        std::to_string(r.seq) + " --layers " + std::to_string(r.model.layers) + " --heads " +
        std::to_string(r.model.heads) + " --hidden " + std::to_string(r.model.channels) +
        " --batch " + std::to_string(r.batch) + " --warmup " + std::to_string(o.warmup) +
        " --steps " + std::to_string(o.steps) + peer_family_flags(r.model) + " 2>&1";
    const std::optional<std::string> output = command_output(command);
    if (!output) {
      r.peer_error = "could not start: " + command;
      return;
    }
    std::istringstream lines(*output);
    std::string line;
    bool any = false;
    while (std::getline(lines, line)) {
      if (line.rfind("bench=torch_gpt", 0) != 0) continue;
      TrainPeerRow row;
      row.precision = p;
      row.threads = std::stoi(field(line, "threads"));
      row.ms_per_step = std::stod(field(line, "ms_per_step"));
      row.tokens_per_s = std::stod(field(line, "tokens_per_s"));
      row.line = line;
      r.peer.push_back(row);
      any = true;
    }
    if (!any) r.peer_error = "no result from: " + command + "\n" + *output;
  }
}

}  // namespace

double measure_sgemm_gflops(int64_t n, double min_seconds) {
  Buffer<float> a(n * n, MemoryTag::activations, nullptr);
  Buffer<float> b(n * n, MemoryTag::activations, nullptr);
  Buffer<float> c(n * n, MemoryTag::activations, nullptr);
  Rng rng(42);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>(rng.uniform() - 0.5);
    b[i] = static_cast<float>(rng.uniform() - 0.5);
  }
  auto call = [&] {
    model::sgemm(model::Trans::no, model::Trans::no, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                 c.data(), n);
  };
  call();
  call();
  std::vector<double> seconds;
  Stopwatch total;
  while (seconds.size() < 10 || total.elapsed_s() < min_seconds) {
    Stopwatch watch;
    call();
    seconds.push_back(watch.elapsed_s());
  }
  const double flops =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  return flops / median(seconds) * 1e-9;
}

double train_bench_memory_bytes(const TrainBenchOptions& o) {
  const model::GptPreset& preset = model::gpt_preset(o.model);
  const int64_t batch = o.batch > 0 ? o.batch : preset.batch;
  int threads = 1;
  for (int t : o.threads) threads = std::max(threads, t);
  const double n = static_cast<double>(o.sgemm_size);
  train::StepConfig step;
  step.model = preset.config;
  step.batch = batch;
  step.seq = preset.config.context;
  step.threads = threads;
  // One rank's model states and activations by the plan/ formulas, and the sgemm's matrices.
  return train::planned_rank_peak_bytes(train::make_engine_config(step, {}), 0) + 3 * 4 * n * n;
}

TrainBenchReport run_train_bench(const TrainBenchOptions& o) {
  const model::GptPreset& preset = model::gpt_preset(o.model);
  DTRAIN_CHECK(o.steps > 0, "--steps must be positive (got ", o.steps, ")");
  DTRAIN_CHECK(o.warmup >= 0, "--warmup must not be negative (got ", o.warmup, ")");
  DTRAIN_CHECK(o.batch >= 0, "--global-batch must be positive (got ", o.batch, ")");
  // An empty sgemm measures nothing (its GFLOP/s would print as inf) and OpenBLAS rejects < 0.
  DTRAIN_CHECK(o.sgemm_size >= 1, "--sgemm-size must be at least 1 (got ", o.sgemm_size, ")");
  DTRAIN_CHECK(!o.threads.empty(), "--threads needs at least one thread count");
  DTRAIN_CHECK(!o.recompute.empty(), "--recompute needs at least one mode");
  DTRAIN_CHECK(!o.precision.empty(), "--precision needs at least one format");
  for (int t : o.threads) {
    DTRAIN_CHECK(t > 0 && t <= model::kMaxTeamSize, "--threads: counts must be in [1, ",
                 model::kMaxTeamSize, "] (got ", t, ")");
  }
  for (int t : o.blas_threads) {
    DTRAIN_CHECK(t >= 0, "--blas-threads: counts must not be negative (got ", t, ")");
  }
  TrainBenchReport r;
  r.model_name = preset.name;
  r.model = preset.config;
  r.params = model::gpt_param_count(preset.config);
  r.batch = o.batch > 0 ? o.batch : preset.batch;
  r.seq = preset.config.context;
  r.sgemm_size = o.sgemm_size;
  r.blas_corename = model::blas_corename();
  r.bf16_gemm = model::bf16_gemm_description();
  {
    const model::Bf16Support cpu = model::bf16_support();
    r.cpu = cpu.cpu_model +
            (cpu.cpu_avx512_bf16 || cpu.cpu_amx_bf16
                 ? str(" (bf16 instructions:", cpu.cpu_avx512_bf16 ? " AVX512_BF16" : "",
                       cpu.cpu_amx_bf16 ? " AMX-BF16" : "", ")")
                 : std::string(" (no bf16 instructions: bf16 is emulated, slower "
                               "than fp32)"));
  }

  train::StepConfig config;
  config.model = preset.config;
  config.batch = r.batch;
  config.seq = r.seq;
  config.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
  config.grad_clip = 0;  // the peer does not clip
  config.init_seed = 0;
  const data::Batch batch = fixed_random_batch(r.batch, r.seq, preset.config.vocab);
  const int before = model::blas_threads();
  for (Recompute mode : o.recompute) {
    for (int t : o.threads) {
      for (model::Precision p : o.precision) {
        r.rows.push_back(bench_threads(o, config, batch, t, false, mode, p));
      }
    }
    for (int t : o.blas_threads) {
      if (t == 0) continue;
      for (model::Precision p : o.precision) {
        r.rows.push_back(bench_threads(o, config, batch, t, true, mode, p));
      }
    }
  }
  model::set_blas_threads(before);
  if (!o.peer.empty()) run_peer(o, r);
  return r;
}

void print_train_bench(std::ostream& out, const TrainBenchReport& r) {
  out << "dtrain bench train: " << r.model_name << " model (" << model::describe(r.model) << ", "
      << r.params << " params), batch " << r.batch << " x seq " << r.seq << " = " << r.batch * r.seq
      << " tokens/step\n";
  out << "  the step of bench/peers/torch_gpt_step.py: one fixed random batch, AdamW lr 3e-4,"
         " betas (0.9, 0.95), weight decay 0.1; OpenBLAS kernels "
      << r.blas_corename << "\n\n";
  out << "  CPU: " << r.cpu << "\n";
  out << "  bf16 GEMM: " << r.bf16_gemm << "\n\n";
  out << "  threads        recompute  precision   ms/step  tokens/s   fwd ms   bwd ms   opt ms  "
         "activations"
         "  GEMM share  GEMM GFLOP/s  sgemm "
      << r.sgemm_size << "^3 GFLOP/s  GEMM/peak  loss first -> last\n";
  for (const TrainBenchRow& row : r.rows) {
    const std::string who =
        std::to_string(row.threads) + (row.openblas ? " (OpenBLAS)" : " (dtrain)  ");
    out << lpad(who, 16) << lpad(std::string(name(row.recompute)), 11)
        << lpad(std::string(model::precision_name(row.precision)), 11)
        << lpad(fixed(row.ms_per_step, 2), 10) << lpad(fixed(row.tokens_per_s, 0), 10)
        << lpad(fixed(row.forward_ms, 2), 9) << lpad(fixed(row.backward_ms, 2), 9)
        << lpad(fixed(row.optimizer_ms, 2), 9)
        << lpad(format_bytes(static_cast<double>(row.activation_peak_bytes)), 13)
        << lpad(fixed(100 * row.gemm_fraction, 1) + " %", 12) << lpad(fixed(row.gemm_gflops, 1), 14)
        << lpad(fixed(row.sgemm_peak_gflops, 1), 22)
        << lpad(fixed(100 * row.gemm_vs_peak, 1) + " %", 11) << "  " << fixed(row.loss_first, 4)
        << " -> " << fixed(row.loss_last, 4) << "\n";
  }
  out << "\n  dtrain threads: ops split across a ThreadTeam, OpenBLAS single-threaded in each;"
         " OpenBLAS threads: no team, cblas_sgemm threads itself.\n"
         "  GEMM share: wall time inside sgemm / step time (second pass, every call timed);"
         " GEMM GFLOP/s: 2MNK of those calls / that time;\n"
         "  sgemm peak: cblas_sgemm N^3 with OpenBLAS at the row's thread count, best of before"
         " and after the steps.\n"
         "  recompute: what each block keeps for backward (selective rebuilds the attention"
         " scores, full reruns the block); activations: the peak of that tag over the row.\n"
         "  precision: bf16 is mixed precision (bf16 weights, gradients and stored activations,"
         " fp32 master and moments; every matrix product on bf16 operands with fp32 sums);"
         " sgemm peak and GEMM/peak stay fp32's (cblas_sgemm).\n";
  bool first = true;
  for (const TrainBenchRow& row : r.rows) {
    if (row.precision != model::Precision::bf16) continue;
    for (const TrainBenchRow& twin : r.rows) {
      if (twin.precision != model::Precision::fp32 || twin.threads != row.threads ||
          twin.openblas != row.openblas || twin.recompute != row.recompute) {
        continue;
      }
      if (first) out << "\n  bf16 tokens/s over fp32 tokens/s, same run:\n";
      first = false;
      out << "    " << row.threads << (row.openblas ? " OpenBLAS" : " dtrain") << " thread"
          << (row.threads > 1 ? "s" : "") << ", recompute " << name(row.recompute) << ": "
          << fixed(row.tokens_per_s / twin.tokens_per_s, 2) << "x\n";
    }
  }
  if (!r.peer.empty()) {
    out << "\n  PyTorch peer (bench/peers/torch_gpt_step.py; bf16: torch.autocast), same run:\n"
           "  precision  threads   ms/step  tokens/s  dtrain tokens/s  dtrain / PyTorch\n";
    for (const TrainPeerRow& p : r.peer) {
      const TrainBenchRow* ours = nullptr;
      for (const TrainBenchRow& row : r.rows) {
        if (!row.openblas && row.threads == p.threads && row.precision == p.precision &&
            row.recompute == Recompute::none) {
          ours = &row;
        }
      }
      out << lpad(std::string(model::precision_name(p.precision)), 11)
          << lpad(std::to_string(p.threads), 9) << lpad(fixed(p.ms_per_step, 2), 10)
          << lpad(fixed(p.tokens_per_s, 0), 10)
          << lpad(ours != nullptr ? fixed(ours->tokens_per_s, 0) : "-", 17)
          << lpad(ours != nullptr ? fixed(ours->tokens_per_s / p.tokens_per_s, 2) + "x" : "-", 18)
          << "\n";
    }
  }
  if (!r.peer_error.empty()) out << "\n  PyTorch peer: " << r.peer_error << "\n";
}

nlohmann::json train_bench_to_json(const TrainBenchReport& r) {
  nlohmann::json j;
  j["bench"] = "train";
  j["model"] = {{"name", r.model_name},       {"vocab", r.model.vocab},
                {"context", r.model.context}, {"layers", r.model.layers},
                {"heads", r.model.heads},     {"channels", r.model.channels},
                {"params", r.params}};
  j["batch"] = r.batch;
  j["seq"] = r.seq;
  j["tokens_per_step"] = r.batch * r.seq;
  j["blas_corename"] = r.blas_corename;
  j["bf16_gemm"] = r.bf16_gemm;
  j["cpu"] = r.cpu;
  j["sgemm_size"] = r.sgemm_size;
  nlohmann::json rows = nlohmann::json::array();
  for (const TrainBenchRow& row : r.rows) {
    rows.push_back({{"threads", row.threads},
                    {"threading", row.openblas ? "openblas" : "dtrain"},
                    {"recompute", name(row.recompute)},
                    {"precision", model::precision_name(row.precision)},
                    {"activation_peak_bytes", row.activation_peak_bytes},
                    {"ms_per_step", row.ms_per_step},
                    {"best_ms_per_step", row.best_ms_per_step},
                    {"tokens_per_s", row.tokens_per_s},
                    {"forward_ms", row.forward_ms},
                    {"backward_ms", row.backward_ms},
                    {"optimizer_ms", row.optimizer_ms},
                    {"gemm_ms_per_step", row.gemm_ms_per_step},
                    {"gemm_fraction", row.gemm_fraction},
                    {"gemm_gflop_per_step", row.gemm_gflop_per_step},
                    {"gemm_gflops", row.gemm_gflops},
                    {"step_gflops", row.step_gflops},
                    {"sgemm_peak_gflops", row.sgemm_peak_gflops},
                    {"gemm_vs_peak", row.gemm_vs_peak},
                    {"loss_first", row.loss_first},
                    {"loss_last", row.loss_last}});
  }
  j["rows"] = rows;
  nlohmann::json peer = nlohmann::json::array();
  for (const TrainPeerRow& p : r.peer) {
    peer.push_back({{"precision", model::precision_name(p.precision)},
                    {"threads", p.threads},
                    {"ms_per_step", p.ms_per_step},
                    {"tokens_per_s", p.tokens_per_s},
                    {"line", p.line}});
  }
  j["peer"] = peer;
  if (!r.peer_error.empty()) j["peer_error"] = r.peer_error;
  return j;
}

}  // namespace dtrain::bench
