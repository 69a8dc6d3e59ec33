// Exact, rank-order reductions of host scalars over a communicator.
//
// sum_over_ranks(double) all-gathers the float64 bit patterns and adds them in rank order, so
// every rank obtains the same bits (communicators reduce f32/i32/i64 only) — used for the global
// gradient norm and loss sums. The i64 form is an all-reduce.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

double sum_over_ranks(Communicator& comm, double value);
// The same for several values at once (one all-gather), each summed in rank order.
std::vector<double> sum_over_ranks(Communicator& comm, const std::vector<double>& values);
// Every rank's value, in rank order (an all-gather of the float64 bit patterns).
std::vector<double> gather_over_ranks(Communicator& comm, double value);
std::int64_t sum_over_ranks(Communicator& comm, std::int64_t value);

// Runs `work` on rank 0 of `comm` while the others wait; if it throws, every rank throws a
// myriad::Error with rank 0's message (prefixed by `what`), so no rank is left waiting.
void run_on_rank0(Communicator& comm, const std::string& what, const std::function<void()>& work);
// Runs `work` on every rank, then all agree: if it threw on any rank, every rank throws — the
// failing ranks their own error, the others a myriad::Error with the lowest failing rank's
// message (prefixed by `what`). Nothing after it runs on one rank only.
void run_on_every_rank(Communicator& comm, const std::string& what, const std::function<void()>& work);
// Rank 0 receives every rank's string (in rank order; its own first); the others get {}.
std::vector<std::string> gather_strings_to_rank0(Communicator& comm, const std::string& text);
// `root`'s text on every rank (its length, then its bytes).
std::string broadcast_string(Communicator& comm, const std::string& text, int root = 0);

}  // namespace myriad::distributed
