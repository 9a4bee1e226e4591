// The array conversions of bf16.h, one clone per vector width (cpu_dispatch.h).
#include "dtrain/core/bf16.h"

#include "dtrain/core/cpu_dispatch.h"

namespace dtrain {

DTRAIN_MULTIVERSION void to_bf16(const float* in, bf16* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = to_bf16(in[i]);
}

DTRAIN_MULTIVERSION void to_float(const bf16* in, float* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = to_float(in[i]);
}

}  // namespace dtrain
