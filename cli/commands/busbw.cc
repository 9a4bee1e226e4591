// `dtrain busbw`: the collectives calculator. From a size, a rank count and a measured time it
// gives nccl-tests' algbw and busbw for any collective nccl-tests reports; with a cluster, the
// ideal time and busbw on its links: a ring's, or an all-to-all's with its inter-node share
// (cost/collective_cost.h holds the formulas).
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "build_info.h"
#include "command_registry.h"
#include "dtrain/core/check.h"
#include "dtrain/core/units.h"
#include "dtrain/cost/collective_cost.h"
#include "dtrain/machine/format.h"
#include "dtrain/machine/hardware.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct BusbwFlags {
  std::string op = "all_reduce", size, cluster, nccl_algo = "ring";
  int ranks = 0;
  double time_us = 0;
  bool json = false;
};

// The ring's link: NVLink when the ranks fit one node, else the inter-node link.
const plan::Link& ring_link(const plan::Cluster& c, int ranks) {
  return ranks <= c.gpus_per_node ? c.intra_node : c.inter_node;
}

// In-network reduction (NVLink SHARP: NCCL's NVLS algorithms; InfiniBand SHARP) lets each GPU
// send and receive the data once instead of the ring's 2(n-1)/n times, so a measured busbw may
// exceed the link's bandwidth by up to 2(n-1)/n < 2x: that is noted on stderr. Past twice the
// link no algorithm moves the bytes that fast, so the time is wrong (a unit or a digit): refused.
constexpr double kMaxBusbwOverLink = 2.0;

void check_measured_busbw(const BusbwFlags& f, const plan::Link& link,
                          const plan::CollectiveBandwidth& measured) {
  const double link_bw = link.bandwidth_bytes_per_s;
  if (link_bw <= 0 || measured.busbw <= link_bw) return;
  DTRAIN_CHECK(measured.busbw <= kMaxBusbwOverLink * link_bw, "--time-us ", f.time_us,
               " gives a busbw of ", plan::format_rate(measured.busbw), ", more than ",
               plan::format_fixed(kMaxBusbwOverLink, 0), "x the ", plan::format_rate(link_bw),
               " of ", link.name, " on --cluster ", f.cluster,
               ": no algorithm moves the data that fast; check --time-us (microseconds per "
               "call) and --size");
  std::cerr << "busbw: warning: the measured busbw " << plan::format_rate(measured.busbw)
            << " exceeds " << link.name << "'s " << plan::format_rate(link_bw)
            << ": only in-network reduction (NVLS, SHARP) does that; check --time-us if the "
               "run used a ring or tree\n";
}

// An all-to-all reduces nothing: no in-network reduction makes it faster than its links. A time
// under the ideal is warned about; under half of it (past kMaxBusbwOverLink) it is refused.
void check_measured_all_to_all(const BusbwFlags& f, double ideal_s, double measured_s) {
  if (ideal_s <= 0 || measured_s >= ideal_s) return;
  DTRAIN_CHECK(ideal_s <= kMaxBusbwOverLink * measured_s, "--time-us ", f.time_us,
               " is less than 1/", plan::format_fixed(kMaxBusbwOverLink, 0), " of the ",
               plan::format_seconds(ideal_s), " an all-to-all of --size ", f.size,
               " needs on the links of --cluster ", f.cluster,
               ": no algorithm moves the data that fast; check --time-us (microseconds per "
               "call) and --size (the input per rank)");
  std::cerr << "busbw: warning: the measured time " << plan::format_seconds(measured_s)
            << " is shorter than the ideal all-to-all's " << plan::format_seconds(ideal_s)
            << " on these links; an all-to-all reduces nothing, so in-network reduction does "
               "not shorten it: check --time-us, --size (the input per rank) and the cluster's "
               "link bandwidths\n";
}

struct Ideal {
  double seconds = 0;
  nlohmann::json json;
  std::string text;
};

std::string link_line(const plan::Link& link) {
  return str(plan::format_rate(link.bandwidth_bytes_per_s), " per GPU per direction, ",
             plan::format_fixed(link.latency_us, 1), " us per step");
}

// The ring of collective_cost.h's ideal_ring_seconds on the ring's link.
Ideal ideal_ring(const BusbwFlags& f, const plan::Cluster& c, plan::NcclTestOp op, double bytes) {
  const plan::Link& link = ring_link(c, f.ranks);
  Ideal r;
  r.seconds = plan::ideal_ring_seconds(op, bytes, f.ranks, link.bandwidth_bytes_per_s,
                                       link.latency_us * 1e-6);
  const plan::CollectiveBandwidth b = r.seconds > 0
                                          ? plan::measured_bandwidth(op, bytes, f.ranks, r.seconds)
                                          : plan::CollectiveBandwidth{};
  r.json = {{"model", "ring"},
            {"link", link.name},
            {"link_bytes_per_s", link.bandwidth_bytes_per_s},
            {"latency_us", link.latency_us},
            {"seconds", r.seconds},
            {"algbw", b.algbw},
            {"busbw", b.busbw}};
  r.text = str("  ideal     ", plan::format_seconds(r.seconds), " on a ring over ", link.name, " (",
               link_line(link), "): algbw ", plan::format_rate(b.algbw), ", busbw ",
               plan::format_rate(b.busbw), "\n");
  return r;
}

