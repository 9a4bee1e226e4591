// The cluster file from the measured links and CPU: built, checked by plan's reader, written
// atomically; and the compute table calibrate prints.
#include "dtrain/calibrate/cluster_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iomanip>

#include "dtrain/core/check.h"
#include "dtrain/core/system_memory.h"
#include "dtrain/core/units.h"
#include "dtrain/machine/format.h"

namespace dtrain::calibrate {
namespace {

nlohmann::json link_detail(const LinkMeasurement& m) {
  return {{"latency_pair", {m.ping_rank, m.pong_rank}},
          {"latency_us", m.latency_us},
          {"pairs_at_once", m.pairs},
          {"bandwidth_bytes_per_s", m.bandwidth_bytes_per_s},
          {"single_pair_bandwidth_bytes_per_s", m.single_pair_bandwidth_bytes_per_s}};
}

}  // namespace

void use_measured_cpu(plan::Cluster& c, plan::MeasuredRates measured, int threads,
                      int ranks_per_node) {
  double peak = 0;
  for (const plan::GemmSample& s : measured.gemm) {
    if (s.precision == plan::Precision::fp32 && s.threads == threads) {
      peak = std::max(peak, 2 * s.m * s.n * s.k / s.seconds);
    }
  }
  c.gpu.name = measured.cpu;
  c.gpu.peak_flops = peak;
  c.gpu.compute_efficiency = 1;
  c.gpu.rates = {};  // a GPU's efficiency rates do not describe this CPU
  if (const auto memory = available_memory()) {
    c.gpu.memory_bytes = static_cast<double>(memory->bytes) / ranks_per_node;
  }
  c.gpu.measured = std::move(measured);
}

nlohmann::json cluster_file(plan::Cluster c, const Calibration& result, const Provenance& how) {
  c.nodes = result.nodes;
  c.gpus_per_node = result.ranks_per_node;
  c.intra_node = {"measured intra-node", result.intra_node.bandwidth_bytes_per_s,
                  result.intra_node.latency_us};
  c.inter_node = {"measured inter-node", result.inter_node.bandwidth_bytes_per_s,
                  result.inter_node.latency_us};
  plan::validate(c);
  nlohmann::json file = plan::to_json(c);
  // Read back by the reader `plan --cluster` uses before it is written.
  try {
    (void)plan::cluster_from_json(file, how.source);
  } catch (const Error& e) {
    throw Error(str(
        "calibrate: the measured figures would make a cluster file that plan refuses: ", e.what(),
        "; nothing was written. Calibrate again on a quiet machine (no other "
        "work on its cores), with a larger --size (now ",
        format_bytes(static_cast<double>(how.options.bandwidth_bytes)),
        ") or more --seconds "
        "per trial"));
  }
  file["calibration"] = {{"backend", how.backend},
                         {"ranks", result.world},
                         {"nodes_from", result.node_source},
                         {"hosts", result.hosts},
                         {"latency_bytes", how.options.latency_bytes},
                         {"bandwidth_bytes", how.options.bandwidth_bytes},
                         {"gpu_from_preset", how.gpu_from_preset},
                         {"compute_seconds", how.compute_seconds},
                         {"compute_passes", how.compute_passes},
                         {"intra_node", link_detail(result.intra_node)},
                         {"inter_node", link_detail(result.inter_node)}};
  return file;
}

void write_cluster_file(const std::string& path, const nlohmann::json& file,
                        const std::string& flag) {
  std::ofstream out(path);
  DTRAIN_CHECK(out.good(), flag, ": cannot write '", path, "'");
  out << file.dump(2) << "\n";
  out.close();  // a full disk shows when the bytes leave the buffer
  DTRAIN_CHECK(!out.fail(), flag, ": writing '", path, "' failed (", std::strerror(errno), ")");
}

void print_compute_rates(std::ostream& out, const plan::GpuSpec& gpu, int threads, double seconds) {
  const plan::MeasuredRates& m = gpu.measured;
  out << "\ncompute: " << m.cpu << ", " << m.cores << " cores (measured in " << std::fixed
      << std::setprecision(1) << seconds << " s); peak_flops = fastest fp32 product on " << threads
      << " thread" << (threads == 1 ? "" : "s") << " = " << std::setprecision(1)
      << gpu.peak_flops * 1e-9 << " GFLOP/s\n\n"
      << std::left << std::setw(28) << "product (m x n x k)" << std::right << std::setw(10)
      << "precision" << std::setw(9) << "threads" << std::setw(12) << "GFLOP/s"
      << "\n";
  for (const plan::GemmSample& s : m.gemm) {
    // The grid's diagonal (m = n = k, or the largest m) keeps the table short; the file has all.
    const bool diagonal = s.m == s.n && s.n == s.k;
    const bool largest = s.m >= 4096 && s.n == s.k && s.n >= 1024;
    if (!diagonal && !largest) continue;
    out << std::left << std::setw(28) << str(int64_t(s.m), " x ", int64_t(s.n), " x ", int64_t(s.k))
        << std::right << std::setw(10) << plan::name(s.precision) << std::setw(9) << s.threads
        << std::setw(12) << std::setprecision(2) << 2 * s.m * s.n * s.k / s.seconds * 1e-9;
    // The same product on operands reused from cache, where the (sparser) warm grid has it.
    auto warm =
        std::find_if(m.gemm_warm.begin(), m.gemm_warm.end(), [&](const plan::GemmSample& w) {
          return w.precision == s.precision && w.threads == s.threads && w.m == s.m && w.n == s.n &&
                 w.k == s.k;
        });
    if (warm == m.gemm_warm.end()) {
      out << std::setw(12) << "-";
    } else {
      out << std::setw(12) << 2 * s.m * s.n * s.k / warm->seconds * 1e-9;
    }
    out << "\n";
  }
  auto kib = [](double bytes) {
    return bytes > 0 ? str(int64_t(bytes / 1024), " KiB") : "unknown";
  };
  out << "caches: L1d " << kib(m.cache.l1d_bytes) << ", L2 " << kib(m.cache.l2_bytes)
      << " per core; L3 " << kib(m.cache.l3_bytes) << " shared by " << m.cache.l3_shared_by
      << " core" << (m.cache.l3_shared_by == 1 ? "" : "s") << "\n";
  out << "\n"
      << std::left << std::setw(24) << "kernel" << std::right << std::setw(10) << "GB/s"
      << std::setw(12) << "us per call" << std::setw(10) << "B/elem"
      << "\n";
  for (const plan::KernelRate& k : m.kernels) {
    out << std::left << std::setw(24) << plan::name(k.op) << std::right << std::setw(10)
        << std::setprecision(2) << k.bytes_per_s * 1e-9 << std::setw(12) << k.call_s * 1e6
        << std::setw(10) << std::setprecision(0) << plan::kernel_bytes_per_element(k.op) << "\n";
  }
  out << "\n"
      << std::left << std::setw(16) << "collective" << std::setw(14) << "algorithm" << std::right
      << std::setw(7) << "ranks" << std::setw(12) << "latency us" << std::setw(10) << "GB/s"
      << "\n";
  for (const plan::CollectiveRate& c : m.collectives) {
    out << std::left << std::setw(16) << c.collective << std::setw(14) << c.algorithm << std::right
        << std::setw(7) << c.ranks << std::setw(12) << std::setprecision(1) << c.latency_s * 1e6
        << std::setw(10) << std::setprecision(2) << c.bytes_per_s * 1e-9 << "\n";
  }
  out << "\ncompute beside a communication thread: x" << std::setprecision(3) << m.comm_interference
      << " (256^3 fp32 products while 2 thread ranks ring-all-reduce 4 MiB)\n"
      << "compute with every core busy: x" << m.corun_slowdown << " (512 x 512 x 256 fp32 "
      << "products on one core while each other core runs them too)\n"
      << "a collective's wait for its partner with more threads than cores: "
      << std::setprecision(2) << m.oversubscribed_wait_s * 1e3 << " ms (" << 2 * m.cores
      << " thread ranks multiplying and all-reducing 4 KiB on " << m.cores << " cores)\n"
      << "products: median of 3+ calls per shape, on operands from memory (GFLOP/s) and reused "
         "in cache (warm); kernels: call_s + bytes / (GB/s) fitted by "
         "least squares over its sizes (4 KiB to 16 MiB; --quick: to 256 KiB); collectives: "
         "latency + bytes moved per rank / "
         "(GB/s) on thread ranks (the intra_node link class)\n";
}

}  // namespace dtrain::calibrate
