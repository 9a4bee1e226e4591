// make_process_groups: each subgroup formed once, in the order every rank follows.
#include "dtrain/parallel/process_groups.h"

#include <vector>

#include "dtrain/parallel/expert_parallel.h"

namespace dtrain::parallel {

ProcessGroups make_process_groups(comm::Communicator& world, const DeviceMesh& mesh, int ep,
                                  bool tied_head, int kv_copies) {
  const int me = world.rank();
  const MeshCoord coord = mesh.coord_of(me);
  ProcessGroups g;
  g.tp = world.subgroup(mesh.group_of(Axis::tp, me), name(Axis::tp));
  g.pp = world.subgroup(mesh.group_of(Axis::pp, me), name(Axis::pp));
  g.data = world.subgroup(mesh.group_of(Axis::dp, Axis::cp, me), "dp");
  g.cp = world.subgroup(mesh.group_of(Axis::cp, me), name(Axis::cp));
  const int dp = mesh.size(Axis::dp);
  if (ep > 1) g.ep = g.data->subgroup(ep_group_members(dp, ep, g.data->rank()), "ep");
  const int pp = mesh.size(Axis::pp);
  if (tied_head && pp > 1 && (coord.pp == 0 || coord.pp == pp - 1)) {
    MeshCoord first = coord, last = coord;
    first.pp = 0;
    last.pp = pp - 1;
    const int members[] = {mesh.rank_of(first), mesh.rank_of(last)};
    g.embedding = world.subgroup(members, "embedding");
  }
  if (ep > 1) {
    g.expert_data = g.data->subgroup(expert_dp_group_members(dp, ep, coord.dp), "expert-dp");
  }
  if (kv_copies > 1) {
    const int first = g.tp->rank() / kv_copies * kv_copies;  // TP ranks [first, first + copies)
    std::vector<int> members(static_cast<size_t>(kv_copies));
    for (int i = 0; i < kv_copies; ++i) members[static_cast<size_t>(i)] = first + i;
    g.kv_copies = g.tp->subgroup(members, "kv-copies");
  }
  std::vector<int> all(static_cast<size_t>(g.data->size()));
  for (int r = 0; r < g.data->size(); ++r) all[static_cast<size_t>(r)] = r;
  g.data_async = g.data->subgroup(all, "dp-async");
  return g;
}

}  // namespace dtrain::parallel
