// CLI11 validators with readable messages, shared by every command: CLI11's own Range and
// PositiveNumber print their bound as a 300-digit double; these say "--log-every: must be at
// least 0 (got -3)". Also the bounds several commands share, and the memory check before buffers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace dtrain::cli {

// A path flag given as "" is a mistake (an unset shell variable), not "use the default".
extern const CLI::Validator kNotEmpty;

// Bounds several commands share. Past them a value is a typo, not a run: the threads backend
// starts one thread per rank, and a trial or a repeat is one of a median's samples.
inline constexpr int64_t kMaxRanks = 1024;
inline constexpr int64_t kMaxTrials = 1000;
inline constexpr double kMaxTrialSeconds = 60;
// Steps of a benchmark: 100000 steps of the bench model already take days on two cores.
inline constexpr int64_t kMaxSteps = 100000;
// Sequences per step (or per rank) of a benchmark; the memory check refuses less when it
// does not fit.
inline constexpr int64_t kMaxBatch = 1000000;

// A whole number in [min, max], read from the text: 1e30, 1.5 and 99999999999999999999 are
// refused with the bound in plain digits, not saturated or wrapped by the conversion.
CLI::Validator whole_number(int64_t min, int64_t max);

// Every integer option of every command gets this: a number past the type's range is refused
// (CLI11's conversion would saturate 99999999999999999999 to 2^63-1 and run "forever"); other
// text is left to the option's own conversion and checks.
CLI::Validator integer_in_type_range(bool is_unsigned);
void refuse_out_of_range_integers(CLI::App& app);

// A finite real number in [min, max]; with `above_min`, in (min, max] (a length of time that
// must not be zero).
CLI::Validator real_number(double min, double max, bool above_min = false);

// --recompute's value by name (core/recompute.h): "none", "selective" or "full" becomes the enum
// through CLI11's CheckedTransformer; anything else (its numbers too) is refused with the names.
CLI::Validator recompute_names();
// --precision's value: "fp32" or "bf16" becomes model::Precision.
CLI::Validator precision_names();

// Throws Error unless `bytes` fit in the memory this process may still take; `what` says what
// needs them, with the flags ("--size 1 TiB on --ranks 2 needs ..."). No check where the
// available memory cannot be read.
void check_fits_in_memory(double bytes, std::string_view what);

}  // namespace dtrain::cli