// The all-to-all of collective_cost.h's ideal_all_to_all: each rank sends (N-1)/N of S, the
// blocks for other nodes over the inter-node link while the rest crosses the intra-node one.
Ideal ideal_all_to_all(const BusbwFlags& f, const plan::Cluster& c, double bytes) {
  const plan::IdealAllToAll a =
      plan::ideal_all_to_all(bytes, f.ranks, c.gpus_per_node, c.intra_node.bandwidth_bytes_per_s,
                             c.intra_node.latency_us * 1e-6, c.inter_node.bandwidth_bytes_per_s,
                             c.inter_node.latency_us * 1e-6);
  const plan::Link& link = a.inter_node_bound ? c.inter_node : c.intra_node;
  Ideal r;
  r.seconds = a.seconds;
  const plan::CollectiveBandwidth b =
      r.seconds > 0
          ? plan::measured_bandwidth(plan::NcclTestOp::alltoall, bytes, f.ranks, r.seconds)
          : plan::CollectiveBandwidth{};
  r.json = {{"model", "all_to_all"},
            {"link", link.name},
            {"link_bytes_per_s", link.bandwidth_bytes_per_s},
            {"latency_us", link.latency_us},
            {"intra_node_bytes", a.slowest.intra_node_bytes},
            {"inter_node_bytes", a.slowest.inter_node_bytes},
            {"seconds", r.seconds},
            {"algbw", b.algbw},
            {"busbw", b.busbw}};
  const int n = f.ranks;
  const std::string sent = str(n - 1, "/", n, " of S");
  if (a.slowest.inter_node_peers == 0) {
    r.text = str("  ideal     ", plan::format_seconds(r.seconds),
                 " for an all-to-all inside one node: each rank sends ", sent, " over ",
                 c.intra_node.name, " (", link_line(c.intra_node), "): algbw ",
                 plan::format_rate(b.algbw), ", busbw ", plan::format_rate(b.busbw), "\n");
  } else {
    r.text = str("  ideal     ", plan::format_seconds(r.seconds),
                 " for an all-to-all: each rank sends ", sent, ", ", a.slowest.inter_node_peers,
                 "/", n, " to other nodes over ", c.inter_node.name, " (", link_line(c.inter_node),
                 ") while ", a.slowest.intra_node_peers, "/", n, " stays on ", c.intra_node.name,
                 " (", link_line(c.intra_node), "); ", link.name, " sets the time: algbw ",
                 plan::format_rate(b.algbw), ", busbw ", plan::format_rate(b.busbw), "\n");
  }
  return r;
}

