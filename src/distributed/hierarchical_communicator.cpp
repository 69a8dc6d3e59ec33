// HierarchicalCommunicator: intra-node then inter-node reductions with the flat chunk rule
// (see hierarchical_communicator.h).
#include "myriad/distributed/hierarchical_communicator.h"

#include <cstring>
#include <sstream>

#include "myriad/core/error.h"
#include "myriad/distributed/comm_checks.h"

namespace myriad::distributed {

namespace {
// dst[dst_at, +count) <- src[src_at, +count), elements of the tensors' dtype.
void copy_elements(const Tensor& src, std::int64_t src_at, Tensor& dst, std::int64_t dst_at, std::int64_t count) {
  if (count <= 0) return;
  const std::size_t size = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw_data()) + dst_at * static_cast<std::int64_t>(size),
              static_cast<const char*>(src.raw_data()) + src_at * static_cast<std::int64_t>(size),
              static_cast<std::size_t>(count) * size);
}
}  // namespace

HierarchicalCommunicator::HierarchicalCommunicator(std::unique_ptr<Communicator> flat, NodeGrouping grouping,
                                                   bool exact_sums)
    : ComposedCommunicator(std::move(flat), exact_sums), grouping_(grouping) {
  MYRIAD_CHECK(grouping_.nodes >= 1 && grouping_.per_node >= 1 && grouping_.nodes * grouping_.per_node == size(),
               "hierarchical group '" << name() << "': " << grouping_.nodes << " nodes x " << grouping_.per_node
                                      << " members is not its " << size() << " ranks");
  const int local = rank() % grouping_.per_node, node = rank() / grouping_.per_node;
  intra_ = &add_level("intra-node", this->flat().split(node, local, name() + ".intra"));
  inter_ = &add_level("inter-node", this->flat().split(local, node, name() + ".inter"));
  start();
}

HierarchicalCommunicator::~HierarchicalCommunicator() { stop(); }

std::string HierarchicalCommunicator::algorithm() const {
  std::ostringstream out;
  out << "hierarchical (" << grouping_.nodes << " nodes x " << grouping_.per_node << ")";
  return out.str();
}

std::int64_t HierarchicalCommunicator::slot_elements(std::int64_t n) const {
  const std::int64_t p = size();
  return std::max<std::int64_t>(1, (n + p - 1) / p);
}

int HierarchicalCommunicator::slot_of(int member) const {
  return (member % grouping_.per_node) * grouping_.nodes + member / grouping_.per_node;
}

void HierarchicalCommunicator::run_all_reduce(Tensor& tensor, ReduceOp op) {
  const ChunkRange mine = chunk_range(tensor.numel(), grouping_.per_node, intra_->rank());
  Tensor shard = Tensor::empty({mine.size()}, tensor.dtype());
  Tensor flat_tensor = tensor.view({tensor.numel()});
  intra_->reduce_scatter(flat_tensor, shard, op);
  inter_->all_reduce(shard, op);
  intra_->all_gather(shard, flat_tensor);
}

void HierarchicalCommunicator::run_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  const std::int64_t n = input.numel(), m = slot_elements(n);
  const int p = size();
  Tensor slots = Tensor::zeros({p * m}, input.dtype());
  for (int d = 0; d < p; ++d) {
    const ChunkRange chunk = chunk_range(n, p, d);
    copy_elements(input, chunk.begin, slots, slot_of(d) * m, chunk.size());
  }
  Tensor column = Tensor::empty({grouping_.nodes * m}, input.dtype());
  intra_->reduce_scatter(slots, column, op);
  Tensor slot = Tensor::empty({m}, input.dtype());
  inter_->reduce_scatter(column, slot, op);
  copy_elements(slot, 0, output, 0, output.numel());
}

void HierarchicalCommunicator::run_all_gather(const Tensor& input, Tensor& output) {
  const std::int64_t n = output.numel(), m = slot_elements(n);
  const int p = size();
  Tensor slot = Tensor::zeros({m}, input.dtype());
  copy_elements(input, 0, slot, 0, input.numel());
  Tensor column = Tensor::empty({grouping_.nodes * m}, input.dtype());
  inter_->all_gather(slot, column);
  Tensor slots = Tensor::empty({p * m}, input.dtype());
  intra_->all_gather(column, slots);
  for (int d = 0; d < p; ++d) {
    const ChunkRange chunk = chunk_range(n, p, d);
    copy_elements(slots, slot_of(d) * m, output, chunk.begin, chunk.size());
  }
}

}  // namespace myriad::distributed
