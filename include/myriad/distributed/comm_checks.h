// Argument checks shared by every Communicator transport, run when an operation is issued (before
// anything is enqueued), so a bad call throws at the call site and leaves the group usable.
//
// Each check throws myriad::Error whose message starts with the context
//   "<op> on group '<name>' (rank R of N): "
// and names the tensors' dtypes, shapes and the sizes the chunk rule (chunk_range) expects.
// `device` is the memory the transport works on (cpu for MPI and loopback, cuda for NCCL).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "myriad/core/device.h"
#include "myriad/core/tensor.h"
#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

// "all_reduce on group 'dp' (rank 1 of 4)"
std::string comm_context(const char* op, const Communicator& comm);

void check_all_reduce_args(const Communicator& comm, const Tensor& tensor, DeviceType device = DeviceType::cpu);
// output.numel() == chunk_range(input.numel(), size, rank).size(), same dtype.
void check_reduce_scatter_args(const Communicator& comm, const Tensor& input, const Tensor& output,
                               DeviceType device = DeviceType::cpu);
// input.numel() == chunk_range(output.numel(), size, rank).size(), same dtype.
void check_all_gather_args(const Communicator& comm, const Tensor& input, const Tensor& output,
                           DeviceType device = DeviceType::cpu);
void check_broadcast_args(const Communicator& comm, const Tensor& tensor, int root,
                          DeviceType device = DeviceType::cpu);
// op is "send" or "recv"; peer in range and not this rank; 0 <= tag <= max_tag.
void check_point_to_point_args(const char* op, const Communicator& comm, const Tensor& tensor, int peer, int tag,
                               int max_tag, DeviceType device = DeviceType::cpu);
// Equal chunks: input and output have the same element count, divisible by the group size.
void check_all_to_all_args(const Communicator& comm, const Tensor& input, const Tensor& output,
                           DeviceType device = DeviceType::cpu);
// One non-negative count per rank; the counts add up to the tensors' element counts; the count
// this rank sends to itself equals the count it expects from itself. (That peers agree with
// each other cannot be checked locally: a transport reports it when the messages arrive.)
void check_all_to_all_v_args(const Communicator& comm, const Tensor& input,
                             const std::vector<std::int64_t>& send_counts, const Tensor& output,
                             const std::vector<std::int64_t>& recv_counts, DeviceType device = DeviceType::cpu);

// Whether reductions handle `dtype` on the host (f32, i32, i64) and on a GPU (also bf16, f16).
bool host_reducible(DType dtype);
bool device_reducible(DType dtype);

}  // namespace myriad::distributed
