// run_dp_bench: the single-rank reference, then plain DP and each ZeRO stage on N ranks of the
// threads backend, then (optionally) the PyTorch peer through popen; the table and JSON.
#include "bench/dp_bench.h"
#include "bench/bench_util.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <mutex>
#include <sstream>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/core/timer.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "dtrain/model/gemm.h"
#include "dtrain/report/layout_report.h"
#include "dtrain/run/trainer.h"

namespace dtrain::bench {
namespace {

constexpr float kPeerLr = 3e-4f;

// B rows of uniform random tokens with next-token targets (the peer's kind of data).
data::Batch random_batch(int64_t B, int64_t T, int64_t V) {
  Rng rng(1234);
  data::Batch batch;
  batch.resize(B, T);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> row(static_cast<size_t>(T + 1));
    for (int32_t& t : row) t = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));
    for (int64_t t = 0; t < T; ++t) {
      batch.inputs[static_cast<size_t>(b * T + t)] = row[static_cast<size_t>(t)];
      batch.targets[static_cast<size_t>(b * T + t)] = row[static_cast<size_t>(t + 1)];
    }
  }
  return batch;
}

train::StepConfig step_config(const model::GptConfig& m, int64_t B, int64_t T) {
  train::StepConfig c;
  c.model = m;
  c.batch = B;
  c.seq = T;
  c.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
  c.grad_clip = 0;  // the peer does not clip
  c.init_seed = 0;
  return c;
}

// The engine on `ranks` DP ranks of the threads backend (1: the mesh with every axis of size 1,
// the single-rank run of `dtrain train`) at ZeRO stage `zero`: the median over the timed steps
// of the slowest rank's step.
DpBenchRow run_layout(const DpBenchOptions& o, const model::GptConfig& m, int64_t T, int ranks,
                      int zero, const std::string& dp_algo) {
  train::LayoutOptions layout;
  layout.dp = ranks;
  layout.zero_stage = zero;
  layout.bucket_bytes = o.bucket_bytes;
  layout.dp_algorithm = *comm::parse_algorithm(dp_algo);
  const train::EngineConfig c =
      train::make_engine_config(step_config(m, o.batch_per_rank * ranks, T), layout);
  const data::Batch batch = random_batch(c.step.batch, T, m.vocab);
  const auto total = static_cast<size_t>(o.warmup + o.steps);
  std::vector<std::vector<double>> ms(static_cast<size_t>(ranks), std::vector<double>(total));
  DpBenchRow row;
  row.ranks = ranks;
  row.dp_algo = dp_algo;
  row.zero_stage = ranks == 1 ? -1 : zero;
  comm::threads::run_ranks(ranks, [&](comm::Communicator& world) {
    train::Engine engine(c, world);
    std::vector<double>& mine = ms[static_cast<size_t>(world.rank())];
    for (size_t i = 0; i < total; ++i) {
      Stopwatch watch;
      const float loss = engine.train_step(batch, kPeerLr).loss;
      mine[i] = watch.elapsed_us() * 1e-3;
      if (world.rank() == 0 && i == 0) row.loss_first = loss;
      if (world.rank() == 0) row.loss_last = loss;
    }
    if (world.rank() != 0) return;
    const double steps = static_cast<double>(engine.steps());
    row.comm_ms_per_step = engine.dp_comm_us() * 1e-3 / steps;
    row.overlap_share = engine.dp_comm_us() > 0 ? engine.dp_hidden_us() / engine.dp_comm_us() : 0;
    row.bytes_moved_per_step = engine.traffic().dp / steps;
  });
  std::vector<double> slowest;
  for (size_t i = static_cast<size_t>(o.warmup); i < total; ++i) {
    double worst = 0;
    for (const auto& rank : ms) worst = std::max(worst, rank[i]);
    slowest.push_back(worst);
  }
  row.ms_per_step = median(slowest);
  row.best_ms_per_step = *std::min_element(slowest.begin(), slowest.end());
  row.tokens_per_s = static_cast<double>(c.step.batch * T) / (row.ms_per_step * 1e-3);
  return row;
}

PeerResult run_peer(const DpBenchOptions& o, const model::GptConfig& m) {
  PeerResult p;
  p.ran = true;
  const std::string command =
      o.python + " " + o.peer + " --mode ddp --np " + std::to_string(o.ranks) + " --vocab " +
      std::to_string(m.vocab) + " --ctx " + std::to_string(m.context) + " --layers " +
      std::to_string(m.layers) + " --heads " + std::to_string(m.heads) + " --hidden " +
      std::to_string(m.channels) + " --batch " + std::to_string(o.batch_per_rank) + " 2>&1";
  const std::optional<std::string> ran = command_output(command);
  if (!ran) {
    p.status = "could not start: " + command;
    return p;
  }
  const std::string& output = *ran;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("bench=torch_gpt", 0) != 0) continue;
    p.lines.push_back(line);
    const std::string mode = field(line, "mode");
    if (mode == "single" && field(line, "threads") == "1") {
      p.single_tokens_per_s = std::stod(field(line, "tokens_per_s"));
    } else if (mode == "ddp" && field(line, "status") == "ok") {
      p.ddp_tokens_per_s = std::stod(field(line, "tokens_per_s"));
      p.ddp_ms_per_step = std::stod(field(line, "ms_per_step"));
      const std::string eff = field(line, "scaling_efficiency");
      if (!eff.empty()) p.ddp_efficiency = std::stod(eff);
    }
  }
  p.status = p.ddp_tokens_per_s > 0 ? "ok" : "no DDP result; its output:\n" + output;
  return p;
}

}  // namespace

