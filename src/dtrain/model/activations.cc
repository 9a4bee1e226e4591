// Carves the per-block, head and workspace buffers into named tensors; a recompute mode's
// dropped block tensors go to the workspace instead of each block.
#include "dtrain/model/activations.h"

#include "dtrain/core/check.h"
#include "dtrain/model/block_ops.h"
#include "dtrain/model/tp_shard.h"

namespace dtrain::model {
namespace {

// Hands out consecutive slices of a buffer; first counts (base null), then assigns.
template <typename T>
class BasicCarver {
 public:
  explicit BasicCarver(T* base) : base_(base) {}
  T* take(int64_t count) {
    T* p = base_ != nullptr ? base_ + used_ : nullptr;
    used_ += count;
    return p;
  }
  int64_t used() const { return used_; }

 private:
  T* base_;
  int64_t used_ = 0;
};
using Carver = BasicCarver<float>;

using block::Widths;

// Which of a block's tensors to carve: those `recompute` keeps in the block, or those it
// drops (the workspace's scratch). The two together are the whole block of Recompute::none.
// Under bf16 storage the block's kept fp32 part is the input and the LayerNorm statistics, and
// its `packed` part the other kept tensors (carve_packed).
enum class Part { kept, dropped, kept_fp32 };

// `rows`: the token rows of the residual-stream tensors (B*T, or B*T/tp under sequence
// parallelism). `blockwise`: attention runs blockwise across a CP group (cp_hooks.h), which keeps
// no softmax output at all (its backward recomputes each block's probabilities from Q, K and the
// log-sum-exp the group keeps), so `att` is carved in no part.
void carve_layer(LayerActivations& a, Carver& c, const GptConfig& g, int64_t B, int64_t T, int tp,
                 int64_t rows, Recompute recompute, Part part, bool blockwise) {
  const int64_t BT = B * T, C = g.channels;
  const int64_t C_local = C / tp, NH_local = g.heads / tp;
  const Widths w = block::widths(g, tp);
  const bool means = !g.llama();  // RMSNorm keeps 1/rms alone
  const bool full = recompute == Recompute::full;
  const bool scores = recompute != Recompute::none;  // selective and full drop the softmax
  // `field` gets `count` floats when its tensor belongs to `part` (dropped: the mode drops it;
  // `packable`: only matrix products read it, so bf16 storage keeps it packed, not fp32).
  auto take = [&](float*& field, int64_t count, bool dropped, bool packable = true) {
    const bool mine = part == Part::dropped ? dropped
                      : part == Part::kept  ? !dropped
                                            : !dropped && !packable;
    if (mine) field = c.take(count);
  };
  take(a.ln1_in, rows * C, false, false);  // the block input: kept in every mode
  take(a.ln1_out, rows * C, full);
  if (means) take(a.ln1_mean, rows, full, false);
  take(a.ln1_rstd, rows, full, false);
  take(a.qkv, BT * w.qkv, full);
  if (!blockwise) take(a.att, B * NH_local * T * T, scores, false);
  take(a.atty, BT * C_local, full);
  take(a.ln2_in, rows * C, full, false);
  take(a.ln2_out, rows * C, full);
  if (means) take(a.ln2_mean, rows, full, false);
  take(a.ln2_rstd, rows, full, false);
  take(a.fc, BT * w.fc, full, false);
  take(a.fc_gelu, BT * w.act, full);
}

// The packed (bf16) part of a block under bf16 storage: the kept tensors only matrix products
// read, in carve_layer's order.
void carve_packed(PackedLayer& a, BasicCarver<bf16>& c, const GptConfig& g, int64_t B, int64_t T,
                  int tp, int64_t rows) {
  const int64_t BT = B * T, C = g.channels, C_local = C / tp;
  const Widths w = block::widths(g, tp);
  a.ln1_out = c.take(rows * C);
  a.qkv = c.take(BT * w.qkv);
  a.atty = c.take(BT * C_local);
  a.ln2_out = c.take(rows * C);
  a.fc_gelu = c.take(BT * w.act);
}

void carve_head(HeadActivations& a, Carver& c, const GptConfig& g, int64_t B, int64_t T, int tp) {
  const int64_t BT = B * T, C = g.channels;
  a.x_final = c.take(BT * C);
  a.lnf_out = c.take(BT * C);
  if (!g.llama()) a.lnf_mean = c.take(BT);
  a.lnf_rstd = c.take(BT);
  a.logits = c.take(BT * (tp == 1 ? g.vocab : tp_vocab_local(g.vocab, tp)));
  a.losses = c.take(BT);
}

void check_shape(const GptConfig& g, int64_t B, int64_t T) {
  validate(g);
  DTRAIN_CHECK(B > 0, "--global-batch must be positive (got ", B, ")");
  DTRAIN_CHECK(T > 0, "--seq-length must be positive (got ", T, ")");
  DTRAIN_CHECK(T <= g.context, "--seq-length ", T, " exceeds --context ", g.context);
}

}  // namespace

GptActivations::GptActivations(const GptConfig& g, int64_t B, int64_t T, MemoryTracker* tracker)
    : GptActivations(g, B, T, tracker, {0, g.layers}, true, true) {}

GptActivations::GptActivations(const GptConfig& g, int64_t B, int64_t T, MemoryTracker* tracker,
                               LayerRange range, bool embedding, bool head, int tp,
                               bool sequence_parallel, Recompute recompute, bool bf16_storage,
                               bool blockwise_attention)
    : B_(B),
      T_(T),
      range_(range),
      recompute_(recompute),
      bf16_storage_(bf16_storage),
      packed_(bf16_storage && recompute != Recompute::full) {
  check_shape(g, B, T);
  check_tensor_parallel(g, tp);
  const bool sp = sequence_parallel && tp > 1;
  if (sp) check_sequence_parallel(B, T, tp);
  const int64_t rows = sp ? B * T / tp : B * T;
  DTRAIN_CHECK(range.first >= 0 && range.count >= 0 && range.end() <= g.layers,
               "GptActivations: blocks [", range.first, ", ", range.end(), ") outside the ",
               g.layers, " blocks");
  const Part part = packed_ ? Part::kept_fp32 : Part::kept;
  LayerActivations probe;
  Carver counter(nullptr);
  carve_layer(probe, counter, g, B, T, tp, rows, recompute, part, blockwise_attention);
  PackedLayer packed_probe;
  BasicCarver<bf16> packed_counter(nullptr);
  if (packed_) carve_packed(packed_probe, packed_counter, g, B, T, tp, rows);
  layers_.resize(static_cast<size_t>(g.layers));
  packed_layers_.resize(static_cast<size_t>(g.layers));
  moe_layers_.resize(static_cast<size_t>(g.layers));
  for (int64_t l = range.first; l < range.end(); ++l) {
    layer_storage_.emplace_back(counter.used(), MemoryTag::activations, tracker);
    Carver c(layer_storage_.back().data());
    carve_layer(layers_[static_cast<size_t>(l)], c, g, B, T, tp, rows, recompute, part,
                blockwise_attention);
    if (!packed_) continue;
    packed_storage_.emplace_back(packed_counter.used(), MemoryTag::activations, tracker);
    BasicCarver<bf16> pc(packed_storage_.back().data());
    carve_packed(packed_layers_[static_cast<size_t>(l)], pc, g, B, T, tp, rows);
  }
  if (head) {
    Carver head_counter(nullptr);
    carve_head(head_, head_counter, g, B, T, tp);
    head_storage_ = Buffer<float>(head_counter.used(), MemoryTag::activations, tracker);
    Carver hc(head_storage_.data());
    carve_head(head_, hc, g, B, T, tp);
  } else {
    // The chunk's output, sent to the next stage: this rank's rows under sequence parallelism.
    head_storage_ = Buffer<float>(rows * g.channels, MemoryTag::activations, tracker);
    head_.x_final = head_storage_.data();
  }
  if (head) {
    id_storage_ = Buffer<int32_t>(2 * B * T, MemoryTag::activations, tracker);
    head_.tokens = id_storage_.data();
    head_.targets = id_storage_.data() + B * T;
  } else if (embedding) {
    id_storage_ = Buffer<int32_t>(B * T, MemoryTag::activations, tracker);
    head_.tokens = id_storage_.data();
  }
}

GptWorkspace::GptWorkspace(const GptConfig& g, int64_t B, int64_t T, MemoryTracker* tracker,
                           int team_threads, int tp, bool sp, Recompute mode, bool bf16,
                           bool blockwise_attention)
    : batch(B),
      seq(T),
      threads(team_threads),
      sequence_parallel(sp && tp > 1),
      recompute(mode),
      bf16_storage(bf16) {
  DTRAIN_CHECK(team_threads >= 1, "GptWorkspace: threads must be positive (got ", team_threads,
               ")");
  check_shape(g, B, T);
  check_tensor_parallel(g, tp);
  if (sequence_parallel) check_sequence_parallel(B, T, tp);
  const int64_t rows = sequence_parallel ? B * T / tp : B * T;
  const int64_t BT = B * T, BTC = BT * g.channels;
  const Widths w = block::widths(g, tp);
  auto carve = [&](Carver& c) {
    dres = c.take(BTC);
    d_btc1 = c.take(BTC);
    d_btc2 = c.take(BTC);
    dqkv = c.take(BT * w.qkv);
    dfc = c.take(BT * w.fc);
    dfc_gelu = c.take(BT * w.act);
    // A CP group's blockwise backward works on block pairs in its own temporaries.
    if (!blockwise_attention) datt = c.take(team_threads * T * T);
    carve_layer(dropped, c, g, B, T, tp, rows, bf16_storage ? Recompute::full : recompute,
                Part::dropped, blockwise_attention);
  };
  Carver counter(nullptr);
  carve(counter);
  storage_ = Buffer<float>(counter.used(), MemoryTag::activations, tracker);
  Carver c(storage_.data());
  carve(c);
}

}  // namespace dtrain::model
