// Scalar reductions in rank order and "rank 0 does it, everyone learns the outcome".
#include "myriad/dist/scalar_reduce.h"

#include <cstring>
#include <exception>

#include "myriad/core/error.h"

namespace myriad::dist {

std::vector<double> gather_over_ranks(Communicator& comm, double value) {
  if (comm.size() == 1) return {value};
  Tensor mine = Tensor::empty({1}, DType::i64);
  std::memcpy(mine.raw_data(), &value, sizeof value);
  Tensor all = Tensor::empty({comm.size()}, DType::i64);
  comm.all_gather(mine, all);
  std::vector<double> values(static_cast<std::size_t>(comm.size()));
  std::memcpy(values.data(), all.raw_data(), values.size() * sizeof(double));
  return values;
}

double sum_over_ranks(Communicator& comm, double value) {
  double sum = 0.0;
  for (double v : gather_over_ranks(comm, value)) sum += v;  // rank order: the same bits everywhere
  return sum;
}

std::int64_t sum_over_ranks(Communicator& comm, std::int64_t value) {
  if (comm.size() == 1) return value;
  Tensor t = Tensor::full({1}, 0.0, DType::i64);
  t.data<std::int64_t>()[0] = value;
  comm.all_reduce(t);
  return t.data<std::int64_t>()[0];
}

void run_on_rank0(Communicator& comm, const std::string& what, const std::function<void()>& work) {
  std::string failure;
  std::exception_ptr error;
  if (comm.rank() == 0) {
    try {
      work();
    } catch (const std::exception& e) {
      error = std::current_exception();
      failure = e.what();
      if (failure.empty()) failure = "unknown error";
    }
  }
  if (comm.size() == 1) {
    if (error) std::rethrow_exception(error);
    return;
  }
  Tensor length = Tensor::full({1}, 0.0, DType::i64);
  length.data<std::int64_t>()[0] = static_cast<std::int64_t>(failure.size());
  comm.broadcast(length, 0);
  const std::int64_t n = length.data<std::int64_t>()[0];
  if (n == 0) return;
  Tensor text = Tensor::zeros({n}, DType::i8);
  if (comm.rank() == 0) std::memcpy(text.raw_data(), failure.data(), static_cast<std::size_t>(n));
  comm.broadcast(text, 0);
  if (comm.rank() == 0) std::rethrow_exception(error);
  MYRIAD_THROW(what << " failed on rank 0: "
                    << std::string(static_cast<const char*>(text.raw_data()), static_cast<std::size_t>(n)));
}

}  // namespace myriad::dist
