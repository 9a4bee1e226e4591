// print_summary / summary_to_json.
#include "dtrain/train/report.h"

#include <csignal>

#include <cstdio>
#include <string>

#include "dtrain/core/units.h"
#include "dtrain/train/text_table.h"

namespace dtrain::train {
namespace {

// The data-parallel section: model-state memory per rank and DP bytes per step, each measured
// beside its plan/ formula, and the overlap of communication with compute.
void print_data_parallel(std::ostream& out, const DataParallelReport& d) {
  out << "\n  data parallel: " << d.setup.dp << " ranks, ZeRO stage " << d.setup.zero_stage << ", "
      << d.micro_batch << " sequences x " << d.setup.grad_accum << " micro-batch(es) per rank, "
      << d.buckets << (d.setup.zero_stage == 3 ? " units" : " gradient buckets")
      << " (--bucket-size " << format_bytes(static_cast<double>(d.setup.bucket_bytes)) << ")\n";
  out << "  model state (rank 0)   measured after step   plan::model_state_bytes   peak\n";
  for (const DataParallelReport::StateRow& r : d.state) {
    out << "  " << left_aligned(std::string(memory_tag_name(r.tag)), 22)
        << right_aligned(grouped(static_cast<double>(r.current_bytes)) + " B", 20)
        << right_aligned(grouped(static_cast<double>(r.formula_bytes)) + " B", 26)
        << right_aligned(format_bytes(static_cast<double>(r.peak_bytes)), 12)
        << (r.current_bytes == r.formula_bytes ? "" : "   (differs)") << "\n";
  }
  out << "  (fp32 Adam: 4 + 4 + 8 bytes per parameter; Psi = "
      << grouped(static_cast<double>(d.params))
      << ", shard = ceil(Psi/N) = " << grouped(static_cast<double>(d.shard)) << ")\n";
  if (d.setup.zero_stage == 3) {
    out << "  gathered units (peak above the shards, params + grads): "
        << format_bytes(static_cast<double>(d.gathered_peak_bytes))
        << "; plan: zero3_gathered_bytes(block, prefetch 1) + embeddings' weights and gradient = "
        << format_bytes(static_cast<double>(d.gathered_formula_bytes)) << "\n";
  }
  out << "  DP bytes sent per step (rank 0): " << grouped(d.bytes_sent_per_step) << " measured, "
      << grouped(d.formula_bytes_sent_per_step)
      << " plan::dp_traffic_per_step (ring); control (loss, norm): "
      << grouped(d.control_bytes_per_step) << "\n";
  if (d.ranks_per_node > 0) {
    out << "  by link (rank 0, " << d.ranks_per_node << " ranks a node, "
        << (d.hierarchical ? "hierarchical" : "flat ring")
        << " all-reduce): " << grouped(d.intra_node_bytes_per_step) << " intra-node, "
        << grouped(d.inter_node_bytes_per_step) << " inter-node bytes per step\n";
    out << "  inter-node bytes per step, every rank: " << grouped(d.total_inter_node_bytes_per_step)
        << " measured";
    if (d.predicted_total_inter_node_bytes_per_step >= 0) {
      out << ", " << grouped(d.predicted_total_inter_node_bytes_per_step)
          << " predicted (plan/link_traffic.h per bucket)";
    }
    out << "\n";
  }
  if (!d.cluster.empty()) {
    out << "  predicted on " << d.cluster << ": " << fixed(d.predicted_comm_ms, 3)
        << " ms of all-reduce per step, " << fixed(d.predicted_exposed_comm_ms, 3)
        << " ms exposed after the backward window\n";
  }
  out << "  overlap: " << fixed(100 * d.overlap_share, 1)
      << " % of communication hidden behind compute (" << fixed(d.hidden_ms_per_step, 3) << " of "
      << fixed(d.comm_ms_per_step, 3) << " ms per step)\n";
}

nlohmann::json data_parallel_to_json(const DataParallelReport& d) {
  nlohmann::json state = nlohmann::json::object();
  for (const DataParallelReport::StateRow& r : d.state) {
    state[std::string(memory_tag_name(r.tag))] = {{"current_bytes", r.current_bytes},
                                                  {"peak_bytes", r.peak_bytes},
                                                  {"formula_bytes", r.formula_bytes}};
  }
  nlohmann::json j = {
      {"dp", d.setup.dp},
      {"zero_stage", d.setup.zero_stage},
      {"bucket_bytes", d.setup.bucket_bytes},
      {"grad_accum", d.setup.grad_accum},
      {"micro_batch", d.micro_batch},
      {"buckets", d.buckets},
      {"params", d.params},
      {"shard", d.shard},
      {"model_state", state},
      {"bytes_sent_per_step", d.bytes_sent_per_step},
      {"formula_bytes_sent_per_step", d.formula_bytes_sent_per_step},
      {"control_bytes_per_step", d.control_bytes_per_step},
      {"ranks_per_node", d.ranks_per_node},
      {"hierarchical", d.hierarchical},
      {"intra_node_bytes_per_step", d.intra_node_bytes_per_step},
      {"inter_node_bytes_per_step", d.inter_node_bytes_per_step},
      {"total_inter_node_bytes_per_step", d.total_inter_node_bytes_per_step},
      {"predicted_total_inter_node_bytes_per_step", d.predicted_total_inter_node_bytes_per_step},
      {"predicted_comm_ms", d.predicted_comm_ms},
      {"predicted_exposed_comm_ms", d.predicted_exposed_comm_ms},
      {"comm_ms_per_step", d.comm_ms_per_step},
      {"hidden_ms_per_step", d.hidden_ms_per_step},
      {"overlap_share", d.overlap_share}};
  if (d.setup.zero_stage == 3) {
    j["gathered_peak_bytes"] = d.gathered_peak_bytes;
    j["gathered_formula_bytes"] = d.gathered_formula_bytes;
  }
  return j;
}

}  // namespace

std::string signal_name(int signal_number) {
  if (signal_number == SIGINT) return "SIGINT";
  if (signal_number == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal_number);
}

void print_summary(std::ostream& out, const TrainSummary& s) {
  const TrainerConfig& c = s.config;
  out << "dtrain train: " << c.model_name << " model (" << model::describe(c.model) << ", "
      << grouped(static_cast<double>(s.param_count)) << " parameters) on " << s.engine << "\n";
  out << "  data " << s.data_source << ": " << grouped(static_cast<double>(s.train_tokens))
      << " training + " << grouped(static_cast<double>(s.val_tokens))
      << " validation tokens (bytes)\n";
  out << "  " << c.steps << " steps of batch " << c.batch << " x seq " << c.seq << " = "
      << s.tokens_per_step << " tokens; lr " << c.schedule.lr << " (warmup "
      << c.schedule.warmup_steps << ", cosine to " << c.schedule.min_lr << ")\n";
  if (s.first_step > 0) {
    out << "  resumed at step " << s.first_step << " from " << c.checkpoint.resume << "\n";
  }
  if (s.stop_signal != 0) {
    out << "  stopped by " << signal_name(s.stop_signal) << " after step " << s.last_step << " of "
        << c.steps << "\n";
  }
  if (!s.last_checkpoint.empty()) out << "  checkpoint written: " << s.last_checkpoint << "\n";
  for (const std::string& note : c.notes) out << "  note: " << note << "\n";
  out << "\n";

  out << "  loss           train    validation\n";
  out << "  at start   " << right_aligned(fixed(s.first_train_loss, 4), 9)
      << right_aligned(fixed(s.first_val_loss, 4), 14) << "\n";
  out << "  at end     " << right_aligned(fixed(s.final_train_loss, 4), 9)
      << right_aligned(fixed(s.final_val_loss, 4), 14) << "   (train: mean of the last 10 steps "
      << fixed(s.final_train_loss_avg, 4) << ")\n";
  out << "  ln V       " << right_aligned(fixed(s.ln_vocab, 4), 9)
      << "                (the loss of a uniform guess over V = " << c.model.vocab << ")\n\n";

  out << "  speed      " << grouped(s.tokens_per_s) << " tokens/s, " << fixed(s.ms_per_step, 3)
      << " ms/step (median " << fixed(s.median_ms_per_step, 3) << "; forward "
      << fixed(s.forward_ms, 3) << ", backward " << fixed(s.backward_ms, 3) << ", optimizer "
      << fixed(s.optimizer_ms, 3) << "), " << fixed(s.train_seconds, 2) << " s of steps\n\n";

  out << "  memory (this rank)   current          peak\n";
  for (const MemoryRow& m : s.memory) {
    out << "  " << left_aligned(std::string(memory_tag_name(m.tag)), 16)
        << right_aligned(format_bytes(static_cast<double>(m.current_bytes)), 12)
        << right_aligned(format_bytes(static_cast<double>(m.peak_bytes)), 14) << "\n";
  }
  out << "  " << left_aligned("total (peak)", 16) << right_aligned("", 12)
      << right_aligned(format_bytes(static_cast<double>(s.peak_total_bytes)), 14) << "\n";
  out << "  activations planned by plan/ (L x per layer + head + workspace): "
      << format_bytes(s.planned_activation_bytes) << "; recompute " << name(c.recompute) << "\n";
  if (s.data_parallel) print_data_parallel(out, *s.data_parallel);
  if (s.pipeline) print_pipeline_report(out, *s.pipeline);
  if (s.tensor_parallel) print_tensor_parallel_report(out, *s.tensor_parallel);
  if (s.mesh) print_mesh_report(out, *s.mesh);
}

nlohmann::json summary_to_json(const TrainSummary& s) {
  const TrainerConfig& c = s.config;
  nlohmann::json j;
  j["engine"] = s.engine;
  j["model"] = {{"name", c.model_name},       {"vocab", c.model.vocab},
                {"context", c.model.context}, {"layers", c.model.layers},
                {"heads", c.model.heads},     {"channels", c.model.channels},
                {"params", s.param_count}};
  j["data"] = {
      {"source", s.data_source}, {"train_tokens", s.train_tokens}, {"val_tokens", s.val_tokens}};
  j["run"] = {{"steps", c.steps},
              {"batch", c.batch},
              {"seq", c.seq},
              {"tokens_per_step", s.tokens_per_step},
              {"lr", c.schedule.lr},
              {"min_lr", c.schedule.min_lr},
              {"warmup", c.schedule.warmup_steps},
              {"eval_every", c.eval_every},
              {"eval_batches", c.eval_batches},
              {"recompute", name(c.recompute)}};
  j["loss"] = {{"first_train", s.first_train_loss},
               {"final_train", s.final_train_loss},
               {"final_train_avg10", s.final_train_loss_avg},
               {"first_val", s.first_val_loss},
               {"final_val", s.final_val_loss},
               {"ln_vocab", s.ln_vocab}};
  j["train_losses"] = s.train_losses;
  j["run_id"] = c.run.id;
  j["last_step"] = s.last_step;
  j["stopped_by"] = s.stop_signal != 0 ? nlohmann::json(signal_name(s.stop_signal)) : nullptr;
  j["notes"] = c.notes;
  j["checkpoint"] = {{"first_step", s.first_step},
                     {"resumed_from", c.checkpoint.resume},
                     {"last_saved", s.last_checkpoint}};
  nlohmann::json evals = nlohmann::json::array();
  for (const EvalRecord& e : s.evals) evals.push_back({{"step", e.step}, {"val_loss", e.val_loss}});
  j["val_losses"] = evals;
  j["speed"] = {{"tokens_per_s", s.tokens_per_s},
                {"ms_per_step", s.ms_per_step},
                {"median_ms_per_step", s.median_ms_per_step},
                {"forward_ms", s.forward_ms},
                {"backward_ms", s.backward_ms},
                {"optimizer_ms", s.optimizer_ms},
                {"train_seconds", s.train_seconds}};
  nlohmann::json mem = nlohmann::json::object();
  for (const MemoryRow& m : s.memory) {
    mem[std::string(memory_tag_name(m.tag))] = {{"current_bytes", m.current_bytes},
                                                {"peak_bytes", m.peak_bytes}};
  }
  mem["peak_total_bytes"] = s.peak_total_bytes;
  mem["planned_activation_bytes"] = s.planned_activation_bytes;
  j["memory"] = mem;
  if (s.data_parallel) j["data_parallel"] = data_parallel_to_json(*s.data_parallel);
  if (s.pipeline) j["pipeline"] = pipeline_report_to_json(*s.pipeline);
  if (s.tensor_parallel) j["tensor_parallel"] = tensor_parallel_report_to_json(*s.tensor_parallel);
  if (s.mesh) j["mesh"] = mesh_report_to_json(*s.mesh);
  return j;
}

}  // namespace dtrain::train
