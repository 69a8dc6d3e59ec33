// ComposedCommunicator: the worker that runs composed reductions in issue order, byte counting
// from the private groups, and forwarding of everything else (see composed_communicator.h).
#include "myriad/distributed/composed_communicator.h"

#include <algorithm>
#include <cstdlib>

#include "mpi_work.h"
#include "myriad/core/error.h"
#include "myriad/distributed/comm_checks.h"
#include "myriad/ops/exact_sum.h"

namespace myriad::distributed {

ComposedCommunicator::ComposedCommunicator(std::unique_ptr<Communicator> flat, bool exact_sums)
    : flat_(std::move(flat)), exact_sums_(exact_sums), stats_(std::make_shared<StatsBlock>()) {
  MYRIAD_CHECK(flat_ != nullptr, "ComposedCommunicator: null group");
}

ComposedCommunicator::~ComposedCommunicator() {
  stop();
  levels_.clear();  // private groups before the group they were split from
  flat_.reset();
}

Communicator& ComposedCommunicator::add_level(std::string role, std::unique_ptr<Communicator> group) {
  MYRIAD_CHECK(group != nullptr, "ComposedCommunicator '" << name() << "': null " << role << " group");
  levels_.emplace_back(std::move(role), std::move(group));
  return *levels_.back().second;
}

void ComposedCommunicator::start() {
  worker_ = std::thread([this] { worker_loop(); });
}

void ComposedCommunicator::stop() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();  // drains the queue first
}

WorkHandle ComposedCommunicator::enqueue(CommOp op, std::function<void()> run) {
  Job job{std::make_shared<MpiWork>(op, true, stats_), std::move(run)};
  WorkHandle handle = job.work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  return handle;
}

CommOpStats ComposedCommunicator::level_totals() const {
  CommOpStats sum;
  for (const auto& level : levels_) sum += level.second->stats().total();
  return sum;
}

void ComposedCommunicator::worker_loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    const CommOpStats before = level_totals();
    std::exception_ptr error = broken_;
    if (!error) {
      try {
        job.run();
      } catch (...) {
        error = std::current_exception();
        broken_ = error;  // a half-finished composition leaves the private groups out of step
      }
    }
    const CommOpStats after = level_totals();
    job.work->complete(std::max<std::int64_t>(0, after.bytes_sent - before.bytes_sent),
                       std::max<std::int64_t>(0, after.bytes_received - before.bytes_received), error);
  }
}

std::string ComposedCommunicator::description() const {
  return exact_sums_ ? algorithm() + ", exact sums" : algorithm();
}

bool ComposedCommunicator::sums_exactly(const Tensor& tensor, ReduceOp op) const {
  return exact_sums_ && op == ReduceOp::sum && tensor.dtype() == DType::f32;
}

WorkHandle ComposedCommunicator::all_reduce_async(Tensor tensor, ReduceOp op) {
  if (sums_exactly(tensor, op)) {
    check_all_reduce_args(*this, tensor);
    return enqueue(CommOp::all_reduce, [this, tensor]() mutable { run_exact_all_reduce(tensor); });
  }
  if (!composes(CommOp::all_reduce)) return flat_->all_reduce_async(std::move(tensor), op);
  check_all_reduce_args(*this, tensor);
  return enqueue(CommOp::all_reduce, [this, tensor, op]() mutable { run_all_reduce(tensor, op); });
}

WorkHandle ComposedCommunicator::reduce_scatter_async(Tensor input, Tensor output, ReduceOp op) {
  if (sums_exactly(input, op)) {
    check_reduce_scatter_args(*this, input, output);
    return enqueue(CommOp::reduce_scatter,
                   [this, input, output]() mutable { run_exact_reduce_scatter(input, output); });
  }
  if (!composes(CommOp::reduce_scatter)) return flat_->reduce_scatter_async(std::move(input), std::move(output), op);
  check_reduce_scatter_args(*this, input, output);
  return enqueue(CommOp::reduce_scatter,
                 [this, input, output, op]() mutable { run_reduce_scatter(input, output, op); });
}

