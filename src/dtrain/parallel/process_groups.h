// Every communicator one rank of the engine uses, formed once and in one order on every rank
// (a subgroup is formed by its members together, so the order is part of the contract): the
// mesh's axes, the DP x CP replicas, EP's groups carved from them, the tied embedding's two end
// stages, and the DP communication thread's own copy of the data group.
#pragma once

#include <memory>

#include "dtrain/comm/communicator.h"
#include "dtrain/parallel/mesh.h"

namespace dtrain::parallel {

struct ProcessGroups {
  std::unique_ptr<comm::Communicator> tp, pp, cp;
  // The DP x CP group (the DP group without CP): the ranks holding the same parameters, which
  // average the gradients; and its copy for the DP communication thread ("dp-async").
  std::unique_ptr<comm::Communicator> data, data_async;
  // EP (ep > 1): the ranks of the data group that split the experts, and those holding the same
  // experts (dp / ep of them), whose gradients they average; null without EP.
  std::unique_ptr<comm::Communicator> ep, expert_data;
  // Under a pipeline, on the first and the last stage: the two ranks whose tied word
  // embeddings sum their gradients; null elsewhere.
  std::unique_ptr<comm::Communicator> embedding;
  // More TP ranks than K/V heads: the TP ranks holding a copy of this rank's K/V head, which sum
  // its weight gradient (parallel/finalize_grads.h); null otherwise.
  std::unique_ptr<comm::Communicator> kv_copies;
};

// The groups of `world`'s rank in `mesh`, with `ep` expert-parallel ranks per data group; the
// embedding pair only when the output head is tied to the word embedding (`tied_head`); the
// K/V copies when each K/V head is held by `kv_copies` consecutive TP ranks.
ProcessGroups make_process_groups(comm::Communicator& world, const DeviceMesh& mesh, int ep,
                                  bool tied_head = true, int kv_copies = 1);

}  // namespace dtrain::parallel
