// Pipeline-parallel cost model: the bubble and the activations each stage holds, per schedule.
// The schedule checker (parallel/pipeline_checker.h) and the clock's simulation
// (pipeline_simulation.h) time the real schedules (pipeline_schedule.h); their tests compare
// the simulated bubble and in-flight counts with these closed forms.
//
// With P stages, M micro-batches, v model chunks per rank and per-micro-batch stage times
// F (forward), B (input gradient) and W (weight gradient):
//   ideal time       M * (F + B + W)
//   GPipe, 1F1B      bubble (P-1) * (F + B + W)
//   interleaved      bubble (P-1) * (F + B + W) / v          (Narayanan et al. 2021, §2.2)
//   ZB-H1            bubble (P-1) * max(0, F + B - W)        (Qi et al. 2023, ZB-H1)
// The bubble as a share of the total is bubble / (ideal + bubble), which is (P-1)/(M+P-1) for
// GPipe and 1F1B; Megatron's figure is bubble / ideal = (P-1)/M.
#pragma once

#include <string_view>

namespace dtrain::plan {

enum class ScheduleKind { gpipe, one_f_one_b, interleaved, zero_bubble_h1 };
std::string_view name(ScheduleKind kind);  // "gpipe", "1f1b", "interleaved", "zb-h1"
// The schedule called `text` (name's spelling); throws Error naming --schedule and the names.
ScheduleKind parse_schedule(std::string_view text);

struct StageTimes {
  double forward = 1;          // F
  double backward_input = 1;   // B: gradient with respect to the stage's input
  double backward_weight = 1;  // W: gradient with respect to the weights
};

struct BubbleEstimate {
  double ideal_time = 0;         // M * (F + B + W)
  double bubble_time = 0;        // idle time of a stage over one step
  double total_time = 0;         // ideal + bubble
  double fraction_of_total = 0;  // bubble / total: (P-1)/(M+P-1) for GPipe and 1F1B
  double fraction_of_ideal = 0;  // bubble / ideal: Megatron's (P-1)/M
};

BubbleEstimate pipeline_bubble(ScheduleKind kind, int stages, int microbatches, int chunks = 1,
                               StageTimes times = {});

// The interleaved schedule's micro-batch groups: each group runs through chunk 0, then chunk 1,
// ... With P | M every group holds P micro-batches (Megatron's microbatch_group_size_per_vp_stage
// default); otherwise the floor(M / P) groups share M as evenly as possible, larger ones first,
// so none is smaller than P; with M < P there is one group of M. Returns the first (largest)
// group's size G, the spacing of a forward's chunks in the order: ceil(M / floor(M / P)).
int interleaved_group_size(int stages, int microbatches);

// Forwards rank `stage` runs before its first backward in the interleaved schedule (Megatron's
// num_warmup_microbatches): min((P - stage - 1) * 2 + (v - 1) * G, v * M), where G is
// interleaved_group_size when M >= P and P when M < P (a chunk's forwards still wait P steps
// for the pipeline to fill). The schedule builder (pipeline_schedule.h) uses it as is.
int interleaved_warmup_forwards(int stages, int microbatches, int chunks, int stage);

// Peak number of micro-batches whose activations `stage` (0 = first) holds at once, in units of
// one micro-batch's activations of the whole stage (a chunk of an interleaved stage counts 1/v):
//   GPipe M;  1F1B and ZB-H1 min(P - stage, M);
//   interleaved min(warm-up + 1, v * M) / v, warm-up = interleaved_warmup_forwards: for P | M
//   min((P - stage - 1) * 2 + (v - 1) * P + 1, v * M) / v, Megatron's warm-up + 1.
double peak_inflight_microbatches(ScheduleKind kind, int stages, int microbatches, int chunks,
                                  int stage);

// Peak number of micro-batches whose weight gradients `stage` still owes (F until W), in the
// same units: what a split backward holds, since W reads the stored linear inputs and the
// kept output gradients (activation_memory.h weight_grad_stash_bytes_per_layer). A fused
// backward is peak_inflight_microbatches; ZB-H1 min(P, M) on every stage (stage s holds its
// min(P - s, M) in-flight micro-batches plus up to s whose W it defers).
double peak_weight_stash_microbatches(ScheduleKind kind, int stages, int microbatches, int chunks,
                                      int stage);

}  // namespace dtrain::plan
