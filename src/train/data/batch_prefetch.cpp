// BatchPrefetch: one background read of the next step's batches (see batch_prefetch.h).
#include "myriad/train/data/batch_prefetch.h"

#include <chrono>
#include <cstring>

namespace myriad::train {

namespace {
std::vector<Tensor> empty_like(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(Tensor::empty(t.shape(), t.dtype()));
  return out;
}

void copy_all(const std::vector<Tensor>& from, std::vector<Tensor>& to) {
  for (std::size_t i = 0; i < from.size(); ++i) {
    std::memcpy(to[i].raw_data(), from[i].raw_data(),
                static_cast<std::size_t>(from[i].numel()) * dtype_size(from[i].dtype()));
  }
}
}  // namespace

BatchPrefetch::BatchPrefetch(Fill fill, const std::vector<Tensor>& ids, const std::vector<Tensor>& targets)
    : fill_(std::move(fill)), ids_(empty_like(ids)), targets_(empty_like(targets)) {}

BatchPrefetch::~BatchPrefetch() {
  if (pending_.valid()) pending_.wait();  // an error nobody asked for is dropped with it
}

void BatchPrefetch::start(std::int64_t step) {
  pending_step_ = step;
  pending_ = std::async(std::launch::async, [this, step] { fill_(step, ids_, targets_); });
}

double BatchPrefetch::take(std::int64_t step, std::vector<Tensor>& ids, std::vector<Tensor>& targets) {
  const auto begin = std::chrono::steady_clock::now();
  bool have = false;
  if (pending_.valid()) {
    const bool wanted = pending_step_ == step;
    try {
      pending_.get();
    } catch (...) {
      if (wanted) throw;  // the read of this step failed: its error is this step's
    }
    have = wanted;
  }
  if (have) {
    copy_all(ids_, ids);
    copy_all(targets_, targets);
    ++hits_;
  } else {
    fill_(step, ids, targets);
  }
  start(step + 1);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

}  // namespace myriad::train