WorkHandle ComposedCommunicator::all_gather_async(Tensor input, Tensor output) {
  if (!composes(CommOp::all_gather)) return flat_->all_gather_async(std::move(input), std::move(output));
  check_all_gather_args(*this, input, output);
  return enqueue(CommOp::all_gather, [this, input, output]() mutable { run_all_gather(input, output); });
}

Tensor ComposedCommunicator::group_exponents(const Tensor& values) {
  Tensor exponents = Tensor::empty({exact_sum_blocks(values.numel())}, DType::i32);
  exact_sum_exponents(values.data<float>(), values.numel(), exponents.data<std::int32_t>());
  run_all_reduce(exponents, ReduceOp::max);
  return exponents;
}

Tensor ComposedCommunicator::fixed_point_buffer(std::int64_t elements) {
  if (!fixed_point_.defined() || fixed_point_.numel() < elements) {
    fixed_point_ = Tensor::empty({std::max<std::int64_t>(elements, 1)}, DType::i64);
  }
  return fixed_point_.slice(0, 0, elements);
}

void ComposedCommunicator::run_exact_all_reduce(Tensor& tensor) {
  const std::int64_t n = tensor.numel();
  const int headroom = exact_sum_headroom(size());
  const Tensor exponents = group_exponents(tensor);
  Tensor fixed = fixed_point_buffer(n);
  to_exact_fixed(tensor.data<float>(), n, exponents.data<std::int32_t>(), headroom, fixed.data<std::int64_t>());
  run_all_reduce(fixed, ReduceOp::sum);
  from_exact_fixed(fixed.data<std::int64_t>(), 0, n, exponents.data<std::int32_t>(), headroom, tensor.data<float>());
}

void ComposedCommunicator::run_exact_reduce_scatter(const Tensor& input, Tensor& output) {
  const std::int64_t n = input.numel();
  const int headroom = exact_sum_headroom(size());
  const Tensor exponents = group_exponents(input);
  Tensor buffer = fixed_point_buffer(n + output.numel());
  Tensor fixed = buffer.slice(0, 0, n), mine = buffer.slice(0, n, n + output.numel());
  to_exact_fixed(input.data<float>(), n, exponents.data<std::int32_t>(), headroom, fixed.data<std::int64_t>());
  run_reduce_scatter(fixed, mine, ReduceOp::sum);
  from_exact_fixed(mine.data<std::int64_t>(), chunk_range(n, size(), rank()).begin, output.numel(),
                   exponents.data<std::int32_t>(), headroom, output.data<float>());
}

void ComposedCommunicator::run_reduce_scatter(const Tensor&, Tensor&, ReduceOp) {
  MYRIAD_THROW(comm_context("reduce_scatter", *this) << ": not composed by " << algorithm());
}

void ComposedCommunicator::run_all_gather(const Tensor&, Tensor&) {
  MYRIAD_THROW(comm_context("all_gather", *this) << ": not composed by " << algorithm());
}

void ComposedCommunicator::abort(int exit_code, const std::string& reason) {
  flat_->abort(exit_code, reason);
  std::abort();  // not reached: abort() does not return
}

CommStats ComposedCommunicator::stats() const {
  CommStats out = flat_->stats();
  std::lock_guard<std::mutex> lock(stats_->mutex);
  for (int op = 0; op < kCommOpCount; ++op) out.ops[op] += stats_->stats.ops[op];
  return out;
}

void ComposedCommunicator::reset_stats() {
  flat_->reset_stats();
  for (auto& level : levels_) level.second->reset_stats();
  std::lock_guard<std::mutex> lock(stats_->mutex);
  stats_->stats = CommStats{};
}

std::vector<std::pair<std::string, CommStats>> ComposedCommunicator::levels() const {
  std::vector<std::pair<std::string, CommStats>> out;
  for (const auto& level : levels_) out.emplace_back(level.first, level.second->stats());
  return out;
}

std::vector<Communicator*> ComposedCommunicator::parts() {
  std::vector<Communicator*> out{flat_.get()};
  for (auto& level : levels_) out.push_back(level.second.get());
  return out;
}

}  // namespace myriad::distributed
