// Uses an installed dtrain: four thread ranks all-reduce a vector (the sum checked, the bytes
// each rank sent beside the ring formula), then the planner sizes GPT-3 on 1024 A100s.
#include <cstdio>
#include <vector>

#include <dtrain/dtrain.h>

int main() {
  constexpr int kRanks = 4;
  constexpr int64_t kCount = 1 << 16;
  std::vector<long long> sent(kRanks);
  bool correct = true;
  dtrain::comm::threads::run_ranks(kRanks, [&](dtrain::comm::Communicator& world) {
    std::vector<float> x(kCount, static_cast<float>(world.rank() + 1));
    const dtrain::comm::Traffic t = dtrain::comm::all_reduce(
        world, x.data(), kCount, dtrain::comm::ReduceOp::sum, dtrain::comm::Algorithm::ring);
    sent[static_cast<size_t>(world.rank())] = t.bytes_sent;
    for (float v : x) correct = correct && v == 1 + 2 + 3 + 4;  // exact in float
  });
  // Ring all-reduce: each rank sends 2 (N - 1) / N of the buffer.
  const long long ring = 2LL * (kRanks - 1) * kCount * 4 / kRanks;
  std::printf("dtrain %s: all_reduce over %d thread ranks %s; rank 0 sent %lld bytes (ring %lld)\n",
              std::string(dtrain::version()).c_str(), kRanks, correct ? "correct" : "WRONG",
              sent[0], ring);

  dtrain::plan::PlanInput in;
  in.model = dtrain::plan::model_preset("gpt3-175b");
  in.training.global_batch = in.model.default_global_batch;
  in.cluster = dtrain::plan::parse_cluster("128x8xA100");
  dtrain::plan::Layout layout;
  layout.dp = 16;
  layout.tp = 8;
  layout.pp = 8;
  layout.zero_stage = 1;
  layout.recompute = dtrain::plan::Recompute::selective;
  layout.sequence_parallel = true;
  const dtrain::plan::Plan p = dtrain::plan::evaluate(in, layout);
  std::printf("plan %s: %.1f GB per GPU (%s), MFU %.1f%%\n", dtrain::plan::describe(layout).c_str(),
              p.memory.total() / 1e9, p.memory.fits() ? "fits" : "does not fit", 100 * p.time.mfu);
  return correct && sent[0] == ring && p.memory.fits() ? 0 : 1;
}
