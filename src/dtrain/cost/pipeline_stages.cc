// balanced_partition / explicit_partition: argument checks with flag-naming messages, the
// remainder rule of the balanced split, and the StagePartition lookups.
#include "dtrain/cost/pipeline_stages.h"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <sstream>

#include "dtrain/core/check.h"

namespace dtrain::plan {
namespace {

void check_shape(int layers, int stages, int chunks, const PartitionFlags& flags) {
  DTRAIN_CHECK(stages >= 1, flags.stages, " must be >= 1, got ", stages);
  DTRAIN_CHECK(chunks >= 1, flags.chunks, " must be >= 1, got ", chunks);
  DTRAIN_CHECK(layers >= 1, flags.layers, " must be >= 1, got ", layers);
  DTRAIN_CHECK(stages <= layers, flags.stages, " ", stages, " is larger than ", flags.layers, " ",
               layers);
  DTRAIN_CHECK(stages * chunks <= layers, flags.chunks, " ", chunks, " needs at least ",
               flags.stages, " * ", flags.chunks, " = ", stages * chunks,
               " layers (one per model chunk), got ", flags.layers, " ", layers);
}

// The balanced split of L blocks over n chunks: `base` each, one more on the interior chunks
// 1 .. `interior`, and `first` (0 or 1) more on chunk 0.
struct Remainder {
  int64_t base = 0, interior = 0, first = 0;
};

Remainder remainder_of(int64_t layers, int64_t n) {
  DTRAIN_CHECK(n >= 1 && n <= layers, "balanced split: ", n, " chunks for ", layers, " layers");
  const int64_t extra = layers % n;  // at most n - 1
  // Interior chunks 1 .. n-2 first, then chunk 0; the last chunk (with the head) never.
  const int64_t interior = std::min(extra, std::max<int64_t>(0, n - 2));
  return {layers / n, interior, extra - interior};
}

}  // namespace

int64_t balanced_chunk_layers(int64_t layers, int64_t chunks_total, int64_t vs) {
  const Remainder r = remainder_of(layers, chunks_total);
  if (vs == 0) return r.base + r.first;
  return r.base + (vs <= r.interior ? 1 : 0);
}

int64_t balanced_chunk_first(int64_t layers, int64_t chunks_total, int64_t vs) {
  const Remainder r = remainder_of(layers, chunks_total);
  if (vs == 0) return 0;
  return vs * r.base + r.first + std::min(vs - 1, r.interior);
}

int64_t balanced_stage_layers(int64_t layers, int64_t stages, int64_t chunks, int64_t stage) {
  DTRAIN_CHECK(stage >= 0 && stage < stages && chunks >= 1, "balanced split: stage ", stage, " of ",
               stages, " with ", chunks, " chunks");
  const Remainder r = remainder_of(layers, stages * chunks);
  // Virtual stages stage, stage + P, ...: the base each, the first's extra on virtual stage 0,
  // and one more on those among 1 .. interior.
  int64_t sum = chunks * r.base + (stage == 0 ? r.first : 0);
  for (int64_t vs = stage; vs <= r.interior; vs += stages) sum += vs >= 1 ? 1 : 0;
  return sum;
}

std::vector<int64_t> balanced_stage_layer_counts(int64_t layers, int64_t stages, int64_t chunks) {
  DTRAIN_CHECK(stages >= 1 && chunks >= 1, "balanced split: ", stages, " stages, ", chunks,
               " chunks");
  const Remainder r = remainder_of(layers, stages * chunks);
  std::vector<int64_t> counts(static_cast<size_t>(stages), chunks * r.base);
  counts[0] += r.first;
  for (int64_t vs = 1; vs <= r.interior; ++vs) counts[static_cast<size_t>(vs % stages)] += 1;
  return counts;
}

int64_t balanced_most_stage_layers(int64_t layers, int64_t stages, int64_t chunks) {
  // Stage k >= 1 holds one more block for each of its virtual stages k, k + P, ... within the
  // interior ones 1 .. interior, so stage 1 holds the most of them; stage 0 has its own extra.
  if (stages == 1) return layers;
  return std::max(balanced_stage_layers(layers, stages, chunks, 0),
                  balanced_stage_layers(layers, stages, chunks, 1));
}

StagePartition::StagePartition(int stages, int chunks, std::vector<int> chunk_layers)
    : stages_(stages), chunks_(chunks), chunk_layers_(std::move(chunk_layers)) {
  DTRAIN_CHECK(stages >= 1 && chunks >= 1, "a partition needs stages >= 1 and chunks >= 1, got ",
               stages, " and ", chunks);
  DTRAIN_CHECK(static_cast<int>(chunk_layers_.size()) == stages * chunks, "a partition of ", stages,
               " stages x ", chunks, " chunks needs ", stages * chunks, " chunk sizes, got ",
               chunk_layers_.size());
  chunk_first_.reserve(chunk_layers_.size());
  for (int n : chunk_layers_) {
    DTRAIN_CHECK(n >= 1, "every model chunk needs at least one layer, got ", n);
    chunk_first_.push_back(layers_);
    layers_ += n;
  }
}

int StagePartition::first_layer(int rank, int chunk) const {
  return chunk_first_.at(static_cast<size_t>(virtual_stage(rank, chunk)));
}

int StagePartition::layer_count(int rank, int chunk) const {
  return chunk_layers_.at(static_cast<size_t>(virtual_stage(rank, chunk)));
}

std::vector<int> StagePartition::stage_layers() const {
  std::vector<int> per_rank(static_cast<size_t>(stages_), 0);
  for (int vs = 0; vs < virtual_stages(); ++vs) {
    per_rank[static_cast<size_t>(rank_of(vs))] += chunk_layers_[static_cast<size_t>(vs)];
  }
  return per_rank;
}

int StagePartition::rank_of_layer(int layer) const {
  DTRAIN_CHECK(layer >= 0 && layer < layers_, "layer ", layer, " outside 0..", layers_ - 1);
  int vs = virtual_stages() - 1;
  while (chunk_first_[static_cast<size_t>(vs)] > layer) --vs;
  return rank_of(vs);
}

StagePartition balanced_partition(int layers, int stages, int chunks, const PartitionFlags& flags) {
  check_shape(layers, stages, chunks, flags);
  const int n = stages * chunks;
  std::vector<int> sizes(static_cast<size_t>(n));
  for (int vs = 0; vs < n; ++vs) {
    sizes[static_cast<size_t>(vs)] = static_cast<int>(balanced_chunk_layers(layers, n, vs));
  }
  return StagePartition(stages, chunks, std::move(sizes));
}

StagePartition explicit_partition(int layers, int stages, int chunks,
                                  std::span<const int> chunk_layers, const PartitionFlags& flags) {
  check_shape(layers, stages, chunks, flags);
  const int n = stages * chunks;
  std::ostringstream joined;
  for (size_t i = 0; i < chunk_layers.size(); ++i) joined << (i ? "," : "") << chunk_layers[i];
  const std::string list = joined.str();
  if (chunks == 1) {
    DTRAIN_CHECK(static_cast<int>(chunk_layers.size()) == n, flags.stage_layers, " ", list, " has ",
                 chunk_layers.size(), " entries, but ", flags.stages, " is ", stages);
  } else {
    DTRAIN_CHECK(static_cast<int>(chunk_layers.size()) == n, flags.stage_layers, " ", list, " has ",
                 chunk_layers.size(), " entries; with ", flags.chunks, " ", chunks,
                 " it lists each model chunk, ", flags.stages, " * ", flags.chunks, " = ", n);
  }
  for (int x : chunk_layers) {
    DTRAIN_CHECK(x >= 1, flags.stage_layers, " ", list,
                 " has an empty stage; every entry must be >= 1");
  }
  const int64_t sum = std::accumulate(chunk_layers.begin(), chunk_layers.end(), int64_t{0});
  DTRAIN_CHECK(sum == layers, flags.stage_layers, " ", list, " sums to ", sum, ", not ",
               flags.layers, " ", layers);
  return StagePartition(stages, chunks, std::vector<int>(chunk_layers.begin(), chunk_layers.end()));
}

std::vector<int> parse_stage_layers(std::string_view text, std::string_view flag) {
  std::vector<int> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string_view item =
        text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    int value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    DTRAIN_CHECK(
        !item.empty() && ec == std::errc() && end == item.data() + item.size() && value >= 1, flag,
        " \"", text, "\" must be a comma-separated list of positive layer counts");
    out.push_back(value);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string layer_ranges(const StagePartition& partition, int rank) {
  std::string s;
  for (int c = 0; c < partition.chunks(); ++c) {
    const int first = partition.first_layer(rank, c);
    const int last = first + partition.layer_count(rank, c) - 1;
    if (c > 0) s += ',';
    s += std::to_string(first);
    if (last > first) {
      s += '-';
      s += std::to_string(last);
    }
  }
  return s;
}

}  // namespace dtrain::plan
