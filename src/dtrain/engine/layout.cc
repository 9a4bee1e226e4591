// make_engine_config: every layout flag checked once, against the model and the batch, each
// error naming its flag.
#include "dtrain/engine/layout.h"

#include "dtrain/core/check.h"
#include "dtrain/machine/hardware.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/parallel/pipeline_checker.h"
#include "dtrain/schedule/pipeline_schedule.h"

namespace dtrain::train {
namespace {

const parallel::PartitionFlags kFlags{"--pp", "--layers", "--stage-layers", "--vp"};

}  // namespace

std::string_view name(DpAllReduce mode) {
  return mode == DpAllReduce::hierarchical ? "hierarchical" : "flat";
}

EngineConfig make_engine_config(const StepConfig& step, const LayoutOptions& o) {
  const model::GptConfig& m = step.model;
  DTRAIN_CHECK(o.dp >= 1, "--dp must be at least 1 (got ", o.dp, ")");
  DTRAIN_CHECK(o.tp >= 1, "--tp must be at least 1 (got ", o.tp, ")");
  DTRAIN_CHECK(o.pp >= 1, "--pp must be >= 1, got ", o.pp);
  DTRAIN_CHECK(o.zero_stage >= 0 && o.zero_stage <= 3, "--zero must be 0, 1, 2 or 3 (got ",
               o.zero_stage, ")");
  DTRAIN_CHECK(o.bucket_bytes > 0, "--bucket-size must be positive (got ", o.bucket_bytes,
               " bytes)");
  DTRAIN_CHECK(o.grad_accum >= 1, "--grad-accum must be at least 1 (got ", o.grad_accum, ")");
  DTRAIN_CHECK(o.microbatches >= 1, "--microbatches must be >= 1, got ", o.microbatches);
  DTRAIN_CHECK(o.grad_accum == 1 || o.microbatches == 1, "--grad-accum ", o.grad_accum,
               " and --microbatches ", o.microbatches,
               " both split the batch into micro-batches: give one of them");
  DTRAIN_CHECK(o.max_rank_memory >= 0, "--max-rank-memory must not be negative");
  // --micro-batch b (plan's layout flag, so a layout plan prints runs here unchanged): the
  // micro-batch count from each DP rank's rows, as the pipeline's micro-batches under --pp and
  // as gradient accumulation without it.
  int64_t grad_accum = o.grad_accum;
  int64_t microbatches = o.microbatches;
  if (o.micro_batch > 0) {
    DTRAIN_CHECK(o.grad_accum == 1 && o.microbatches == 1, "--micro-batch ", o.micro_batch,
                 " sets the micro-batch count: give it, or --microbatches / --grad-accum, not "
                 "both");
    DTRAIN_CHECK(step.batch % (o.dp * o.micro_batch) == 0, "--micro-batch ", o.micro_batch,
                 " does not split the global batch ", step.batch, " (--global-batch) over --dp ",
                 o.dp, " into whole micro-batches");
    (o.pp > 1 ? microbatches : grad_accum) = step.batch / (o.dp * o.micro_batch);
  }

  EngineConfig c;
  c.step = step;
  c.dp = o.dp;
  c.tp = o.tp;
  c.pp = o.pp;
  c.cp = o.cp;
  c.cp_algorithm = o.cp_algorithm;
  c.cp_split = o.cp_contiguous || o.cp_algorithm == plan::CpAlgorithm::ulysses
                   ? model::CpTokenSplit::contiguous
                   : model::CpTokenSplit::balanced;
  c.rank_order = o.rank_order;
  c.zero_stage = o.zero_stage;
  c.bucket_bytes = o.bucket_bytes;
  c.microbatches = static_cast<int>(std::max<int64_t>(microbatches, grad_accum));
  const char* split_flag = o.micro_batch > 0 ? "--micro-batch"
                           : grad_accum > 1  ? "--grad-accum"
                                             : "--microbatches";

  // The batch: B rows over the DP ranks, each rank's over its micro-batches.
  DTRAIN_CHECK(step.batch % o.dp == 0, "--dp ", o.dp, " does not divide the global batch ",
               step.batch, " (--global-batch)");
  const int64_t per_rank = step.batch / o.dp;
  if (o.dp == 1) {
    DTRAIN_CHECK(per_rank % c.microbatches == 0, "--global-batch ", step.batch,
                 " is not divisible into ", split_flag, " ", c.microbatches,
                 " micro-batches of equal size");
  } else if (grad_accum > 1) {
    DTRAIN_CHECK(per_rank % c.microbatches == 0, "--grad-accum ", grad_accum,
                 " does not divide the ", per_rank, " sequences per rank (--global-batch ",
                 step.batch, " / --dp ", o.dp, ")");
  } else {
    DTRAIN_CHECK(per_rank % c.microbatches == 0, "--global-batch ", step.batch,
                 " does not split into --dp ", o.dp, " x ", c.microbatches,
                 " micro-batches of equal size");
  }

  // Context parallelism: each sequence's tokens over the CP group (cost/context_parallel.h's
  // constraints, named by flag).
  DTRAIN_CHECK(o.cp >= 1, "--cp must be at least 1 (got ", o.cp, ")");
  if (o.cp > 1) {
    DTRAIN_CHECK(o.cp_algorithm != plan::CpAlgorithm::automatic,
                 "--cp-algo auto is the planner's choice; give ring, all-gather or ulysses");
    plan::CpShape shape;
    shape.seq = step.seq;
    shape.micro_batch = c.micro_batch();
    shape.hidden = m.channels;
    shape.heads = m.heads;
    shape.kv_heads = m.kv_heads_or_heads();
    shape.tp = o.tp;
    shape.cp = o.cp;
    DTRAIN_CHECK(o.cp <= step.seq, "--cp ", o.cp, " is beyond the ", step.seq,
                 " tokens of a sequence (--seq-length): each CP rank needs T/cp of them");
    // The planner's constraint, in the flags train shares with plan.
    // A contiguous split needs only T divisible by cp (the rule plan/ gives Ulysses's sequence).
    std::string why =
        plan::cp_layout_error(shape, o.cp_contiguous ? plan::CpAlgorithm::ulysses : o.cp_algorithm);
    if (o.cp_contiguous && why.find("--heads") != std::string::npos) why.clear();
    DTRAIN_CHECK(why.empty(), why);
  }
  const int64_t seq_local = step.seq / o.cp;

  // Expert parallelism, carved from DP: --ep ranks of each DP group hold the experts once.
  DTRAIN_CHECK(o.ep >= 1, "--ep must be at least 1 (got ", o.ep, ")");
  if (o.ep > 1) {
    DTRAIN_CHECK(m.moe.enabled(), "--ep ", o.ep, " needs a mixture-of-experts model (--experts)");
    DTRAIN_CHECK(o.dp % o.ep == 0, "--ep ", o.ep, " does not divide --dp ", o.dp,
                 " (EP ranks are carved from the DP ranks)");
    DTRAIN_CHECK(m.moe.experts % o.ep == 0, "--ep ", o.ep, " does not divide --experts ",
                 m.moe.experts);
    DTRAIN_CHECK(o.cp == 1, "--ep ", o.ep, " with --cp ", o.cp, " is not supported yet");
    DTRAIN_CHECK(o.dp_all_reduce == DpAllReduce::flat, "--ep ", o.ep,
                 " with --dp-all-reduce hierarchical is not supported yet");
  }
  c.ep = o.ep;

  // Tensor and sequence parallelism.
  DTRAIN_CHECK(!o.sequence_parallel || o.tp > 1,
               "--sequence-parallel needs --tp of at least 2 (got --tp ", o.tp, ")");
  model::check_tensor_parallel(m, o.tp);
  c.sequence_parallel = o.sequence_parallel;
  if (o.sequence_parallel) model::check_sequence_parallel(c.micro_batch(), seq_local, o.tp);

  // The pipeline: its stages, chunks and schedule, proved valid and deadlock-free now rather
  // than as a hang on the ranks.
  // --vp v > 1 without --schedule means the interleaved schedule, as in plan.
  const plan::ScheduleKind kind = o.schedule.value_or(
      o.chunks > 1 ? plan::ScheduleKind::interleaved : plan::ScheduleKind::one_f_one_b);
  DTRAIN_CHECK(o.pp > 1 || !o.schedule || kind == plan::ScheduleKind::one_f_one_b, "--schedule ",
               plan::name(kind), " needs --pp 2 or more (a pipeline to schedule)");
  DTRAIN_CHECK(o.pp > 1 || o.stage_layers.empty(), "--stage-layers needs --pp 2 or more");
  DTRAIN_CHECK(o.pp > 1 || o.chunks == 0,
               "--vp needs --pp 2 or more (and the interleaved schedule)");
  DTRAIN_CHECK(o.chunks >= 0, "--vp must be >= 1, got ", o.chunks);
  const int v = o.chunks != 0 ? o.chunks : kind == plan::ScheduleKind::interleaved ? 2 : 1;
  DTRAIN_CHECK(v == 1 || kind == plan::ScheduleKind::interleaved, "--vp ", v,
               " applies only to --schedule interleaved, not ", plan::name(kind));
  c.schedule = kind;
  const int layers = static_cast<int>(m.layers);
  c.partition = o.stage_layers.empty()
                    ? parallel::balanced_partition(layers, o.pp, v, kFlags)
                    : parallel::explicit_partition(layers, o.pp, v, o.stage_layers, kFlags);
  const parallel::CheckResult checked =
      parallel::check_schedule(plan::make_schedule(kind, o.pp, c.microbatches, v));
  DTRAIN_CHECK(checked.ok(), "--schedule ", plan::name(kind), " with --pp ", o.pp, " and ",
               split_flag, " ", c.microbatches, ": ", checked.error);

  // Where the ranks sit, and how the DP group averages.
  DTRAIN_CHECK(o.ranks_per_node >= 0, "--ranks-per-node must be positive (got ", o.ranks_per_node,
               ")");
  c.topology = comm::NodeTopology(o.world(), o.ranks_per_node > 0 ? o.ranks_per_node : o.world());
  c.hierarchical = o.dp_all_reduce == DpAllReduce::hierarchical;
  c.bf16_grad_reduce = o.grad_reduce == model::Precision::bf16;
  DTRAIN_CHECK(o.dp_algorithm == comm::Algorithm::automatic ||
                   o.dp_algorithm == comm::Algorithm::ring ||
                   o.dp_algorithm == comm::Algorithm::direct,
               "--dp-algo ", comm::name(o.dp_algorithm), " is not offered (auto, ring or direct)");
  DTRAIN_CHECK(o.dp_algorithm != comm::Algorithm::direct || !c.hierarchical,
               "--dp-algo direct needs --dp-all-reduce flat (direct is for ranks on one node; the "
               "two-level all-reduce crosses nodes)");
  // auto: direct where the DP group shares memory (the DataParallel asks the group) and sits on
  // one node of the declared topology; the ring otherwise.
  c.dp_algorithm = c.hierarchical ? comm::Algorithm::ring : o.dp_algorithm;
  if (c.dp_algorithm != comm::Algorithm::ring && o.ranks_per_node > 0) {
    const parallel::DeviceMesh mesh(o.dp, o.cp, o.tp, o.pp, o.rank_order);
    for (const std::vector<int>& g : mesh.groups(parallel::Axis::dp)) {
      if (c.topology.nodes_of(g).size() <= 1) continue;
      DTRAIN_CHECK(o.dp_algorithm == comm::Algorithm::automatic, "--dp-algo direct: the DP group {",
                   g.front(), "..", g.back(), "} spans nodes (--ranks-per-node ", o.ranks_per_node,
                   "); direct needs each DP group on one node");
      c.dp_algorithm = comm::Algorithm::ring;
    }
  }
  DTRAIN_CHECK(!c.bf16_grad_reduce || !c.hierarchical,
               "--grad-reduce bf16 needs --dp-all-reduce flat (the two-level all-reduce is fp32)");
  DTRAIN_CHECK(!c.hierarchical || o.ranks_per_node > 0,
               "--dp-all-reduce hierarchical needs --ranks-per-node (the nodes to go across)");
  DTRAIN_CHECK(!c.hierarchical || o.zero_stage == 0,
               "--dp-all-reduce hierarchical needs --zero 0 (got --zero ", o.zero_stage, ")");
  if (c.hierarchical) {
    // Every node must hold as many ranks of each DP group (comm::make_node_groups).
    const parallel::DeviceMesh mesh(o.dp, o.cp, o.tp, o.pp, o.rank_order);
    for (const std::vector<int>& g : mesh.groups(parallel::Axis::dp)) {
      std::vector<int> per_node(static_cast<size_t>(c.topology.nodes()), 0);
      for (int r : g) ++per_node[static_cast<size_t>(c.topology.node_of(r))];
      for (int n : per_node) {
        DTRAIN_CHECK(n == 0 || n == per_node[static_cast<size_t>(c.topology.node_of(g[0]))],
                     "--dp-all-reduce hierarchical: the DP group {", g.front(), "..", g.back(),
                     "} has a different number of ranks on each node (--ranks-per-node ",
                     o.ranks_per_node, ", --rank-order ", parallel::to_string(o.rank_order), ")");
      }
    }
  }
  if (!o.cluster_path.empty()) c.cluster = plan::read_cluster_file(o.cluster_path);
  c.record_collectives = !o.trace_path.empty() || !o.timeline_path.empty();
  return c;
}

}  // namespace dtrain::train
