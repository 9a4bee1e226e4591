// model_differences: what makes a checkpoint's model another than the run's, field by field, for
// the resume check's message (checkpoint.h).
#include <string>
#include <vector>

#include "dtrain/checkpoint/checkpoint.h"
#include "dtrain/core/check.h"

namespace dtrain::checkpoint {

std::vector<std::string> model_differences(const model::GptConfig& checkpoint,
                                           const model::GptConfig& run, bool training_settings) {
  std::vector<std::string> out;
  const auto differ = [&](const char* name, auto was, auto now) {
    if (was != now) out.push_back(str(name, " ", was, " (this run: ", now, ")"));
  };
  differ("vocab", checkpoint.vocab, run.vocab);
  differ("context", checkpoint.context, run.context);
  differ("layers", checkpoint.layers, run.layers);
  differ("heads", checkpoint.heads, run.heads);
  differ("channels", checkpoint.channels, run.channels);
  differ("family", name(checkpoint.family), name(run.family));
  if (checkpoint.llama() && run.llama()) {
    differ("kv-heads", checkpoint.kv_heads_or_heads(), run.kv_heads_or_heads());
    differ("ffn-hidden", checkpoint.ffn(), run.ffn());
    differ("rope-theta", checkpoint.rope_theta, run.rope_theta);
    differ("norm-eps", checkpoint.norm_eps, run.norm_eps);
    differ("tie-embeddings", checkpoint.tie_embeddings, run.tie_embeddings);
  }
  const model::MoeConfig &a = checkpoint.moe, &b = run.moe;
  if (a.enabled() != b.enabled()) {
    out.push_back(a.enabled() ? str("experts ", a.experts, " (this run: dense)")
                              : str("dense (this run: experts ", b.experts, ")"));
    return out;
  }
  if (!a.enabled()) return out;
  differ("experts", a.experts, b.experts);
  differ("top-k", a.top_k, b.top_k);
  differ("moe-every", a.every, b.every);
  if (!training_settings) return out;
  differ("capacity-factor", a.capacity_factor, b.capacity_factor);
  differ("aux-loss-coef", a.aux_loss_coef, b.aux_loss_coef);
  return out;
}

}  // namespace dtrain::checkpoint
