// The number format a run computes in: fp32 throughout, or bf16 mixed precision (matrix
// products on bf16 operands with fp32 sums; everything else in fp32).
#pragma once

#include <string>
#include <string_view>

namespace dtrain::model {

enum class Precision { fp32, bf16 };

std::string_view precision_name(Precision p);
// "fp32" or "bf16"; anything else is an error naming `flag`.
Precision parse_precision(std::string_view text, std::string_view flag);

}  // namespace dtrain::model
