// print_tensor_parallel_report / tensor_parallel_report_to_json: per TP rank, f/g bytes sent
// per step measured beside plan::tp_traffic_per_layer, and parameter memory beside serial / N.
#include "dtrain/train/tensor_parallel_report.h"

#include <cstdio>
#include <string>

#include "dtrain/core/units.h"
#include "dtrain/train/text_table.h"

namespace dtrain::train {

void print_tensor_parallel_report(std::ostream& out, const TensorParallelReport& r) {
  const int N = r.setup.tp;
  out << "\n  tensor parallel: " << N << " ranks (Megatron f/g, vocabulary-parallel embedding and "
      << "cross-entropy" << (r.setup.sequence_parallel ? ", sequence parallel" : "") << ")\n";
  out << "  rank   f/g calls fwd+bwd   TP bytes sent/step   plan::tp_traffic_per_layer x L"
      << "   vocab-parallel bytes   params      serial/N\n";
  for (const TensorParallelRankReport& k : r.ranks) {
    const double serial_share = static_cast<double>(k.serial_param_bytes) / N;
    out << "  " << right_aligned(std::to_string(k.tp_rank), 4)
        << right_aligned(whole_number(k.block_forward_calls_per_step) + "+" +
                             whole_number(k.block_backward_calls_per_step),
                         20)
        << right_aligned(whole_number(k.block_bytes_sent_per_step), 21)
        << right_aligned(whole_number(k.formula_bytes_sent_per_step), 33)
        << (k.block_bytes_sent_per_step == k.formula_bytes_sent_per_step ? " " : "*")
        << right_aligned(whole_number(k.vocab_bytes_sent_per_step), 22)
        << right_aligned(format_bytes(static_cast<double>(k.param_bytes)), 10)
        << right_aligned(format_bytes(serial_share), 12) << "\n";
  }
  if (!r.ranks.empty()) {
    const TensorParallelRankReport& k = r.ranks.front();
    if (r.setup.sequence_parallel) {
      out << "  (per layer and micro-batch: 4 ring reduce-scatters + 4 all-gathers of B*T*C fp32 "
          << "= 8*B*T*C*(N-1)/N elements x 4 bytes, as the all-reduces without SP; "
          << "'*' marks a difference)\n";
      out << "  sequence parallel: backward re-gathers the stored LN-output slices: "
          << whole_number(k.regather_bytes_sent_per_step) << " bytes/step (not in the formula)\n";
    } else {
      out << "  (per layer and micro-batch: 4 ring all-reduces of B*T*C fp32 = 8*B*T*C*(N-1)/N "
          << "elements x 4 bytes; "
          << "'*' marks a difference)\n";
    }
    out << "  activations per block per rank: " << k.block_activation_bytes
        << " bytes measured, plan::activation_bytes_per_layer "
        << whole_number(k.formula_block_activation_bytes)
        << (r.setup.sequence_parallel ? " (sequence parallel)" : "") << "\n";
    out << "  block parameters per rank: " << k.block_sharded << " sharded (serial "
        << k.serial_block_sharded << " / " << N << " = " << k.serial_block_sharded / N << ") + "
        << k.block_replicated << " replicated (LayerNorms, biases after g)\n";
  }
}

nlohmann::json tensor_parallel_report_to_json(const TensorParallelReport& r) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const TensorParallelRankReport& k : r.ranks) {
    ranks.push_back({{"tp_rank", k.tp_rank},
                     {"block_forward_calls_per_step", k.block_forward_calls_per_step},
                     {"block_backward_calls_per_step", k.block_backward_calls_per_step},
                     {"bytes_sent_per_step", k.block_bytes_sent_per_step},
                     {"formula_bytes_sent_per_step", k.formula_bytes_sent_per_step},
                     {"vocab_bytes_sent_per_step", k.vocab_bytes_sent_per_step},
                     {"regather_bytes_sent_per_step", k.regather_bytes_sent_per_step},
                     {"block_activation_bytes", k.block_activation_bytes},
                     {"formula_block_activation_bytes", k.formula_block_activation_bytes},
                     {"param_bytes", k.param_bytes},
                     {"serial_param_bytes", k.serial_param_bytes},
                     {"block_sharded", k.block_sharded},
                     {"block_replicated", k.block_replicated},
                     {"serial_block_sharded", k.serial_block_sharded}});
  }
  return {{"tp", r.setup.tp}, {"sequence_parallel", r.setup.sequence_parallel}, {"ranks", ranks}};
}

}  // namespace dtrain::train