double dp_bench_memory_bytes(const DpBenchOptions& o) {
  const model::GptPreset& preset = model::gpt_preset(o.model);
  const train::StepConfig step =
      step_config(preset.config, o.batch_per_rank * o.ranks, preset.config.context);
  train::LayoutOptions layout;
  layout.dp = o.ranks;
  return train::planned_rank_peak_bytes(train::make_engine_config(step, layout), 0) * o.ranks;
}

DpBenchReport run_dp_bench(const DpBenchOptions& o) {
  const model::GptPreset& preset = model::gpt_preset(o.model);
  DTRAIN_CHECK(o.ranks >= 2, "--ranks must be at least 2 (got ", o.ranks, ")");
  DTRAIN_CHECK(o.batch_per_rank > 0, "--batch-per-rank must be positive (got ", o.batch_per_rank,
               ")");
  DTRAIN_CHECK(o.steps > 0, "--steps must be positive (got ", o.steps, ")");
  DTRAIN_CHECK(o.warmup >= 0, "--warmup must not be negative (got ", o.warmup, ")");
  DTRAIN_CHECK(o.rounds >= 1, "--rounds must be at least 1 (got ", o.rounds, ")");
  DTRAIN_CHECK(o.bucket_bytes > 0, "--bucket-size must be positive (got ", o.bucket_bytes, ")");
  DTRAIN_CHECK(!o.dp_algos.empty(), "--dp-algo: give at least one of auto, ring, direct");
  for (const std::string& a : o.dp_algos) {
    DTRAIN_CHECK(a == "auto" || a == "ring" || a == "direct", "--dp-algo \"", a,
                 "\" is not one of auto, ring, direct");
  }
  for (int z : o.zero_stages) {
    DTRAIN_CHECK(z >= 1 && z <= 3, "--zero: stages must be 1, 2 or 3 (got ", z, ")");
  }
  DpBenchReport r;
  r.model_name = preset.name;
  r.model = preset.config;
  r.params = model::gpt_param_count(preset.config);
  r.batch_per_rank = o.batch_per_rank;
  r.seq = preset.config.context;
  r.ranks = o.ranks;
  r.rounds = o.rounds;
  r.dp_algos = o.dp_algos;
  const int before = model::blas_threads();
  model::set_blas_threads(1);  // one core per rank, as the peer's ranks
  for (int round = 0; round < o.rounds; ++round) {
    std::vector<DpBenchRow> rows;
    rows.push_back(run_layout(o, r.model, r.seq, 1, 0, "ring"));
    rows.back().dp_algo.clear();
    for (const std::string& a : o.dp_algos) {
      rows.push_back(run_layout(o, r.model, r.seq, o.ranks, 0, a));
      for (int z : o.zero_stages) rows.push_back(run_layout(o, r.model, r.seq, o.ranks, z, a));
    }
    if (round == 0) r.rows = rows;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].ms_per_step < r.rows[i].ms_per_step) r.rows[i] = rows[i];
    }
  }
  model::set_blas_threads(before);
  const size_t per_algo = 1 + o.zero_stages.size();
  for (size_t k = 0; k < o.dp_algos.size(); ++k) {
    r.dp_efficiency_by_algo.push_back(r.rows[1 + k * per_algo].tokens_per_s /
                                      (o.ranks * r.rows[0].tokens_per_s));
  }
  r.dp_efficiency = r.dp_efficiency_by_algo.front();
  if (!o.peer.empty()) r.peer = run_peer(o, r.model);
  return r;
}

