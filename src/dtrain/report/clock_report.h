// The clock beside the run: each phase of a step (forward, backward, TP collectives, pipeline
// waits and bubble, exposed DP, optimizer, step) as clock/engine_clock.h predicts it from the
// --cluster file's measured rates, and as this run measured it (medians over the steps after
// the first, on the rank whose compute is the longest). The prediction never reads the run's
// own times: only the layout and the rates.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/clock/engine_clock.h"
#include "dtrain/engine/engine.h"

namespace dtrain::train {

struct ClockReport {
  std::string rates;  // the --cluster file that priced it
  // Why the clock prices no prediction for this layout (plan::engine_clock_moe_gap: what `plan`
  // refuses on the same file); empty when `predicted` holds one. The measured column stays.
  std::string not_priced;
  plan::EnginePhases predicted;
  plan::EnginePhases measured;  // step_s: the run's median step time
  int rank = 0;                 // the rank measured
  double stretch = 1;           // the prediction's oversubscription factor
  // MoE: the same clock priced after the run on the routing it measured (the steps after the
  // first; plan::EngineClockInput::block_routings): what the a-priori prediction, which assumes
  // uniform routing, would read if it had known the routing. Never a measured time.
  std::optional<plan::EnginePhases> given_routing;
  // The cores other programs kept busy during the measured steps (TrainSummary::
  // other_load_cores; -1: not measured) and the machine's cores: the prediction assumes no
  // other work, so a measurement taken beside some is not the clock's to explain.
  double other_load_cores = -1;
  double other_load_window_s = 0;  // the wall time it was measured over
  int cores = 0;
};

// The layout as the engine's clock sees it; `buckets` the DP syncs per step of a rank (stage
// 3: its units), `dp_algorithm` the flat DP syncs' algorithm.
plan::EngineClockInput engine_clock_input(const EngineConfig& config, int64_t buckets,
                                          comm::Algorithm dp_algorithm);

// Median of each phase over a rank's steps, the first (warm-up) left out when there are more.
plan::EnginePhases median_phases(const std::vector<StepPhases>& steps);

// Why the engine clock will not price this run's layout (empty when it will): checked before the
// first step, so that the run can say so at the start.
std::string clock_not_priced(const EngineConfig& config);

// With a --cluster file carrying measured rates: the predicted phases and those measured on the
// rank with the longest compute (`rank_phases`, one per rank, global rank order); with MoE
// `block_routings` (Engine::block_routings, one per step) adds given_routing. nullopt without
// measured rates.
std::optional<ClockReport> clock_report(
    const EngineConfig& config, const std::string& rates_path, int64_t buckets,
    comm::Algorithm dp_algorithm, const std::vector<plan::EnginePhases>& rank_phases,
    const std::vector<std::vector<std::vector<double>>>& block_routings = {});

nlohmann::json phases_to_json(const plan::EnginePhases& p);
plan::EnginePhases phases_from_json(const nlohmann::json& j);
// {"rates": FILE, "predicted": {...}, "measured": {...}}; measured step_s = `median_step_s`.
nlohmann::json clock_to_json(const ClockReport& clock);
void print_clock_report(std::ostream& out, const ClockReport& clock);
// The table's error column for one phase: 100 (predicted / measured - 1) with its sign and a
// "%"; "-" when both sides are under 2% of the measured step (0 against 0 included: such a
// phase is within the step's noise and a ratio of near-zeros would only shout), "over" when only
// the measurement is (a prediction of time the run did not spend there).
std::string phase_error_text(double predicted_s, double measured_s, double measured_step_s);
// Other programs' load, in cores, beyond the counters' grain (other_load_grain_cores), from
// which the clock table says to measure again.
inline constexpr double kBusyMachineCores = 0.1;
// Whether a run's other load says the machine was busy: above kBusyMachineCores plus the grain.
bool machine_was_busy(const ClockReport& c);

// What to run when the cluster has no measured rates.
inline constexpr const char* kClockHint =
    "no measured rates: run `dtrain calibrate --compute -o cpu.json`, then train with "
    "--cluster cpu.json to see each phase's predicted time beside its measurement";

}  // namespace dtrain::train
