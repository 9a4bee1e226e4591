// calibrate_links: node identity from hostnames (each emulated or real node has its own), then
// one phase per (link class, latency or bandwidth); ranks outside a phase's pairs just wait at
// the barrier that ends it, so phases never overlap.
#include "dtrain/calibrate/link_calibration.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "dtrain/comm/collectives.h"
#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"

namespace dtrain::calibrate {

using comm::Algorithm;
using comm::Communicator;
using comm::ReduceOp;

namespace {

constexpr int kTag = 120;
constexpr int kHostWords = 8;  // 64 bytes of hostname, carried as int64 words

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Node index of every rank: first appearance order of hostnames, or fixed blocks.
std::vector<int> node_of_ranks(Communicator& comm, const CalibrationOptions& o, Calibration* out) {
  const int n = comm.size();
  char name[kHostWords * 8] = {};
  gethostname(name, sizeof(name) - 1);
  int64_t mine[kHostWords];
  std::memcpy(mine, name, sizeof(mine));
  std::vector<int64_t> all(static_cast<size_t>(kHostWords * n));
  all_gather(comm, mine, all.data(), kHostWords * n, Algorithm::naive);
  std::vector<std::string> host(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    char h[kHostWords * 8 + 1] = {};
    std::memcpy(h, all.data() + kHostWords * r, kHostWords * 8);
    host[r] = h;
  }
  std::vector<int> node(static_cast<size_t>(n));
  if (o.ranks_per_node > 0) {
    DTRAIN_CHECK(n % o.ranks_per_node == 0, "--ranks-per-node ", o.ranks_per_node,
                 " does not divide the ", n, " ranks into whole nodes");
    for (int r = 0; r < n; ++r) node[r] = r / o.ranks_per_node;
    out->ranks_per_node = o.ranks_per_node;
    out->node_source = "--ranks-per-node";
    for (int k = 0; k < n / o.ranks_per_node; ++k) out->hosts.push_back(host[k * o.ranks_per_node]);
  } else {
    std::map<std::string, int> index;
    std::vector<int> per_node;
    for (int r = 0; r < n; ++r) {
      auto [it, added] = index.emplace(host[r], static_cast<int>(index.size()));
      if (added) {
        out->hosts.push_back(host[r]);
        per_node.push_back(0);
      }
      node[r] = it->second;
      ++per_node[it->second];
    }
    for (size_t k = 1; k < per_node.size(); ++k) {
      DTRAIN_CHECK(per_node[k] == per_node[0], "calibrate: hosts run different numbers of ranks (",
                   out->hosts[0], ": ", per_node[0], ", ", out->hosts[k], ": ", per_node[k],
                   "); pass --ranks-per-node");
    }
    out->ranks_per_node = per_node[0];
    out->node_source = "hostname";
  }
  out->nodes = n / out->ranks_per_node;
  return node;
}

// Round trips between `a` and `b`; returns the one-way latency (half the median round trip).
double ping_pong_us(Communicator& comm, int a, int b, const CalibrationOptions& o) {
  const int r = comm.rank();
  std::vector<char> buf(static_cast<size_t>(std::max<int64_t>(o.latency_bytes, 1)));
  std::vector<double> trials;
  comm.barrier();
  if (r == a || r == b) {
    const int peer = r == a ? b : a;
    for (int t = 0; t < o.trials + 1; ++t) {  // the first trial warms the connection up
      Stopwatch clock;
      for (int i = 0; i < o.latency_iterations; ++i) {
        if (r == a) {
          comm.send(buf.data(), o.latency_bytes, peer, kTag);
          comm.recv(buf.data(), o.latency_bytes, peer, kTag);
        } else {
          comm.recv(buf.data(), o.latency_bytes, peer, kTag);
          comm.send(buf.data(), o.latency_bytes, peer, kTag);
        }
      }
      if (t > 0) trials.push_back(clock.elapsed_us() / o.latency_iterations / 2);
    }
  }
  // `a`'s figure is the result everywhere (collectives carry float32 and int64).
  float us = static_cast<float>(median_of(trials));
  broadcast(comm, &us, 1, a);
  return us;
}

// Every pair (x, partner[x]) exchanges `bytes` both ways, `iterations` times, all pairs at once.
// Returns bytes per second per rank and direction of the slowest rank.
double exchange_bandwidth(Communicator& comm, const std::vector<int>& partner,
                          const CalibrationOptions& o, int iterations) {
  const int r = comm.rank();
  std::vector<char> out(static_cast<size_t>(o.bandwidth_bytes), 1);
  std::vector<char> in(static_cast<size_t>(o.bandwidth_bytes));
  std::vector<double> trials;
  for (int t = 0; t < o.trials + 1; ++t) {
    comm.barrier();
    Stopwatch clock;
    if (partner[r] >= 0 && o.one_way) {
      for (int i = 0; i < iterations; ++i) {
        if (r < partner[r]) {
          comm.send(out.data(), o.bandwidth_bytes, partner[r], kTag);
        } else {
          comm.recv(in.data(), o.bandwidth_bytes, partner[r], kTag);
        }
      }
    } else if (partner[r] >= 0) {
      for (int i = 0; i < iterations; ++i) {
        comm.send_recv(out.data(), o.bandwidth_bytes, partner[r], in.data(), o.bandwidth_bytes,
                       partner[r], kTag);
      }
    }
    float seconds = partner[r] >= 0 ? static_cast<float>(clock.elapsed_s()) : 0.0f;
    all_reduce(comm, &seconds, 1, ReduceOp::max);  // the slowest pair sets the figure
    if (t > 0) trials.push_back(seconds);
  }
  const double s = median_of(trials);
  return s > 0 ? static_cast<double>(o.bandwidth_bytes) * iterations / s : 0;
}

// How many exchanges make one bandwidth trial last about o.bandwidth_seconds: time one.
int iterations_for(Communicator& comm, const std::vector<int>& partner,
                   const CalibrationOptions& o) {
  CalibrationOptions one = o;
  one.trials = 1;
  const double rate = exchange_bandwidth(comm, partner, one, 1);
  const double per_exchange_s = rate > 0 ? static_cast<double>(o.bandwidth_bytes) / rate : 1;
  return std::clamp(static_cast<int>(o.bandwidth_seconds / per_exchange_s), 1, 10000);
}

LinkMeasurement measure(Communicator& comm, const std::vector<int>& node, bool inter,
                        const CalibrationOptions& o) {
  const int n = comm.size();
  LinkMeasurement m;
  // Latency pair: rank 0 and the first rank on its node (intra) or on another node (inter).
  int pong = -1;
  for (int q = 1; q < n && pong < 0; ++q) {
    if ((node[q] != node[0]) == inter) pong = q;
  }
  if (pong < 0) return m;
  m.measured = true;
  m.ping_rank = 0;
  m.pong_rank = pong;
  m.latency_us = ping_pong_us(comm, 0, pong, o);
  // Bandwidth, all at once. Intra: local ranks 2j and 2j+1 of every node. Inter: the same local
  // rank on nodes 2k and 2k+1. Every rank's local index: its position among its node's ranks.
  std::vector<int> local(static_cast<size_t>(n)), seen;
  for (int q = 0; q < n; ++q) {
    if (node[q] >= static_cast<int>(seen.size())) seen.resize(node[q] + 1, 0);
    local[q] = seen[node[q]]++;
  }
  std::vector<int> partner(static_cast<size_t>(n), -1);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      const bool pair = inter
                            ? (local[a] == local[b] && node[a] % 2 == 0 && node[b] == node[a] + 1)
                            : (node[a] == node[b] && local[a] % 2 == 0 && local[b] == local[a] + 1);
      if (pair) partner[a] = b, partner[b] = a;
    }
  }
  for (int q = 0; q < n; ++q) m.pairs += partner[q] > q ? 1 : 0;
  m.bandwidth_bytes_per_s = exchange_bandwidth(comm, partner, o, iterations_for(comm, partner, o));
  // The same with only the latency pair, for comparison: a shared link shows as a ratio of G.
  std::vector<int> single(static_cast<size_t>(n), -1);
  single[0] = pong;
  single[pong] = 0;
  m.single_pair_bandwidth_bytes_per_s =
      exchange_bandwidth(comm, single, o, iterations_for(comm, single, o));
  return m;
}

}  // namespace

Calibration calibrate_links(Communicator& comm, const CalibrationOptions& o) {
  DTRAIN_CHECK(o.latency_bytes >= 1 && o.bandwidth_bytes >= 1 && o.latency_iterations >= 1 &&
                   o.trials >= 1 && o.bandwidth_seconds > 0,
               "calibrate: sizes, iterations, trials and seconds must be positive");
  DTRAIN_CHECK(o.bandwidth_bytes <= (int64_t{1} << 30), "calibrate: --size is limited to 1 GiB");
  Calibration c;
  c.world = comm.size();
  const std::vector<int> node = node_of_ranks(comm, o, &c);
  c.intra_node = measure(comm, node, false, o);
  c.inter_node = measure(comm, node, true, o);
  return c;
}

}  // namespace dtrain::calibrate
