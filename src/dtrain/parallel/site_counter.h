// One counter and one span type for every axis site of a step (TP's f and g, CP's exchanges, EP's
// all-to-alls): how often a site ran, what it moved, and when, so the engine snapshots, differences
// and traces every axis the same way.
#pragma once

#include <cstdint>

#include "dtrain/comm/communicator.h"

namespace dtrain::parallel {

struct SiteCounter {
  int64_t calls = 0;     // collectives, or messages (a ring's hops)
  int64_t elements = 0;  // elements reduced or gathered, where a site counts them (TP)
  comm::Traffic traffic;

  SiteCounter& operator+=(const SiteCounter& o) {
    calls += o.calls;
    elements += o.elements;
    traffic += o.traffic;
    return *this;
  }
  // The share of a cumulative counter since an earlier snapshot `o`.
  SiteCounter operator-(const SiteCounter& o) const {
    SiteCounter d;
    d.calls = calls - o.calls;
    d.elements = elements - o.elements;
    d.traffic = traffic - o.traffic;
    return d;
  }
};

// One site's run as it happened (core/timer.h now_us() clock), for traces.
struct SiteSpan {
  const char* what = "";  // "all_reduce g", "ring hop K/V", "all_to_all EP", ...
  const char* pass = "";  // "forward", "backward", "recompute"; "" where the site has none
  double start_us = 0, end_us = 0;
  int64_t bytes = -1;  // what this rank sent during it, where the site measures it (CP); else -1
};

}  // namespace dtrain::parallel
