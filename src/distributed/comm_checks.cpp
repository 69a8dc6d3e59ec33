// Issue-time argument checks shared by the Communicator transports (see comm_checks.h).
#include "myriad/distributed/comm_checks.h"

#include <numeric>
#include <sstream>

#include "myriad/core/error.h"

namespace myriad::distributed {

std::string comm_context(const char* op, const Communicator& comm) {
  std::ostringstream out;
  out << op << " on group '" << comm.name() << "' (rank " << comm.rank() << " of " << comm.size() << ")";
  return out.str();
}

namespace {

std::string device_name(DeviceType device) { return device == DeviceType::cpu ? "cpu" : "cuda"; }

void check_tensor(const char* op, const Communicator& comm, const Tensor& tensor, const char* role, DeviceType device) {
  MYRIAD_CHECK(tensor.defined(), comm_context(op, comm) << ": " << role << " tensor is undefined");
  MYRIAD_CHECK(tensor.device().type == device, comm_context(op, comm) << ": " << role << " tensor " << tensor.describe()
                                                                      << " must be on " << device_name(device));
  MYRIAD_CHECK(tensor.is_contiguous(), comm_context(op, comm)
                                           << ": " << role << " tensor " << tensor.describe() << " must be contiguous");
}

void check_reducible(const char* op, const Communicator& comm, const Tensor& tensor, DeviceType device) {
  const bool on_host = device == DeviceType::cpu;
  MYRIAD_CHECK(on_host ? host_reducible(tensor.dtype()) : device_reducible(tensor.dtype()),
               comm_context(op, comm) << ": cannot reduce dtype " << dtype_name(tensor.dtype()) << " (tensor "
                                      << tensor.describe()
                                      << "); allowed: " << (on_host ? "f32, i32, i64" : "f32, bf16, f16, i32, i64"));
}

void check_same_dtype(const char* op, const Communicator& comm, const Tensor& input, const Tensor& output) {
  MYRIAD_CHECK(input.dtype() == output.dtype(), comm_context(op, comm)
                                                    << ": input " << input.describe() << " and output "
                                                    << output.describe() << " differ in dtype");
}

void check_counts(const char* op, const Communicator& comm, const std::vector<std::int64_t>& counts, const char* role,
                  const Tensor& tensor) {
  MYRIAD_CHECK(static_cast<int>(counts.size()) == comm.size(), comm_context(op, comm)
                                                                   << ": " << counts.size() << " " << role
                                                                   << " counts for a group of " << comm.size());
  for (std::size_t p = 0; p < counts.size(); ++p) {
    MYRIAD_CHECK(counts[p] >= 0, comm_context(op, comm) << ": " << role << " count for rank " << p << " is negative ("
                                                        << counts[p] << ")");
  }
  const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  MYRIAD_CHECK(total == tensor.numel(), comm_context(op, comm) << ": " << role << " counts add up to " << total
                                                               << " elements but the tensor " << tensor.describe()
                                                               << " has " << tensor.numel());
}

}  // namespace

bool host_reducible(DType dtype) { return dtype == DType::f32 || dtype == DType::i32 || dtype == DType::i64; }

bool device_reducible(DType dtype) { return host_reducible(dtype) || dtype == DType::bf16 || dtype == DType::f16; }

void check_all_reduce_args(const Communicator& comm, const Tensor& tensor, DeviceType device) {
  check_tensor("all_reduce", comm, tensor, "the", device);
  check_reducible("all_reduce", comm, tensor, device);
}

void check_reduce_scatter_args(const Communicator& comm, const Tensor& input, const Tensor& output, DeviceType device) {
  const char* op = "reduce_scatter";
  check_tensor(op, comm, input, "input", device);
  check_tensor(op, comm, output, "output", device);
  check_reducible(op, comm, input, device);
  check_same_dtype(op, comm, input, output);
  const ChunkRange chunk = chunk_range(input.numel(), comm.size(), comm.rank());
  MYRIAD_CHECK(output.numel() == chunk.size(), comm_context(op, comm)
                                                   << ": output " << output.describe() << " has " << output.numel()
                                                   << " elements but chunk " << comm.rank() << " of input "
                                                   << input.describe() << " is [" << chunk.begin << ", " << chunk.end
                                                   << ") = " << chunk.size() << " elements");
}

void check_all_gather_args(const Communicator& comm, const Tensor& input, const Tensor& output, DeviceType device) {
  const char* op = "all_gather";
  check_tensor(op, comm, input, "input", device);
  check_tensor(op, comm, output, "output", device);
  check_same_dtype(op, comm, input, output);
  const ChunkRange chunk = chunk_range(output.numel(), comm.size(), comm.rank());
  MYRIAD_CHECK(input.numel() == chunk.size(), comm_context(op, comm)
                                                  << ": input " << input.describe() << " has " << input.numel()
                                                  << " elements but chunk " << comm.rank() << " of output "
                                                  << output.describe() << " is [" << chunk.begin << ", " << chunk.end
                                                  << ") = " << chunk.size() << " elements");
}

void check_broadcast_args(const Communicator& comm, const Tensor& tensor, int root, DeviceType device) {
  check_tensor("broadcast", comm, tensor, "the", device);
  MYRIAD_CHECK(root >= 0 && root < comm.size(), comm_context("broadcast", comm)
                                                    << ": root " << root << " outside [0, " << comm.size() << ")");
}

void check_point_to_point_args(const char* op, const Communicator& comm, const Tensor& tensor, int peer, int tag,
                               int max_tag, DeviceType device) {
  check_tensor(op, comm, tensor, "the", device);
  MYRIAD_CHECK(peer >= 0 && peer < comm.size(), comm_context(op, comm)
                                                    << ": peer " << peer << " outside [0, " << comm.size() << ")");
  MYRIAD_CHECK(peer != comm.rank(), comm_context(op, comm)
                                        << ": peer " << peer << " is this rank (send/recv to self is not supported)");
  MYRIAD_CHECK(tag >= 0 && tag <= max_tag, comm_context(op, comm)
                                               << ": tag " << tag << " outside [0, " << max_tag << "]");
}

void check_all_to_all_args(const Communicator& comm, const Tensor& input, const Tensor& output, DeviceType device) {
  const char* op = "all_to_all";
  check_tensor(op, comm, input, "input", device);
  check_tensor(op, comm, output, "output", device);
  check_same_dtype(op, comm, input, output);
  MYRIAD_CHECK(input.numel() == output.numel(), comm_context(op, comm)
                                                    << ": input " << input.describe() << " and output "
                                                    << output.describe() << " differ in element count");
  MYRIAD_CHECK(input.numel() % comm.size() == 0, comm_context(op, comm)
                                                     << ": " << input.numel() << " elements of " << input.describe()
                                                     << " do not split into " << comm.size()
                                                     << " equal chunks (use all_to_all_v for unequal ones)");
}

void check_all_to_all_v_args(const Communicator& comm, const Tensor& input,
                             const std::vector<std::int64_t>& send_counts, const Tensor& output,
                             const std::vector<std::int64_t>& recv_counts, DeviceType device) {
  const char* op = "all_to_all_v";
  check_tensor(op, comm, input, "input", device);
  check_tensor(op, comm, output, "output", device);
  check_same_dtype(op, comm, input, output);
  check_counts(op, comm, send_counts, "send", input);
  check_counts(op, comm, recv_counts, "recv", output);
  const int r = comm.rank();
  MYRIAD_CHECK(send_counts[r] == recv_counts[r], comm_context(op, comm)
                                                     << ": sends " << send_counts[r]
                                                     << " elements to itself but expects " << recv_counts[r]);
}

}  // namespace myriad::distributed
