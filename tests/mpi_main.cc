// main() of the test binaries that run under mpirun: MPI is initialized before the tests and
// finalized after; only rank 0 prints gtest's progress, every rank's failures still count
// (mpirun exits non-zero if any process does).
#include <gtest/gtest.h>

#include <cstdio>

#include "dtrain/comm/mpi/backend.h"

namespace {

// On ranks other than 0: print only failures, each prefixed with the rank.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  dtrain::comm::Communicator& world = dtrain::comm::mpi::world();
  if (world.rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(world.rank()));
  }
  const int result = RUN_ALL_TESTS();
  dtrain::comm::mpi::finalize();
  return result;
}
