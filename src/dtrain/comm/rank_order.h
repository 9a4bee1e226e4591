// Deterministic exchanges of doubles (gradient norms, losses, report rows): every rank's values
// gathered bit for bit, and sums added in rank order, so every rank of the group gets the same
// bits whatever the backend or algorithm. A float all-reduce would not do: its order of
// additions (and rounding to float) depends on the algorithm, and the clip scale inherits it.
#pragma once

#include <span>
#include <vector>

#include "dtrain/comm/communicator.h"

namespace dtrain::comm {

// A collective: every rank passes `values` of the same length n and gets every rank's, bit for
// bit, rank r's at [r * n, (r + 1) * n). One all-gather of n * size() 8-byte words.
std::vector<double> gather_in_rank_order(Communicator& comm, std::span<const double> values);

// A collective: element i is rank 0's values[i] + rank 1's + ... + rank (size-1)'s, added left
// to right: the same bits on every rank, and the bits of the serial loop over the ranks.
std::vector<double> sum_in_rank_order(Communicator& comm, std::span<const double> values);

}  // namespace dtrain::comm
