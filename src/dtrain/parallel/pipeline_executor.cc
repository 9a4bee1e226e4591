// PipelineExecutor: the schedule's actions on real ranks (compute on the stage model, posting
// communication groups), the measured timeline and the measured bubble.
#include "dtrain/parallel/pipeline_executor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/parallel/pipeline_checker.h"

namespace dtrain::parallel {
namespace {

std::span<const int32_t> rows(std::span<const int32_t> ids, int mb, int64_t count) {
  return ids.subspan(static_cast<size_t>(mb * count), static_cast<size_t>(count));
}

void copy_floats(float* dst, const float* src, int64_t count) {
  std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
}

// What one micro-batch of a chunk allocates (with `split`, its weight-gradient stash too),
// measured on a scratch tracker, plus what a CP group keeps per block for its backward
// (`cp_kept_bytes_per_block`, the group's own buffer sizes): the figure the in-flight accounting
// multiplies (tests compare it with the plan/ formulas).
int64_t measure_chunk_bytes(const model::GptConfig& g, int64_t b, int64_t T,
                            model::LayerRange layers, bool embedding, bool head, bool split, int tp,
                            bool sequence_parallel, Recompute recompute, bool bf16_storage,
                            bool blockwise_attention, int64_t cp_kept_bytes_per_block) {
  MemoryTracker scratch;
  model::GptActivations acts(g, b, T, &scratch, layers, embedding, head, tp, sequence_parallel,
                             recompute, bf16_storage, blockwise_attention);
  const std::unique_ptr<model::WeightGradStash> stash =
      split ? std::make_unique<model::WeightGradStash>(g, b, T, &scratch, layers, tp) : nullptr;
  return scratch.current_bytes(MemoryTag::activations) + layers.count * cp_kept_bytes_per_block;
}

}  // namespace

model::GptStage stage_of(const StagePartition& partition, int rank) {
  model::GptStage stage;
  for (int c = 0; c < partition.chunks(); ++c) {
    stage.chunks.push_back({partition.first_layer(rank, c), partition.layer_count(rank, c)});
  }
  stage.embedding = partition.has_embedding(rank);
  stage.head = partition.has_head(rank);
  return stage;
}

PipelineExecutor::PipelineExecutor(comm::Communicator& comm, model::GptModel& model,
                                   PipelineExecutorConfig config, MemoryTracker* tracker,
                                   UnitHooks* hooks)
    : comm_(comm),
      model_(model),
      config_(std::move(config)),
      tracker_(tracker),
      hooks_(hooks != nullptr ? hooks : &no_hooks_),
      units_(model.param_table(), model.stage()),
      rank_(comm.rank()),
      workspace_(model.config(), config_.micro_batch, config_.seq, tracker, model.threads(),
                 model.tp().size(), model.tp().sequence_parallel(), model.recompute(),
                 model.bf16_activations(), model.cp().size() > 1) {
  const plan::PipelineSchedule& s = config_.schedule;
  const StagePartition& p = config_.partition;
  DTRAIN_CHECK(comm.size() == s.stages, "pipeline executor: the communicator has ", comm.size(),
               " ranks, the schedule ", s.stages, " stages");
  DTRAIN_CHECK(p.stages() == s.stages && p.chunks() == s.chunks, "pipeline executor: partition (",
               p.stages(), " stages, ", p.chunks(), " chunks) differs from the schedule's (",
               s.stages, ", ", s.chunks, ")");
  DTRAIN_CHECK(p.layers() == model.config().layers, "pipeline executor: partition of ", p.layers(),
               " blocks for a model of ", model.config().layers);
  DTRAIN_CHECK(model.stage() == stage_of(p, rank_), "pipeline executor: rank ", rank_,
               "'s model is not built for its stage");
  // A bad schedule becomes an error here instead of a hang on the ranks.
  const CheckResult checked = check_schedule(s);
  DTRAIN_CHECK(checked.ok(), "pipeline executor: invalid schedule: ", checked.error);
  DTRAIN_CHECK(config_.micro_batch > 0 && config_.seq > 0,
               "pipeline executor: micro-batch shape must be positive");
  // Under TP each rank of a stage holds its shards and sends its activation to the same TP
  // rank of the next stage: the whole (b, T, C), or under sequence parallelism its rows of it.
  tp_ = model.tp().size();
  const bool sp = model.tp().sequence_parallel();
  const model::GptConfig& g = model.config();
  const int64_t rows = config_.micro_batch * config_.seq / (sp ? tp_ : 1);
  element_count_ = rows * g.channels;
  for (const std::vector<plan::Action>& list : s.per_rank) {
    for (const plan::Action& a : list)
      split_ = split_ || a.kind == plan::ActionKind::backward_input;
  }
  for (int c = 0; c < s.chunks; ++c) {
    ChunkInfo info;
    info.layers = {p.first_layer(rank_, c), p.layer_count(rank_, c)};
    const int vs = p.virtual_stage(rank_, c);
    info.embedding = vs == 0;
    info.head = vs == p.virtual_stages() - 1;
    info.activation_bytes = measure_chunk_bytes(
        g, config_.micro_batch, config_.seq, info.layers, info.embedding, info.head, split_, tp_,
        sp, model.recompute(), model.bf16_activations(), model.cp().size() > 1,
        model.cp().kept_bytes_per_block(config_.micro_batch, config_.seq, g.channels / tp_,
                                        g.heads / tp_, model.recompute(),
                                        g.kv_heads_per_tp_rank(tp_)));
    chunks_.push_back(info);
  }
  const size_t slots = static_cast<size_t>(s.chunks * s.microbatches);
  acts_.resize(slots);
  stashes_.resize(slots);
  activation_sends_.resize(slots);
  activation_messages_.resize(slots);
  received_activations_.resize(slots);
  received_gradients_.resize(slots);
  input_gradients_.resize(slots);
  spare_.resize(static_cast<size_t>(s.chunks));
  backwards_done_.assign(static_cast<size_t>(s.chunks), 0);
  weights_done_.assign(static_cast<size_t>(s.chunks), 0);
}

int64_t PipelineExecutor::chunk_activation_bytes(int chunk) const {
  return chunks_.at(static_cast<size_t>(chunk)).activation_bytes;
}

int64_t PipelineExecutor::microbatch_activation_bytes() const {
  int64_t sum = 0;
  for (const ChunkInfo& c : chunks_) sum += c.activation_bytes;
  return sum;
}

std::unique_ptr<model::GptActivations> PipelineExecutor::take_activations(int chunk) {
  std::vector<std::unique_ptr<model::GptActivations>>& spares = spare_[static_cast<size_t>(chunk)];
  if (!spares.empty()) {
    std::unique_ptr<model::GptActivations> acts = std::move(spares.back());
    spares.pop_back();
    return acts;
  }
  const ChunkInfo& c = chunks_[static_cast<size_t>(chunk)];
  return std::make_unique<model::GptActivations>(
      model_.config(), config_.micro_batch, config_.seq, tracker_, c.layers, c.embedding, c.head,
      tp_, model_.tp().sequence_parallel(), model_.recompute(), model_.bf16_activations(),
      model_.cp().size() > 1);
}

void PipelineExecutor::give_back(int chunk, std::unique_ptr<model::GptActivations> acts) {
  // With one chunk per rank every set is kept: a set is made only when none is spare, so those
  // held (spare or in flight) are as many as were ever in flight at once, and a step that frees
  // and makes sets again would fault their pages in anew each time (a 1F1B stage with two
  // micro-batches in flight, whose second set was made and freed every step, faulted ~2,400
  // pages a step in an MPI rank). With more chunks none is kept: a chunk's spare held while
  // another chunk's micro-batches peak would hold more than the in-flight peak.
  if (config_.schedule.chunks == 1) spare_[static_cast<size_t>(chunk)].push_back(std::move(acts));
}

PipelineExecutor::Message PipelineExecutor::new_message() const {
  Message m;
  if (config_.bf16_activations) {
    m.b16 = Buffer<bf16>(element_count_, MemoryTag::communication, tracker_);
  } else {
    m.f32 = Buffer<float>(element_count_, MemoryTag::communication, tracker_);
  }
  return m;
}

PipelineExecutor::Message PipelineExecutor::pack(const float* values) const {
  Message m = new_message();
  if (config_.bf16_activations) {
    to_bf16(values, m.b16.data(), element_count_);
  } else {
    copy_floats(m.f32.data(), values, element_count_);
  }
  return m;
}

void PipelineExecutor::unpack(const Message& m, float* values) const {
  if (!m.b16.empty()) {
    to_float(m.b16.data(), values, element_count_);
  } else {
    copy_floats(values, m.f32.data(), element_count_);
  }
}

int64_t PipelineExecutor::message_bytes() const {
  return element_count_ *
         static_cast<int64_t>(config_.bf16_activations ? sizeof(bf16) : sizeof(float));
}

// Posts every send and receive of the group [begin, end), then waits for the receives.
void PipelineExecutor::post_group(const std::vector<plan::Action>& list, size_t begin, size_t end,
                                  std::vector<MeasuredAction>& out) {
  const double posted = now_us();
  // A peer that fails or exits while we wait is reported with the group we were in.
  comm::OperationScope scope(comm_, str("pipeline ", to_string(list[begin]),
                                        " (send/receive group #", groups_posted_++, ")"));
  std::vector<std::pair<size_t, comm::RequestPtr>> receives;
  const int64_t bytes = message_bytes();
  for (size_t k = begin; k < end; ++k) {
    const plan::Action& a = list[k];
    const int idx = index(a.microbatch, a.chunk);
    const auto i = static_cast<size_t>(idx);
    switch (a.kind) {
      case plan::ActionKind::send_activation: {
        DTRAIN_CHECK(acts_[i] != nullptr, "rank ", rank_, ": ", to_string(a),
                     " before its forward");
        const float* output = acts_[i]->head().x_final;
        if (config_.bf16_activations) activation_messages_[i] = pack(output);
        activation_sends_[i] =
            comm_.isend(config_.bf16_activations ? activation_messages_[i].data() : output, bytes,
                        a.peer, kTagPipelineActivation);
        break;
      }
      case plan::ActionKind::send_gradient: {
        DTRAIN_CHECK(!input_gradients_[i].empty(), "rank ", rank_, ": ", to_string(a),
                     " before its backward");
        PendingSend send;
        send.buffer = std::move(input_gradients_[i]);
        send.request = comm_.isend(send.buffer.data(), bytes, a.peer, kTagPipelineGradient);
        pending_sends_.push_back(std::move(send));
        break;
      }
      case plan::ActionKind::recv_activation:
        received_activations_[i] = new_message();
        receives.emplace_back(
            k, comm_.irecv(received_activations_[i].data(), bytes, a.peer, kTagPipelineActivation));
        break;
      case plan::ActionKind::recv_gradient:
        received_gradients_[i] = new_message();
        receives.emplace_back(
            k, comm_.irecv(received_gradients_[i].data(), bytes, a.peer, kTagPipelineGradient));
        break;
      default:
        DTRAIN_CHECK(false, "rank ", rank_, ": compute action in a communication group");
    }
    if (is_send(a.kind)) out[k] = {a, posted, now_us()};
  }
  for (auto& [k, request] : receives) {
    request->wait();
    out[k] = {list[k], posted, now_us()};
  }
  reap_sends(false);
}

void PipelineExecutor::reap_sends(bool wait_all) {
  std::erase_if(pending_sends_, [&](PendingSend& s) {
    if (wait_all) s.request->wait();
    return wait_all || s.request->done();
  });
}

void PipelineExecutor::release_activations(int idx) {
  const auto i = static_cast<size_t>(idx);
  if (activation_sends_[i] != nullptr) {
    activation_sends_[i]->wait();  // the send reads the output until it completes
    activation_sends_[i].reset();
    activation_messages_[i].release();
  }
  const int chunk = idx / config_.schedule.microbatches;
  live_bytes_ -= chunks_[static_cast<size_t>(chunk)].activation_bytes;
  give_back(chunk, std::move(acts_[i]));
  stashes_[i].reset();
}

void PipelineExecutor::forward_units(const ChunkInfo& c, model::GptActivations& acts,
                                     std::span<const int32_t> tokens,
                                     std::span<const int32_t> targets, double* loss_sum) {
  // The embedding reads wte and wpe, the LM head the tied wte: the unit stays held through a
  // forward that runs either (both, with one stage). An untied head's stage holds none.
  const int emb = units_.embeddings();
  const bool embeddings = emb >= 0 && (c.embedding || c.head);
  if (embeddings) hooks_->prefetch(emb);
  if (c.layers.count > 0) hooks_->prefetch(units_.block(c.layers.first));
  if (embeddings) hooks_->acquire(emb);
  if (c.embedding) model_.embedding_forward(acts, workspace_, tokens);
  for (int64_t l = c.layers.first; l < c.layers.end(); ++l) {
    const int u = units_.block(l);
    hooks_->acquire(u);
    if (l + 1 < c.layers.end()) {
      hooks_->prefetch(units_.block(l + 1));
    } else if (c.head) {
      hooks_->prefetch(units_.final_norm());
    }
    model_.block_forward(acts, workspace_, l);
    hooks_->release(u);
  }
  if (c.head) {
    hooks_->acquire(units_.final_norm());
    const float loss = model_.head_forward(acts, targets);
    if (loss_sum != nullptr) *loss_sum += loss;
    hooks_->release(units_.final_norm());
  }
  if (embeddings) hooks_->release(emb);
}

void PipelineExecutor::forward(const plan::Action& a, std::span<const int32_t> tokens,
                               std::span<const int32_t> targets) {
  const ChunkInfo& c = chunks_[static_cast<size_t>(a.chunk)];
  const auto i = static_cast<size_t>(index(a.microbatch, a.chunk));
  DTRAIN_CHECK(acts_[i] == nullptr, "rank ", rank_, ": ", to_string(a), " runs twice");
  acts_[i] = take_activations(a.chunk);
  if (split_) {
    stashes_[i] = std::make_unique<model::WeightGradStash>(model_.config(), config_.micro_batch,
                                                           config_.seq, tracker_, c.layers, tp_);
  }
  live_bytes_ += c.activation_bytes;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  model::GptActivations& acts = *acts_[i];
  const int64_t bt = config_.micro_batch * config_.seq;
  if (!c.embedding) {
    DTRAIN_CHECK(!received_activations_[i].empty(), "rank ", rank_, ": ", to_string(a),
                 " before its activation arrived");
    unpack(received_activations_[i], acts.layer(c.layers.first).ln1_in);
    received_activations_[i].release();
  }
  forward_units(c, acts, c.embedding ? rows(tokens, a.microbatch, bt) : tokens,
                c.head ? rows(targets, a.microbatch, bt) : targets, &loss_sum_);
  if (model_.config().moe.enabled()) {
    for (int64_t l = c.layers.first; l < c.layers.end(); ++l) {
      if (const model::MoeRouting* r = model_.moe_routing(acts, l)) {
        moe_.add(*r);
        moe_.expert_rows.push_back(model_.moe_expert_rows(acts, l));
      }
    }
    moe_.aux_loss_sum += model_.moe_aux_loss(acts);
    if (c.embedding) ++moe_.microbatches;  // once per micro-batch, on its first chunk
  }
}

void PipelineExecutor::backward(const plan::Action& a) {
  const ChunkInfo& c = chunks_[static_cast<size_t>(a.chunk)];
  const int idx = index(a.microbatch, a.chunk);
  const auto i = static_cast<size_t>(idx);
  DTRAIN_CHECK(acts_[i] != nullptr, "rank ", rank_, ": ", to_string(a), " before its forward");
  model::GptActivations& acts = *acts_[i];
  const bool input_only = a.kind == plan::ActionKind::backward_input;  // W comes later
  const bool last =
      ++backwards_done_[static_cast<size_t>(a.chunk)] == config_.schedule.microbatches;
  const int emb = units_.embeddings();
  // d(mean over M micro-batches)/d(micro-batch mean) = 1/M: the scale of the head's
  // cross-entropy gradient and of every MoE block's aux-loss gradient, on whichever chunk the
  // block runs (a chunk without the head never runs head_backward, which also sets it).
  const float loss_scale = 1.0f / static_cast<float>(config_.schedule.microbatches);
  acts.loss_scale = loss_scale;
  if (c.head) {
    const int lnf = units_.final_norm();
    // An untied head (Llama's lm_head, in the final norm's unit) reads no embeddings unit; a
    // stage with the embedding still holds it through the head's backward, as with a tied one.
    const bool with_emb = emb >= 0;
    hooks_->prefetch(lnf);
    if (with_emb) hooks_->prefetch(emb);
    if (c.layers.count > 0) hooks_->prefetch(units_.block(c.layers.end() - 1));
    hooks_->acquire(lnf);
    if (with_emb) hooks_->acquire(emb);
    hooks_->begin_backward(lnf);
    if (with_emb) hooks_->begin_backward(emb);
    model_.head_backward(acts, workspace_, loss_scale);
    if (with_emb) hooks_->release(emb);
    hooks_->release(lnf);
    hooks_->end_backward(lnf, last);
    // The tied copy's gradient is the head's alone (the embedding's half is another stage's).
    if (with_emb && !c.embedding) hooks_->end_backward(emb, last);
  } else {
    DTRAIN_CHECK(!received_gradients_[i].empty(), "rank ", rank_, ": ", to_string(a),
                 " before its gradient arrived");
    if (c.layers.count > 0) hooks_->prefetch(units_.block(c.layers.end() - 1));
    unpack(received_gradients_[i], workspace_.dres);
    received_gradients_[i].release();
  }
  for (int64_t l = c.layers.end() - 1; l >= c.layers.first; --l) {
    const int u = units_.block(l);
    hooks_->acquire(u);
    if (l > c.layers.first) hooks_->prefetch(units_.block(l - 1));
    hooks_->begin_backward(u);
    if (input_only) {
      model_.block_backward_input(acts, workspace_, l, *stashes_[i]);
    } else {
      model_.block_backward(acts, workspace_, l);
    }
    hooks_->release(u);
    if (!input_only) hooks_->end_backward(u, last);
  }
  if (c.embedding) {
    hooks_->begin_backward(emb);
    model_.embedding_backward(acts, workspace_);
    hooks_->end_backward(emb, last);
  } else {
    input_gradients_[i] = pack(workspace_.dres);
  }
  if (!input_only) release_activations(idx);
}

void PipelineExecutor::backward_weight(const plan::Action& a) {
  const ChunkInfo& c = chunks_[static_cast<size_t>(a.chunk)];
  const int idx = index(a.microbatch, a.chunk);
  const auto i = static_cast<size_t>(idx);
  DTRAIN_CHECK(acts_[i] != nullptr && stashes_[i] != nullptr, "rank ", rank_, ": ", to_string(a),
               " before its forward and backward_input");
  const bool last = ++weights_done_[static_cast<size_t>(a.chunk)] == config_.schedule.microbatches;
  // W reads no weights, unless full recompute reruns the block's forward first.
  const bool rerun = model_.recompute() == Recompute::full;
  for (int64_t l = c.layers.end() - 1; l >= c.layers.first; --l) {
    const int u = units_.block(l);
    if (rerun) hooks_->acquire(u);
    if (rerun && l > c.layers.first) hooks_->prefetch(units_.block(l - 1));
    hooks_->begin_backward(u);
    model_.block_backward_weight(*acts_[i], workspace_, *stashes_[i], l);
    if (rerun) hooks_->release(u);
    hooks_->end_backward(u, last);
  }
  release_activations(idx);
}

PipelineStepRecord PipelineExecutor::run(std::span<const int32_t> tokens,
                                         std::span<const int32_t> targets) {
  const plan::PipelineSchedule& s = config_.schedule;
  const int64_t rows_total = static_cast<int64_t>(s.microbatches) * config_.micro_batch;
  const auto expected = static_cast<size_t>(rows_total * config_.seq);
  if (model_.stage().embedding) {
    DTRAIN_CHECK(tokens.size() == expected, "pipeline: rank ", rank_, " expected ", expected,
                 " tokens (M*b*T), got ", tokens.size());
  }
  if (model_.stage().head) {
    DTRAIN_CHECK(targets.size() == expected, "pipeline: rank ", rank_, " expected ", expected,
                 " targets (M*b*T), got ", targets.size());
  }
  const std::vector<plan::Action>& list = s.per_rank[static_cast<size_t>(rank_)];
  PipelineStepRecord record;
  record.actions.resize(list.size());
  live_bytes_ = 0;
  peak_bytes_ = 0;
  loss_sum_ = 0;
  moe_ = {};
  std::fill(backwards_done_.begin(), backwards_done_.end(), 0);
  std::fill(weights_done_.begin(), weights_done_.end(), 0);
  size_t k = 0;
  while (k < list.size()) {
    const plan::Action& a = list[k];
    if (!is_compute(a.kind)) {
      const size_t end = communication_group_end(list, k);
      post_group(list, k, end, record.actions);
      k = end;
      continue;
    }
    const double start = now_us();
    switch (a.kind) {
      case plan::ActionKind::forward:
        forward(a, tokens, targets);
        break;
      case plan::ActionKind::backward:
      case plan::ActionKind::backward_input:  // without the linears' weight gradients (W's)
        backward(a);
        break;
      default:  // backward_weight
        backward_weight(a);
        break;
    }
    record.actions[k] = {a, start, now_us()};
    ++k;
  }
  reap_sends(true);
  for (size_t i = 0; i < acts_.size(); ++i) {
    DTRAIN_CHECK(acts_[i] == nullptr, "pipeline: rank ", rank_, " finished the step with ",
                 "activations of micro-batch ", static_cast<int>(i) % s.microbatches,
                 " still held (a forward without its backward)");
  }
  record.peak_inflight_bytes = peak_bytes_;
  record.moe = moe_;
  record.loss =
      model_.stage().head ? static_cast<float>(loss_sum_ / static_cast<double>(s.microbatches)) : 0;
  return record;
}

float PipelineExecutor::evaluate(std::span<const int32_t> tokens,
                                 std::span<const int32_t> targets) {
  const plan::PipelineSchedule& s = config_.schedule;
  const StagePartition& p = config_.partition;
  const int64_t bt = config_.micro_batch * config_.seq;
  const int64_t bytes = message_bytes();
  const bool packed = config_.bf16_activations;
  std::vector<std::unique_ptr<model::GptActivations>> acts(static_cast<size_t>(s.chunks));
  std::vector<comm::RequestPtr> sends(static_cast<size_t>(s.chunks));
  std::vector<Message> sent(static_cast<size_t>(s.chunks));  // bf16: what each send reads
  for (int c = 0; c < s.chunks; ++c) acts[static_cast<size_t>(c)] = take_activations(c);
  double loss_sum = 0;
  // Items in (micro-batch, chunk) order: each waits only on an earlier item of another rank.
  for (int mb = 0; mb < s.microbatches; ++mb) {
    for (int c = 0; c < s.chunks; ++c) {
      const ChunkInfo& info = chunks_[static_cast<size_t>(c)];
      const int vs = p.virtual_stage(rank_, c);
      model::GptActivations& a = *acts[static_cast<size_t>(c)];
      comm::RequestPtr& send = sends[static_cast<size_t>(c)];
      if (send != nullptr) send->wait();  // its buffer is about to be rewritten
      if (!info.embedding && packed) {
        Message in = new_message();
        comm_.recv(in.data(), bytes, p.rank_of(vs - 1), kTagPipelineEvalActivation);
        unpack(in, a.layer(info.layers.first).ln1_in);
      } else if (!info.embedding) {
        comm_.recv(a.layer(info.layers.first).ln1_in, bytes, p.rank_of(vs - 1),
                   kTagPipelineEvalActivation);
      }
      forward_units(info, a, info.embedding ? rows(tokens, mb, bt) : tokens,
                    info.head ? rows(targets, mb, bt) : targets, &loss_sum);
      if (!info.head) {
        Message& out = sent[static_cast<size_t>(c)];
        if (packed) out = pack(a.head().x_final);
        send = comm_.isend(packed ? out.data() : a.head().x_final, bytes, p.rank_of(vs + 1),
                           kTagPipelineEvalActivation);
      }
    }
  }
  for (comm::RequestPtr& send : sends) {
    if (send != nullptr) send->wait();
  }
  for (int c = 0; c < s.chunks; ++c) give_back(c, std::move(acts[static_cast<size_t>(c)]));
  model_.release_attention_state();  // no backward follows: a CP group's kept state goes
  return model_.stage().head ? static_cast<float>(loss_sum / static_cast<double>(s.microbatches))
                             : 0.0f;
}

namespace {

trace::SpanKind span_kind(plan::ActionKind kind) {
  switch (kind) {
    case plan::ActionKind::forward:
      return trace::SpanKind::forward;
    case plan::ActionKind::backward:
      return trace::SpanKind::backward;
    case plan::ActionKind::backward_input:
      return trace::SpanKind::backward_input;
    case plan::ActionKind::backward_weight:
      return trace::SpanKind::backward_weight;
    case plan::ActionKind::send_activation:
    case plan::ActionKind::send_gradient:
      return trace::SpanKind::send;
    case plan::ActionKind::recv_activation:
    case plan::ActionKind::recv_gradient:
      return trace::SpanKind::recv;
  }
  return trace::SpanKind::other;
}

}  // namespace

trace::Timeline to_measured_timeline(const plan::PipelineSchedule& schedule,
                                     const std::vector<std::vector<MeasuredAction>>& actions,
                                     double origin_us) {
  trace::Timeline timeline;
  timeline.time_unit = "us";
  for (size_t r = 0; r < actions.size(); ++r) {
    trace::TimelineRow row;
    row.name = str("rank ", r);
    for (const MeasuredAction& m : actions[r]) {
      const plan::Action& a = m.action;
      const std::string label = is_compute(a.kind) ? short_label(a, schedule.chunks) : to_string(a);
      row.spans.push_back({label, span_kind(a.kind), a.microbatch, a.chunk, m.start_us - origin_us,
                           m.end_us - origin_us});
    }
    timeline.rows.push_back(std::move(row));
  }
  return timeline;
}

MeasuredBubble measured_bubble(const plan::PipelineSchedule& schedule,
                               const std::vector<std::vector<MeasuredAction>>& actions) {
  MeasuredBubble b;
  double first = 0, last = 0;
  bool any = false;
  double forward = 0, backward = 0, weight = 0;
  for (const std::vector<MeasuredAction>& rank : actions) {
    double busy = 0;
    for (const MeasuredAction& m : rank) {
      first = any ? std::min(first, m.start_us) : m.start_us;
      last = any ? std::max(last, m.end_us) : m.end_us;
      any = true;
      if (!is_compute(m.action.kind)) continue;
      const double d = m.end_us - m.start_us;
      busy += d;
      if (m.action.kind == plan::ActionKind::forward) forward += d;
      if (m.action.kind == plan::ActionKind::backward ||
          m.action.kind == plan::ActionKind::backward_input) {
        backward += d;
      }
      if (m.action.kind == plan::ActionKind::backward_weight) weight += d;
    }
    b.busy_us.push_back(busy);
  }
  const auto P = static_cast<double>(actions.size());
  const double per = P * static_cast<double>(schedule.microbatches);
  if (!any || per == 0) return b;
  b.makespan_us = last - first;
  double busy_sum = 0;
  for (double x : b.busy_us) busy_sum += x;
  b.bubble_us = b.makespan_us - busy_sum / P;
  b.fraction_of_total = b.makespan_us > 0 ? b.bubble_us / b.makespan_us : 0;
  b.forward_us = forward / per;
  b.backward_input_us = backward / per;
  b.backward_weight_us = weight / per;
  return b;
}

}  // namespace dtrain::parallel
