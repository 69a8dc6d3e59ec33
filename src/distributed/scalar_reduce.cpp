// Scalar reductions in rank order and "rank 0 does it, everyone learns the outcome".
#include "myriad/distributed/scalar_reduce.h"

#include <cstring>
#include <exception>

#include "myriad/core/error.h"

namespace myriad::distributed {

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

std::vector<double> sum_over_ranks(Communicator& comm, const std::vector<double>& values) {
  if (comm.size() == 1) return values;
  const auto n = static_cast<std::int64_t>(values.size());
  Tensor mine = Tensor::empty({n}, DType::i64);
  std::memcpy(mine.raw_data(), values.data(), values.size() * sizeof(double));
  Tensor all = Tensor::empty({n * comm.size()}, DType::i64);
  comm.all_gather(mine, all);
  const auto* gathered = reinterpret_cast<const double*>(all.raw_data());  // rank r's values at [r n, (r + 1) n)
  std::vector<double> sums(values.size(), 0.0);
  for (int r = 0; r < comm.size(); ++r) {  // rank order: the same bits everywhere
    for (std::int64_t i = 0; i < n; ++i) sums[static_cast<std::size_t>(i)] += gathered[r * n + i];
  }
  return sums;
}

double sum_over_ranks(Communicator& comm, double value) { return sum_over_ranks(comm, std::vector<double>{value})[0]; }

std::int64_t sum_over_ranks(Communicator& comm, std::int64_t value) {
  if (comm.size() == 1) return value;
  Tensor t = Tensor::full({1}, 0.0, DType::i64);
  t.data<std::int64_t>()[0] = value;
  comm.all_reduce(t);
  return t.data<std::int64_t>()[0];
}

namespace {

// Runs `work`; a std::exception it throws is kept (to rethrow) with its message ("" = success).
struct Outcome {
  std::exception_ptr error;
  std::string message;
};
Outcome run_capturing(const std::function<void()>& work) {
  Outcome outcome;
  try {
    work();
  } catch (const std::exception& e) {
    outcome.error = std::current_exception();
    outcome.message = e.what();
    if (outcome.message.empty()) outcome.message = "unknown error";
  }
  return outcome;
}

}  // namespace

void run_on_rank0(Communicator& comm, const std::string& what, const std::function<void()>& work) {
  const Outcome outcome = comm.rank() == 0 ? run_capturing(work) : Outcome{};
  const std::exception_ptr& error = outcome.error;
  const std::string& failure = outcome.message;
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

namespace {

std::vector<std::int64_t> all_lengths(Communicator& comm, std::int64_t mine) {
  Tensor one = Tensor::full({1}, 0.0, DType::i64), all = Tensor::zeros({comm.size()}, DType::i64);
  one.data<std::int64_t>()[0] = mine;
  comm.all_gather(one, all);
  return std::vector<std::int64_t>(all.data<std::int64_t>(), all.data<std::int64_t>() + comm.size());
}

}  // namespace

void run_on_every_rank(Communicator& comm, const std::string& what, const std::function<void()>& work) {
  const Outcome outcome = run_capturing(work);
  const std::exception_ptr& error = outcome.error;
  const std::string& failure = outcome.message;
  if (comm.size() == 1) {
    if (error) std::rethrow_exception(error);
    return;
  }
  const std::vector<std::int64_t> lengths = all_lengths(comm, static_cast<std::int64_t>(failure.size()));
  int first = -1;
  for (int r = 0; r < comm.size() && first < 0; ++r) {
    if (lengths[static_cast<std::size_t>(r)] > 0) first = r;
  }
  if (first < 0) return;
  Tensor text = Tensor::zeros({lengths[static_cast<std::size_t>(first)]}, DType::i8);
  if (comm.rank() == first) std::memcpy(text.raw_data(), failure.data(), failure.size());
  comm.broadcast(text, first);
  if (error) std::rethrow_exception(error);
  MYRIAD_THROW(what << " failed on rank " << first << ": "
                    << std::string(static_cast<const char*>(text.raw_data()), static_cast<std::size_t>(text.numel())));
}

std::vector<std::string> gather_strings_to_rank0(Communicator& comm, const std::string& text) {
  const std::vector<std::int64_t> lengths = all_lengths(comm, static_cast<std::int64_t>(text.size()));
  if (comm.rank() != 0) {
    if (!text.empty()) {
      Tensor bytes = Tensor::zeros({static_cast<std::int64_t>(text.size())}, DType::i8);
      std::memcpy(bytes.raw_data(), text.data(), text.size());
      comm.send(bytes, 0, 7);
    }
    return {};
  }
  std::vector<std::string> all = {text};
  for (int r = 1; r < comm.size(); ++r) {
    const std::int64_t n = lengths[static_cast<std::size_t>(r)];
    if (n == 0) {
      all.emplace_back();
      continue;
    }
    Tensor bytes = Tensor::zeros({n}, DType::i8);
    comm.recv(bytes, r, 7);
    all.emplace_back(static_cast<const char*>(bytes.raw_data()), static_cast<std::size_t>(n));
  }
  return all;
}

std::string broadcast_string(Communicator& comm, const std::string& text, int root) {
  Tensor length = Tensor::full({1}, 0.0, DType::i64);
  length.data<std::int64_t>()[0] = static_cast<std::int64_t>(text.size());
  comm.broadcast(length, root);
  const std::int64_t n = length.data<std::int64_t>()[0];
  if (n == 0) return {};
  Tensor bytes = Tensor::zeros({n}, DType::i8);
  if (comm.rank() == root) std::memcpy(bytes.raw_data(), text.data(), text.size());
  comm.broadcast(bytes, root);
  return std::string(static_cast<const char*>(bytes.raw_data()), static_cast<std::size_t>(n));
}

}  // namespace myriad::distributed
