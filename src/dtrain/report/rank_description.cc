// The engine side of predict_rank: an engine layout and stage described as the formulas read
// it, the stage's parameter counts (from its table, or from a one-block model of each kind), and
// the planned peak the memory check before a run compares.
#include "dtrain/report/rank_description.h"

#include <algorithm>

#include "dtrain/model/gpt_stage.h"
#include "dtrain/model/moe_dispatch.h"
#include "dtrain/model/param_table.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/parallel/pipeline_checker.h"

namespace dtrain::train {

StageParamCounts stage_param_counts(const parallel::StageUnits& units, int64_t total,
                                    int64_t experts) {
  StageParamCounts counts;
  counts.params = total;
  counts.experts = experts;
  for (int i = 0; i < units.size(); ++i) {
    if (i == units.embeddings()) {
      counts.embeddings = units[i].count;
    } else {
      counts.units.push_back(units[i].count);
      if (i == units.final_norm()) {
        counts.final_norm = units[i].count;
      } else {
        counts.block = std::max(counts.block, units[i].count);  // dense and routed differ
      }
    }
  }
  return counts;
}

StageParamCounts stage_param_counts(const EngineConfig& c, int stage) {
  // A block is dense or routed (model::is_moe_layer): a one-block model of each kind's TP- and
  // EP-local table (the rank holds E / ep experts of a routed block, router included) gives its
  // count. Dense blocks are the dense model's; routed ones every = 1's.
  const auto one_block = [&](bool routed) {
    model::GptConfig one = c.step.model;
    one.layers = 1;
    if (routed) {
      one.moe.every = 1;
    } else {
      one.moe = {};
    }
    return one;
  };
  const auto local_table = [&](const model::GptConfig& one) {
    return model::ep_local_table(model::tp_local_table(model::gpt_param_table(one), one, c.tp),
                                 one.moe, c.ep);
  };
  const auto block_count = [&](const model::GptConfig& one, const model::ParamTable& t) {
    int64_t n = 0;
    for (const model::LayerParam k : model::gpt_layer_params(one, 0)) {
      n += t[static_cast<size_t>(model::gpt_layer_param(one, 0, k))].count;
    }
    return n;
  };
  const model::GptConfig dense = one_block(false);
  const model::ParamTable t = local_table(dense);
  const auto count = [&](int index) { return t[static_cast<size_t>(index)].count; };
  const int64_t dense_block = block_count(dense, t);
  int64_t routed_block = dense_block, routed_experts = 0;
  if (c.step.model.moe.enabled()) {
    const model::GptConfig routed = one_block(true);
    const model::ParamTable rt = local_table(routed);
    routed_block = block_count(routed, rt);
    for (const model::ParamTensor& tensor : rt.tensors()) {
      if (c.ep > 1 && model::is_expert_tensor(tensor.name)) routed_experts += tensor.count;
    }
  }
  // The head's unit: the final norm (LayerNorm's weight and bias, RMSNorm's weight) and Llama's
  // untied head.
  int64_t final_norm = 0;
  for (const int index : {model::gpt_lnf_w_index(dense), model::gpt_lnf_b_index(dense),
                          model::gpt_lm_head_index(dense)}) {
    if (index >= 0) final_norm += count(index);
  }

  // The units as parallel::StageUnits lists them: the final LayerNorm with the head, the
  // blocks from the last to the first, then the embeddings (wte and wpe, or the tied wte alone
  // on a head-only stage). Work per distinct layer range, not per tensor of a table.
  const model::GptStage gs = parallel::stage_of(c.partition, stage);
  StageParamCounts counts;
  if (gs.head) counts.units.push_back(final_norm);
  if (gs.head) counts.final_norm = final_norm;
  int64_t layers = 0;
  for (const model::LayerRange& r : gs.chunks) layers = std::max(layers, r.end());
  for (int64_t l = layers - 1; l >= 0; --l) {
    if (!gs.has_layer(l)) continue;
    const bool routed = model::is_moe_layer(c.step.model.moe, l);
    const int64_t block = routed ? routed_block : dense_block;
    if (routed) counts.experts += routed_experts;
    counts.units.push_back(block);
    counts.block = std::max(counts.block, block);  // the largest: ZeRO-3's gather buffer
  }
  const int wpe = model::gpt_wpe_index(dense);
  if (gs.embedding || (gs.head && dense.tied_head())) {
    counts.embeddings = count(model::kWteIndex) + (gs.embedding && wpe >= 0 ? count(wpe) : 0);
  }
  counts.params = counts.embeddings;
  for (const int64_t n : counts.units) counts.params += n;
  return counts;
}

plan::EngineRank describe_rank(const EngineConfig& c, int stage, const StageParamCounts& counts) {
  const model::GptConfig& g = c.step.model;
  plan::EngineRank r;
  r.hidden = g.channels;
  r.heads = g.heads;
  r.llama = g.llama();
  r.kv_heads = g.kv_heads_or_heads();
  r.ffn = g.ffn();
  r.vocab_local = c.tp > 1 ? model::tp_vocab_local(g.vocab, c.tp) : g.vocab;
  r.seq = c.step.seq;
  r.dp = c.dp;
  r.tp = c.tp;
  r.pp = c.pp;
  r.cp = c.cp;
  r.ep = c.ep;
  r.zero_stage = c.zero_stage;
  r.sequence_parallel = c.sequence_parallel && c.tp > 1;
  r.recompute = c.step.recompute;
  r.mixed_precision = c.step.precision == model::Precision::bf16;
  r.bf16_grad_reduce = c.bf16_grad_reduce;
  r.cp_algorithm = c.cp_algorithm;
  r.threads = c.step.threads;
  r.micro_batch = c.micro_batch();
  r.microbatches = c.microbatches;
  r.bucket_bytes = c.bucket_bytes;
  r.partition = c.partition;
  r.stage = stage;
  for (int64_t l = 0; l < g.layers; ++l) {
    if (c.partition.rank_of_layer(static_cast<int>(l)) == stage && model::is_moe_layer(g.moe, l)) {
      ++r.routed_blocks;
    }
  }
  r.params = counts;
  const plan::PipelineSchedule schedule =
      plan::make_schedule(c.schedule, c.pp, c.microbatches, c.partition.chunks());
  for (const std::vector<plan::Action>& list : schedule.per_rank) {
    for (const plan::Action& a : list) {
      if (a.kind == plan::ActionKind::backward_input) r.split_backward = true;
    }
  }
  const parallel::RankReport rr =
      parallel::simulate_schedule(schedule).ranks[static_cast<size_t>(stage)];
  r.inflight = r.split_backward ? rr.peak_weight_stash : rr.peak_inflight;
  return r;
}

double planned_rank_peak_bytes(const EngineConfig& c, int stage) {
  return planned_rank_peak_bytes(c, stage, stage_param_counts(c, stage));
}

double planned_rank_peak_bytes(const EngineConfig& c, int stage, const StageParamCounts& counts) {
  return plan::predict_rank(describe_rank(c, stage, counts)).peak_bytes;
}

}  // namespace dtrain::train