void print_dp_bench(std::ostream& out, const DpBenchReport& r) {
  std::string algos;
  for (const std::string& a : r.dp_algos) algos += (algos.empty() ? "" : ", ") + a;
  out << "dtrain bench dp: " << r.model_name << " model (" << model::describe(r.model) << ", "
      << r.params << " params), " << r.batch_per_rank << " sequences x " << r.seq
      << " tokens per rank (weak scaling), threads backend, 1 compute thread per rank, DP syncs "
      << algos << "; best of " << r.rounds << " rounds\n\n";
  out << "  layout              ms/step   best  tokens/s   vs plain DP   comm ms  hidden   "
         "DP bytes/step  loss first -> last\n";
  const DpBenchRow& plain = r.rows[1];
  const bool several = r.dp_algos.size() > 1;
  for (const DpBenchRow& row : r.rows) {
    std::string who = row.zero_stage < 0    ? "1 rank (serial)"
                      : row.zero_stage == 0 ? std::to_string(row.ranks) + " ranks, DP"
                                            : std::to_string(row.ranks) + " ranks, ZeRO-" +
                                                  std::to_string(row.zero_stage);
    if (several && row.zero_stage >= 0) who += " " + row.dp_algo;
    out << "  " << who << std::string(18 - std::min<size_t>(18, who.size()), ' ')
        << lpad(fixed(row.ms_per_step, 2), 9) << lpad(fixed(row.best_ms_per_step, 2), 7)
        << lpad(fixed(row.tokens_per_s, 0), 10)
        << lpad(row.zero_stage < 0 ? "" : fixed(row.ms_per_step / plain.ms_per_step, 3) + "x", 14)
        << lpad(row.zero_stage < 0 ? "" : fixed(row.comm_ms_per_step, 2), 10)
        << lpad(row.zero_stage < 0 ? "" : fixed(100 * row.overlap_share, 0) + " %", 8)
        << lpad(row.zero_stage < 0 ? "" : fixed(row.bytes_moved_per_step, 0), 16) << "  "
        << fixed(row.loss_first, 4) << " -> " << fixed(row.loss_last, 4) << "\n";
  }
  const size_t per_algo = (r.rows.size() - 1) / std::max<size_t>(1, r.dp_algos.size());
  for (size_t k = 0; k < r.dp_algos.size(); ++k) {
    out << (k == 0 ? "\n" : "") << "  DP efficiency (" << r.ranks << " ranks"
        << (several ? ", " + r.dp_algos[k] : std::string())
        << "): " << fixed(r.dp_efficiency_by_algo[k], 3) << " = "
        << fixed(r.rows[1 + k * per_algo].tokens_per_s, 0) << " tokens/s / (" << r.ranks << " x "
        << fixed(r.rows[0].tokens_per_s, 0) << ")\n";
  }
  if (r.peer.ran) {
    if (r.peer.status == "ok") {
      out << "  PyTorch DDP (peer, gloo, same run): " << fixed(r.peer.ddp_tokens_per_s, 0)
          << " tokens/s, " << fixed(r.peer.ddp_ms_per_step, 2) << " ms/step, efficiency "
          << fixed(r.peer.ddp_efficiency, 3) << " (single process "
          << fixed(r.peer.single_tokens_per_s, 0) << " tokens/s)\n";
      out << "  dtrain / PyTorch: efficiency " << fixed(r.dp_efficiency / r.peer.ddp_efficiency, 3)
          << "x, DP tokens/s " << fixed(plain.tokens_per_s / r.peer.ddp_tokens_per_s, 2) << "x\n";
    } else {
      out << "  PyTorch peer: " << r.peer.status << "\n";
    }
  }
  out << "\n  step time: median over steps of the slowest rank's step (as the peer); hidden: share"
         " of the communication thread's time inside forward/backward compute; DP bytes: what a"
         " rank moves across ranks (sent, or read in place from a peer's memory by direct).\n";
}

nlohmann::json dp_bench_to_json(const DpBenchReport& r) {
  nlohmann::json j;
  j["bench"] = "dp";
  j["model"] = {{"name", r.model_name},       {"vocab", r.model.vocab},
                {"context", r.model.context}, {"layers", r.model.layers},
                {"heads", r.model.heads},     {"channels", r.model.channels},
                {"params", r.params}};
  j["batch_per_rank"] = r.batch_per_rank;
  j["seq"] = r.seq;
  j["ranks"] = r.ranks;
  j["rounds"] = r.rounds;
  nlohmann::json rows = nlohmann::json::array();
  for (const DpBenchRow& row : r.rows) {
    rows.push_back({{"ranks", row.ranks},
                    {"zero_stage", row.zero_stage},
                    {"ms_per_step", row.ms_per_step},
                    {"best_ms_per_step", row.best_ms_per_step},
                    {"tokens_per_s", row.tokens_per_s},
                    {"comm_ms_per_step", row.comm_ms_per_step},
                    {"overlap_share", row.overlap_share},
                    {"bytes_moved_per_step", row.bytes_moved_per_step},
                    {"loss_first", row.loss_first},
                    {"loss_last", row.loss_last},
                    {"dp_algo", row.dp_algo}});
  }
  j["rows"] = rows;
  j["dp_efficiency"] = r.dp_efficiency;
  j["dp_algos"] = r.dp_algos;
  j["dp_efficiency_by_algo"] = r.dp_efficiency_by_algo;
  if (r.peer.ran) {
    j["peer"] = {{"status", r.peer.status},
                 {"single_tokens_per_s", r.peer.single_tokens_per_s},
                 {"ddp_tokens_per_s", r.peer.ddp_tokens_per_s},
                 {"ddp_ms_per_step", r.peer.ddp_ms_per_step},
                 {"ddp_efficiency", r.peer.ddp_efficiency},
                 {"lines", r.peer.lines}};
  }
  return j;
}

}  // namespace dtrain::bench
