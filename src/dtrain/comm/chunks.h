// How a buffer of `count` elements is cut into one chunk per rank: balanced, the first
// count % parts chunks one element longer. Ring and tree collectives and their callers
// (reduce_scatter outputs, all_gather inputs) all use this one function.
#pragma once

#include <cstdint>

namespace dtrain::comm {

struct Chunk {
  int64_t offset = 0;
  int64_t count = 0;
};

constexpr Chunk chunk_of(int64_t count, int parts, int index) {
  const int64_t base = count / parts;
  const int64_t extra = count % parts;
  const int64_t offset = index * base + (index < extra ? index : extra);
  return {offset, base + (index < extra ? 1 : 0)};
}

}  // namespace dtrain::comm
