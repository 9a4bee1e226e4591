// Data parallelism's bookkeeping: the units whose gradients backward finishes together, the
// gradient buckets built from them, and the overlap of communication with compute.
//
// Buckets are made of whole units: the final LayerNorm, each block, and the embeddings (wte and
// wpe, final only after embedding_backward because the LM head is tied to wte). A block's
// gradients are known only when block_backward returns, so a unit is the finest grain at which
// a gradient is final. Each unit is one contiguous range of the flat buffer, and in backward
// order each lies just below the previous one, so a bucket of consecutive units is one
// contiguous range too: it is reduced where it lies, with no packing copy.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dtrain/model/gpt_stage.h"
#include "dtrain/model/param_table.h"

namespace dtrain::parallel {

struct GradUnit {
  std::string name;    // "lnf", "h.3", "embeddings"
  int64_t offset = 0;  // flat range, in elements
  int64_t count = 0;
};

// The units of a stage model, in the order backward finishes them: the final LayerNorm (with
// the head), the stage's blocks from the last down (every chunk's), then the embeddings (wte and
// wpe, with the embedding; "wte" alone on a pipeline's last stage, the LM head's copy of the tied
// table). Each unit is one contiguous range of the stage's flat buffer and lies just below the
// previous one, so together they tile it. For the whole model: lnf, h.(L-1), ..., h.0,
// embeddings.
class StageUnits {
 public:
  StageUnits() = default;
  // `table` is the stage's (model::gpt_stage_param_table, possibly cut for a TP rank). Throws if
  // the table is not laid out in GPT order.
  StageUnits(const model::ParamTable& table, const model::GptStage& stage);

  const std::vector<GradUnit>& units() const { return units_; }
  int size() const { return static_cast<int>(units_.size()); }
  const GradUnit& operator[](int unit) const { return units_[static_cast<size_t>(unit)]; }
  int final_norm() const { return final_norm_; }  // -1 unless the stage holds the head
  int embeddings() const { return embeddings_; }  // -1 when the stage holds no wte
  int block(int64_t layer) const;                 // throws for a block the stage lacks

 private:
  std::vector<GradUnit> units_;
  std::vector<int> block_unit_;  // (L) unit index of each block, -1 for blocks elsewhere
  int final_norm_ = -1, embeddings_ = -1;
};

struct Bucket {
  int first_unit = 0;  // indices into the units, in backward order, inclusive
  int last_unit = 0;   // the bucket is final when this unit's backward returns
  int64_t offset = 0;  // one contiguous flat range, in elements
  int64_t count = 0;
};

// Walks the units in backward order and closes a bucket as soon as it holds at least
// `bucket_bytes` (so every bucket but the last reaches the size; a unit larger than the size
// is a bucket of its own). `bytes_per_element`: 4 for fp32 gradients.
std::vector<Bucket> make_buckets(std::span<const GradUnit> units, int64_t bucket_bytes,
                                 int64_t bytes_per_element = 4);
// The bucket holding unit `unit`.
int bucket_of(std::span<const Bucket> buckets, int unit);

struct TimeInterval {
  double begin_us = 0;
  double end_us = 0;
  double length_us() const { return end_us - begin_us; }
};

// Time of the `comm` intervals that lies inside the `compute` windows (disjoint windows).
double hidden_us(std::span<const TimeInterval> comm, std::span<const TimeInterval> compute);
// hidden_us / total communication time: the share of communication hidden behind compute
// (0 when there was no communication).
double overlap_share(std::span<const TimeInterval> comm, std::span<const TimeInterval> compute);

}  // namespace dtrain::parallel
