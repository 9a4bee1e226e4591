// The train report's clock table (train/clock_report.h): the error column against hand-worked
// values, and the phases it leaves without a percentage.
#include <gtest/gtest.h>

#include "dtrain/train/clock_report.h"

namespace dtrain::train {
namespace {

TEST(ClockReport, PhaseErrorIsSignedPercent) {
  // 11 ms predicted over 10 ms measured in a 20 ms step: +10.0%; 7.5 over 10: -25.0%.
  EXPECT_EQ(phase_error_text(11e-3, 10e-3, 20e-3), "+10.0%");
  EXPECT_EQ(phase_error_text(7.5e-3, 10e-3, 20e-3), "-25.0%");
  // A phase predicted at 0 that the run measured at 5 ms of 20: the whole miss, -100.0%.
  EXPECT_EQ(phase_error_text(0, 5e-3, 20e-3), "-100.0%");
}

TEST(ClockReport, NearZeroPhasesCarryNoPercent) {
  // 0 against 0: "-", not "-100.0%" or a division by zero.
  EXPECT_EQ(phase_error_text(0, 0, 20e-3), "-");
  // Both under 2% of a 20 ms step (0.4 ms): 0.087 ms predicted, 0.001 ms measured.
  EXPECT_EQ(phase_error_text(0.087e-3, 0.001e-3, 20e-3), "-");
  // 0.39 ms and 0.001 ms: still both under 0.4 ms.
  EXPECT_EQ(phase_error_text(0.39e-3, 0.001e-3, 20e-3), "-");
  // 1 ms predicted where 0.001 ms was measured: an over-prediction, no ratio of a near-zero.
  EXPECT_EQ(phase_error_text(1e-3, 0.001e-3, 20e-3), "over");
  // Above the floor the ratio is printed: 0.6 / 0.5 = +20.0%.
  EXPECT_EQ(phase_error_text(0.6e-3, 0.5e-3, 20e-3), "+20.0%");
}

}  // namespace
}  // namespace dtrain::train
