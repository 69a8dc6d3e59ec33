// main() of myriad_mpi_tests: MPI is brought up by an MpiRuntime around GoogleTest. Rank 0 prints
// GoogleTest's usual output; the other ranks print only their failures, prefixed "[rank R]".
// Every rank runs the same tests in the same order (tests create their communicators by
// duplicating MPI_COMM_WORLD, a collective call), and the exit status is non-zero on any rank
// with a failure, which makes mpiexec fail.
#include <gtest/gtest.h>

#include <cstdio>

#include "myriad/distributed/mpi_runtime.h"

namespace {

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  myriad::distributed::MpiRuntime runtime(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (runtime.world_rank() != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(runtime.world_rank()));
  }
  return RUN_ALL_TESTS();
}
