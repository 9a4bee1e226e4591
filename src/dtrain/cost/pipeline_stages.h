// Which transformer blocks each pipeline stage runs: `--pp P` splits the L blocks into P
// stages (embedding on the first, final LayerNorm + head + loss on the last), balanced by
// default or explicit (`--stage-layers 3,3,2`), and with interleaving into P*v model chunks.
// One split for the engine (parallel/pipeline_executor.h runs it) and the planner (planner.h
// prices each stage on its own blocks).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::plan {

// The flag names errors quote, so each command's messages name its own flags.
struct PartitionFlags {
  std::string_view stages = "--pp";
  std::string_view layers = "--layers";
  std::string_view stage_layers = "--stage-layers";
  std::string_view chunks = "--interleave";
};

// L blocks cut into P*v model chunks of consecutive blocks ("virtual stages"). Virtual stage
// c runs on rank c mod P as that rank's local chunk c / P (Megatron's interleaving), so with
// v = 1 the chunks are the stages. Every block is in exactly one chunk; no chunk is empty.
//
// Example: L = 8, P = 2, v = 2 -> chunk_layers {2, 2, 2, 2}: rank 0 runs blocks 0-1 (chunk 0)
// and 4-5 (chunk 1); rank 1 runs blocks 2-3 and 6-7.
class StagePartition {
 public:
  StagePartition() = default;
  StagePartition(int stages, int chunks, std::vector<int> chunk_layers);

  int layers() const { return layers_; }  // L
  int stages() const { return stages_; }  // P
  int chunks() const { return chunks_; }  // v, model chunks per stage
  int virtual_stages() const { return stages_ * chunks_; }

  // Blocks in each virtual stage, in model order (size P*v).
  const std::vector<int>& chunk_layers() const { return chunk_layers_; }
  int virtual_stage(int rank, int chunk) const { return chunk * stages_ + rank; }
  int rank_of(int virtual_stage) const { return virtual_stage % stages_; }
  int chunk_of(int virtual_stage) const { return virtual_stage / stages_; }
  // First block of `chunk` on `rank`, and how many blocks follow it.
  int first_layer(int rank, int chunk) const;
  int layer_count(int rank, int chunk) const;
  // Blocks per rank, all chunks together (size P).
  std::vector<int> stage_layers() const;
  // The rank that owns `layer`; throws for a layer outside 0..L-1.
  int rank_of_layer(int layer) const;

  // The embedding runs before the first block, the final LayerNorm + head + loss after the
  // last; with interleaving they stay on the first and last rank.
  bool has_embedding(int rank) const { return rank == 0; }
  bool has_head(int rank) const { return rank == stages_ - 1; }

 private:
  int layers_ = 0;
  int stages_ = 0;
  int chunks_ = 0;
  std::vector<int> chunk_layers_;  // (P*v)
  std::vector<int> chunk_first_;   // (P*v) prefix sums of chunk_layers_
};

// The balanced split of L blocks into P*v chunks: every chunk gets floor(L / (P*v)) blocks,
// and the L mod (P*v) extra blocks go to the interior chunks first (virtual stages 1, 2, ...,
// P*v-2), then to chunk 0, never to the last chunk. Why: the last stage also runs the final
// LayerNorm, the vocabulary-sized head and the loss, usually the heaviest compute of any stage,
// and the first stage holds the most in-flight activations under 1F1B (P micro-batches against
// 1 on the last) plus the embedding table; the interior stages carry neither. Since there are
// at most P*v-1 extra blocks, the first chunk gets one only when every interior chunk has one.
// Throws when L < P*v (a chunk would be empty), naming the flags.
StagePartition balanced_partition(int layers, int stages, int chunks = 1,
                                  const PartitionFlags& flags = {});

// The balanced split one chunk at a time, with nothing built (the planner asks per stage on
// every layout it evaluates): the blocks of virtual stage `vs` of `chunks_total` = P*v, and the
// first block it runs. Needs 0 <= vs < chunks_total <= layers. Llama 3 405B's pipeline (Dubey et
// al. 2024 §3.3.2): L = 126, P = 16 -> 7, 8 x 14, 7 (the first and the last stage one fewer).
int64_t balanced_chunk_layers(int64_t layers, int64_t chunks_total, int64_t vs);
int64_t balanced_chunk_first(int64_t layers, int64_t chunks_total, int64_t vs);
// The blocks of pipeline stage `stage` over its `chunks` virtual stages (stage, stage + P, ...)
// of the balanced split of `layers` over P = `stages` ranks: the sum of balanced_chunk_layers
// over them, with the split's remainder worked out once. Needs 0 <= stage < stages and
// stages * chunks <= layers.
int64_t balanced_stage_layers(int64_t layers, int64_t stages, int64_t chunks, int64_t stage);
// Every stage's blocks at once (stage_layers() of balanced_partition), and the most any stage
// holds: what the planner asks on every layout, with the remainder worked out once.
std::vector<int64_t> balanced_stage_layer_counts(int64_t layers, int64_t stages, int64_t chunks);
int64_t balanced_most_stage_layers(int64_t layers, int64_t stages, int64_t chunks);

// An explicit split: `chunk_layers` lists the blocks of each virtual stage (P entries with
// v = 1, P*v with interleaving). Throws when an entry is < 1, the count is wrong or the sum is
// not L: `--stage-layers 3,3,1 sums to 7, not --layers 8`.
StagePartition explicit_partition(int layers, int stages, int chunks,
                                  std::span<const int> chunk_layers,
                                  const PartitionFlags& flags = {});

// The blocks `rank` runs, for reports: "0-3", or per chunk "0-1,4-5".
std::string layer_ranges(const StagePartition& partition, int rank);

// "3,3,2" -> {3, 3, 2}; throws naming `flag` on anything that is not a comma-separated list
// of positive integers.
std::vector<int> parse_stage_layers(std::string_view text, std::string_view flag);

}  // namespace dtrain::plan
