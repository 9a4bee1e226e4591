// Fault injection for failure-path tests: `--inject-fault rank=R,step=S,kind=throw|exit|bad_alloc`
// makes rank R fail just before its step S. `throw` raises an error (the rank reports it); `exit`
// stops the rank silently, as a killed process would, so the others must notice on their own;
// `bad_alloc` throws std::bad_alloc, as an allocation past the memory limit would.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtrain::train {

enum class FaultKind { throw_error, exit_rank, bad_alloc };

struct FaultSpec {
  int rank = 0;      // rank of the job (the engine's job communicator)
  int64_t step = 1;  // 1-based: fires after step - 1 updates, before the step runs
  FaultKind kind = FaultKind::throw_error;
};

// "rank=R,step=S,kind=throw|exit|bad_alloc" (any order, all three required); throws naming
// --inject-fault and the part at fault.
FaultSpec parse_fault(std::string_view text);
std::string describe(const FaultSpec& fault);

// Fires `fault` if it is due on this rank before step `step` (1-based): throws Error for
// kind throw, comm::RankExited for kind exit, std::bad_alloc for kind bad_alloc.
void inject_fault_if_due(const std::optional<FaultSpec>& fault, int rank, int64_t step);

}  // namespace dtrain::train
