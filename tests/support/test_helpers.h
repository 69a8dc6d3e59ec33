// Test support shared by the op tests: checking that a call throws a myriad::Error whose message
// names what it should (the op, the argument, the shapes / dtypes), and restoring the OpenMP
// thread count after a test that varies it (so later tests run with the count they started with).
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <initializer_list>
#include <string>

#include "myriad/core/error.h"

namespace myriad::testing {

// Runs `call`; expects a myriad::Error whose message contains every string in `needles`.
template <typename Call>
void expect_error_naming(Call&& call, std::initializer_list<std::string> needles) {
  try {
    call();
    std::string wanted;
    for (const std::string& needle : needles) wanted += " '" + needle + "'";
    ADD_FAILURE() << "expected myriad::Error naming" << wanted;
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& needle : needles) {
      EXPECT_NE(what.find(needle), std::string::npos) << "'" << needle << "' not in: " << what;
    }
  }
}

// RAII: remembers omp_get_max_threads() and restores it with omp_set_num_threads on scope exit.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(omp_get_max_threads()) {}
  ~ThreadCountGuard() { omp_set_num_threads(saved_); }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int saved_;
};

}  // namespace myriad::testing