void run_busbw(const BusbwFlags& f, CLI::App* cmd) {
  const auto op = plan::parse_nccl_test_op(f.op);
  DTRAIN_CHECK(op.has_value(), "--op must be one of ", plan::kNcclTestOpNames, "; got '", f.op,
               "'");
  const auto bytes = static_cast<double>(parse_bytes(f.size, "--size"));
  DTRAIN_CHECK(bytes > 0, "--size must be positive, got ", f.size);
  const bool timed = cmd->count("--time-us") > 0;
  const bool linked = cmd->count("--cluster") > 0;
  DTRAIN_CHECK(timed || linked,
               "give --time-us (a measured time: algbw and busbw) or --cluster (the ideal time "
               "on its links), or both");
  const auto algo = plan::parse_nccl_algo(f.nccl_algo);
  DTRAIN_CHECK(algo.has_value(), "--nccl-algo must be one of ", plan::kNcclAlgoNames, "; got '",
               f.nccl_algo, "'");
  const bool in_network = *op == plan::NcclTestOp::all_reduce &&
                          (*algo == plan::NcclAlgo::nvls || *algo == plan::NcclAlgo::nvls_tree);
  DTRAIN_CHECK(!in_network || !linked, "--nccl-algo ", plan::name(*algo),
               " with --cluster: the ideal time is a ring's, and NVLS reduces inside the switch; "
               "price a measured time (--time-us) alone");
  const double factor = plan::bus_bandwidth_factor(*op, f.ranks, *algo);
  nlohmann::json j = {{"op", plan::name(*op)},
                      {"bytes", bytes},
                      {"ranks", f.ranks},
                      {"bus_factor", factor},
                      {"nccl_algo", plan::name(*algo)}};
  std::string text = str(
      "dtrain busbw: ", plan::name(*op), " of S = ", format_bytes(bytes), " on ", f.ranks,
      " ranks; busbw = algbw x ", plan::format_fixed(factor, 4),
      in_network ? str(" = (n-1)/(n+1), the in-network-reduction factor nccl-tests' pull request "
                       "#239 applies when NCCL_ALGO is NVLS or NVLSTREE (nccl-tests' master keeps "
                       "2(n-1)/n = ",
                       plan::format_fixed(plan::bus_bandwidth_factor(*op, f.ranks), 4), ")\n")
                 : std::string(" (nccl-tests' PERFORMANCE.md)\n"));
  if (timed) {
    const plan::CollectiveBandwidth b =
        plan::measured_bandwidth(*op, bytes, f.ranks, f.time_us * 1e-6, *algo);
    j["measured"] = {{"seconds", f.time_us * 1e-6}, {"algbw", b.algbw}, {"busbw", b.busbw}};
    text += str("  measured  ", plan::format_seconds(f.time_us * 1e-6), ": algbw ",
                plan::format_rate(b.algbw), ", busbw ", plan::format_rate(b.busbw), "\n");
  }
  if (linked) {
    const plan::Cluster c = plan::parse_cluster(f.cluster);
    DTRAIN_CHECK(f.ranks <= c.world(), "--ranks ", f.ranks, " is more than the ", c.world(),
                 " GPUs of --cluster ", f.cluster, " (", c.nodes, " x ", c.gpus_per_node,
                 "); give at most ", c.world(), " ranks, or a larger cluster");
    const Ideal ideal = *op == plan::NcclTestOp::alltoall ? ideal_all_to_all(f, c, bytes)
                                                          : ideal_ring(f, c, *op, bytes);
    j["ideal"] = ideal.json;
    text += ideal.text;
    if (timed) {
      const double measured_s = f.time_us * 1e-6;
      if (*op == plan::NcclTestOp::alltoall) {
        check_measured_all_to_all(f, ideal.seconds, measured_s);
      } else {
        check_measured_busbw(f, ring_link(c, f.ranks),
                             plan::measured_bandwidth(*op, bytes, f.ranks, measured_s));
      }
      j["share_of_ideal"] = ideal.seconds / measured_s;
      text += str("  the measured time is ", plan::format_percent(ideal.seconds / measured_s),
                  " efficient against the ideal\n");
    }
  }
  text += "  units: S in bytes (KiB = 2^10, KB = 10^3); rates in 10^9 bytes per second\n";
  if (f.json) {
    std::cout << with_build(j).dump(2) << "\n";
  } else {
    std::cout << text;
  }
}

void add_busbw(CLI::App& app) {
  auto f = std::make_shared<BusbwFlags>();
  CLI::App* cmd = app.add_subcommand(
      "busbw",
      "Collectives calculator: algbw and busbw (nccl-tests' definitions) from a size, rank count "
      "and measured time, and the ideal time on a cluster's links (a ring's; an all-to-all's own)");
  cmd->add_option("--op", f->op, std::string("Collective: ") + std::string(plan::kNcclTestOpNames))
      ->capture_default_str();
  cmd->add_option("--size", f->size,
                  "S as nccl-tests defines it (the buffer for all_reduce, broadcast, reduce; the "
                  "input per rank for reduce_scatter; the output per rank for all_gather and "
                  "alltoall), with a unit: 1GiB, 512MB, 4096B")
      ->required();
  cmd->add_option("--ranks", f->ranks, "Ranks in the collective")
      ->required()
      ->check(whole_number(1, plan::kMaxGpus));
  cmd->add_option("--time-us", f->time_us, "Measured time of one call, in microseconds")
      ->check(real_number(0, 1e15, true));
  cmd->add_option("--cluster", f->cluster,
                  "NODESxGPUSxTYPE or a cluster .json file: the ideal time on its links (a "
                  "ring: NVLink when the ranks fit one node, else the inter-node link; alltoall: "
                  "the blocks for other nodes across nodes, the rest inside the node)");
  cmd->add_option("--nccl-algo", f->nccl_algo,
                  std::string("The algorithm NCCL ran (NCCL_ALGO's names: ") +
                      std::string(plan::kNcclAlgoNames) +
                      "). nvls and nvlstree (in-network reduction) make the all_reduce factor "
                      "(n-1)/(n+1), as nccl-tests' pull request #239 does (not in its master, "
                      "which keeps 2(n-1)/n); the other algorithms change no factor")
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "Print the same figures as JSON");
  cmd->callback([f, cmd] { run_busbw(*f, cmd); });
}

const CommandRegistration kRegistration("", add_busbw);

}  // namespace
}  // namespace dtrain::cli
