// Precision names for flags, reports and checkpoints.
#include "dtrain/model/precision.h"

#include "dtrain/core/check.h"

namespace dtrain::model {

std::string_view precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : "fp32";
}

Precision parse_precision(std::string_view text, std::string_view flag) {
  if (text == "fp32") return Precision::fp32;
  if (text == "bf16") return Precision::bf16;
  throw Error(std::string(flag) + ": must be fp32 or bf16 (got '" + std::string(text) + "')");
}

}  // namespace dtrain::model
