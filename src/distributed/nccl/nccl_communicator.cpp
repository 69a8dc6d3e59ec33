// NcclCommunicator: the Communicator interface over NCCL on a stream of its own (see
// nccl_communicator.h). Invariants: every queued NCCL call is preceded by a wait on the compute
// stream's work so far; a work handle's completion is one event on the NCCL stream; pending
// send/recv are launched together as one NCCL group before any other operation is queued; an
// exact sum's kernels and collectives (exact_sum_steps.h) are one work between those two events.
#include "myriad/distributed/nccl_communicator.h"

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "exact_sum_steps.h"
#include "myriad/core/error.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/device_tensor.h"
#include "myriad/cuda/stream_graph.h"
#include "myriad/distributed/comm_checks.h"
#include "myriad/ops/exact_sum.h"

namespace myriad::distributed {

using cuda::DeviceBuffer;
using cuda::DeviceContext;
using cuda::DeviceGuard;

namespace {

using distributed::comm_context;
using distributed::CommOp;
using Clock = std::chrono::steady_clock;

ncclDataType_t reduction_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    default:
      MYRIAD_THROW("NCCL reduction of dtype " << dtype_name(dtype));
  }
}

ncclRedOp_t reduction_op(distributed::ReduceOp op) { return op == distributed::ReduceOp::sum ? ncclSum : ncclMax; }

char* bytes_at(const Tensor& tensor, std::int64_t element) {
  return static_cast<char*>(tensor.raw_data()) + element * static_cast<std::int64_t>(dtype_size(tensor.dtype()));
}

// Ring traffic per rank of one reduce-scatter or all-gather phase over `bytes`.
std::int64_t ring_phase_bytes(std::int64_t bytes, int size) { return size > 1 ? bytes * (size - 1) / size : 0; }

// The two events that bound one launch on the NCCL stream (shared by a group's work handles).
// `recorded`: launched while the compute stream was being recorded into a CUDA graph — the NCCL
// stream joined the recording, the calls are the graph's (run at each replay, not now), and the
// events only order the graph's work: a GPU refuses to query, wait for or time them.
struct Completion {
  cudaEvent_t start = nullptr;
  cudaEvent_t done = nullptr;
  int device = 0;
  bool recorded = false;
  explicit Completion(int device_index) : device(device_index) {
    DeviceGuard guard(device);
    MYRIAD_CUDA_CHECK(cudaEventCreate(&start));
    MYRIAD_CUDA_CHECK(cudaEventCreate(&done));
  }
  ~Completion() {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(done);
  }
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;
};

}  // namespace

struct NcclWork;

// NCCL handles, the pending point-to-point group and statistics of one NcclCommunicator.
struct NcclCommunicator::Impl {
  NcclCommunicator* owner = nullptr;
  ncclComm_t comm = nullptr;
  std::vector<ncclComm_t> tag_comms;            // tag_comms[0] == comm; the others owned here too
  ncclComm_t intra = nullptr, inter = nullptr;  // hierarchical all-reduce only (owned)
  cudaEvent_t compute_ready = nullptr;

  struct PendingP2p {
    bool send = false;
    void* data = nullptr;  // tensor's first byte (the tensor itself is kept alive by `work`)
    std::size_t bytes = 0;
    int peer = 0;
    int tag = 0;
    std::shared_ptr<NcclWork> work;
  };
  std::vector<PendingP2p> pending;
  std::vector<std::shared_ptr<NcclWork>> streamed;   // ordered by wait_on_stream, not yet waited for
  std::vector<std::shared_ptr<NcclWork>> unsettled;  // complete; their stream stall not yet measurable

  mutable std::mutex mutex;  // stats, pending, failure
  distributed::CommStats stats;
  std::string failure;  // set once the communicators were aborted

  void abort_all() noexcept {
    for (ncclComm_t c : tag_comms) {
      if (c != nullptr) (void)ncclCommAbort(c);
    }
    for (ncclComm_t c : {intra, inter}) {
      if (c != nullptr) (void)ncclCommAbort(c);
    }
    tag_comms.clear();
    comm = intra = inter = nullptr;
  }
};

// One operation (or one member of a point-to-point group). It holds the operation's tensors, so
// their memory cannot return to the caching allocator (and be reused by compute) while NCCL may
// still use it: a caller may pass temporaries and keep only the handle.
struct NcclWork final : public distributed::CommWork, public std::enable_shared_from_this<NcclWork> {
  NcclCommunicator::Impl* impl = nullptr;
  CommOp op = CommOp::all_reduce;
  std::shared_ptr<Completion> completion;  // null while a point-to-point group is pending
  std::vector<Tensor> tensors;
  bool counted = false;
  // Stream-ordered works: an event on the compute stream where it starts waiting for this one.
  cudaEvent_t reached = nullptr;
  mutable double stall = -1.0;  // the compute stream's wait, seconds; -1 until measured
  bool stall_counted = false;   // added to the statistics' wait_seconds

  NcclWork() = default;
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;
  ~NcclWork() override {
    if (reached != nullptr) (void)cudaEventDestroy(reached);
  }
  void wait() override;
  bool completed() const override;
  void wait_on_stream() override;
  double stream_stall_seconds() const override { return measure_stall() ? stall : 0.0; }
  // Measures the stall once both events have fired (the stream reached its wait and the work
  // completed; nothing waits for them); returns whether it is known.
  bool measure_stall() const;
};

namespace {

// Raises the failure of `op`: aborts every NCCL communicator of `impl` and throws.
[[noreturn]] void fail(NcclCommunicator::Impl& impl, CommOp op, const std::string& what) {
  const std::string context = comm_context(distributed::comm_op_name(op), *impl.owner);
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    if (impl.failure.empty()) impl.failure = context + ": " + what;
  }
  impl.abort_all();
  MYRIAD_THROW(context << ": " << what << "; the NCCL communicator was aborted");
}

void check_usable(NcclCommunicator::Impl& impl, CommOp op) {
  std::lock_guard<std::mutex> lock(impl.mutex);
  MYRIAD_CHECK(impl.failure.empty(), comm_context(distributed::comm_op_name(op), *impl.owner)
                                         << ": the communicator was aborted earlier (" << impl.failure << ")");
}

}  // namespace

namespace {

// Queues `enqueue` (NCCL calls on `stream`) after the compute stream's work, between two events.
std::shared_ptr<Completion> launch(NcclCommunicator::Impl& impl, DeviceContext& context, cudaStream_t stream, CommOp op,
                                   const std::function<void()>& enqueue) {
  try {
    DeviceGuard guard(context.device());
    auto completion = std::make_shared<Completion>(context.device());
    completion->recorded = cuda::is_capturing(context.stream());
    MYRIAD_CUDA_CHECK(cudaEventRecord(impl.compute_ready, context.stream()));
    MYRIAD_CUDA_CHECK(cudaStreamWaitEvent(stream, impl.compute_ready, 0));
    MYRIAD_CUDA_CHECK(cudaEventRecord(completion->start, stream));
    enqueue();
    MYRIAD_CUDA_CHECK(cudaEventRecord(completion->done, stream));
    return completion;
  } catch (const Error& e) {
    fail(impl, op, e.what());
  }
}

void count_bytes(NcclCommunicator::Impl& impl, CommOp op, std::int64_t sent, std::int64_t received) {
  std::lock_guard<std::mutex> lock(impl.mutex);
  auto& entry = impl.stats[op];
  entry.calls += 1;
  entry.bytes_sent += sent;
  entry.bytes_received += received;
}

// Launches the pending send/recv as one NCCL group; every member shares the completion.
void flush_point_to_point(NcclCommunicator::Impl& impl, DeviceContext& context, cudaStream_t stream) {
  std::vector<NcclCommunicator::Impl::PendingP2p> group;
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    group.swap(impl.pending);
  }
  if (group.empty()) return;
  auto completion = launch(impl, context, stream, group.front().send ? CommOp::send : CommOp::recv, [&] {
    MYRIAD_NCCL_CHECK(ncclGroupStart());
    for (const auto& p2p : group) {
      ncclComm_t comm = impl.tag_comms.at(static_cast<std::size_t>(p2p.tag));
      if (p2p.send) {
        MYRIAD_NCCL_CHECK(ncclSend(p2p.data, p2p.bytes, ncclUint8, p2p.peer, comm, stream));
      } else {
        MYRIAD_NCCL_CHECK(ncclRecv(p2p.data, p2p.bytes, ncclUint8, p2p.peer, comm, stream));
      }
    }
    MYRIAD_NCCL_CHECK(ncclGroupEnd());
  });
  for (auto& p2p : group) p2p.work->completion = completion;
}

}  // namespace

// --- NcclWork ------------------------------------------------------------------------------

namespace {
// A host wait for a call recorded into a CUDA graph cannot be: the call runs at the replays.
void refuse_host_wait_if_recorded(const NcclWork& work) {
  MYRIAD_CHECK(!work.completion->recorded, comm_context(distributed::comm_op_name(work.op), *work.impl->owner)
                                               << ": a host wait for an operation recorded into a CUDA graph (it "
                                                  "runs when the graph is replayed; order later work with "
                                                  "wait_on_stream)");
}
}  // namespace

void NcclWork::wait() {
  NcclCommunicator& owner = *impl->owner;
  const auto begin = Clock::now();
  if (!completion) flush_point_to_point(*impl, owner.context(), owner.stream());
  refuse_host_wait_if_recorded(*this);
  const double timeout = owner.timeout_seconds();
  while (true) {
    const cudaError_t state = cudaEventQuery(completion->done);
    if (state == cudaSuccess) break;
    if (state != cudaErrorNotReady) {
      (void)cudaGetLastError();
      fail(*impl, op,
           std::string("CUDA error ") + cudaGetErrorName(state) + " (" + cudaGetErrorString(state) + ") while waiting");
    }
    ncclResult_t async_error = ncclSuccess;
    if (impl->comm != nullptr && ncclCommGetAsyncError(impl->comm, &async_error) == ncclSuccess &&
        async_error != ncclSuccess && async_error != ncclInProgress) {
      fail(*impl, op,
           std::string("NCCL asynchronous error ") + ncclGetErrorString(async_error) +
               " (a peer failed or the network broke)");
    }
    const double waited = std::chrono::duration<double>(Clock::now() - begin).count();
    if (timeout > 0.0 && waited > timeout) {
      fail(*impl, op,
           "not complete after " + std::to_string(waited) + " s (timeout " + std::to_string(timeout) +
               " s): a rank of the group did not join");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  {
    DeviceGuard guard(owner.context().device());
    MYRIAD_CUDA_CHECK(cudaStreamWaitEvent(owner.context().stream(), completion->done, 0));
  }
  float milliseconds = 0.0f;
  const bool timed = cudaEventElapsedTime(&milliseconds, completion->start, completion->done) == cudaSuccess;
  const bool stall_known = reached != nullptr && measure_stall();
  std::lock_guard<std::mutex> lock(impl->mutex);
  auto& entry = impl->stats[op];
  if (reached == nullptr) {
    entry.wait_seconds += std::chrono::duration<double>(Clock::now() - begin).count();
  } else if (!stall_counted) {  // exposed = the stream's stall, not this host wait (complete_streamed's)
    if (stall_known) {
      entry.wait_seconds += stall;
      stall_counted = true;
    } else if (std::find(impl->unsettled.begin(), impl->unsettled.end(), shared_from_this()) == impl->unsettled.end()) {
      impl->unsettled.push_back(shared_from_this());
    }
  }
  if (!counted && timed) entry.seconds += milliseconds / 1000.0;
  counted = true;
  tensors.clear();  // complete: NCCL reads or writes them no more
}

bool NcclWork::measure_stall() const {
  if (stall >= 0.0) return true;
  if (reached == nullptr || !completion) return false;
  DeviceGuard guard(completion->device);
  if (cudaEventQuery(reached) != cudaSuccess || cudaEventQuery(completion->done) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  float milliseconds = 0.0f;
  const bool timed = cudaEventElapsedTime(&milliseconds, reached, completion->done) == cudaSuccess;
  if (!timed) (void)cudaGetLastError();
  stall = timed ? std::max(0.0, static_cast<double>(milliseconds) / 1000.0) : 0.0;
  return true;
}

void NcclWork::wait_on_stream() {
  NcclCommunicator& owner = *impl->owner;
  if (!completion) flush_point_to_point(*impl, owner.context(), owner.stream());
  if (completion->recorded) {  // joins the NCCL stream back into the recording; nothing to check on the host
    DeviceGuard guard(owner.context().device());
    MYRIAD_CUDA_CHECK(cudaStreamWaitEvent(owner.context().stream(), completion->done, 0));
    tensors.clear();  // the graph's buffers live in its pool
    return;
  }
  {
    DeviceGuard guard(owner.context().device());
    if (reached == nullptr) MYRIAD_CUDA_CHECK(cudaEventCreate(&reached));
    MYRIAD_CUDA_CHECK(cudaEventRecord(reached, owner.context().stream()));
    MYRIAD_CUDA_CHECK(cudaStreamWaitEvent(owner.context().stream(), completion->done, 0));
  }
  std::size_t outstanding = 0;
  {
    std::lock_guard<std::mutex> lock(impl->mutex);
    impl->streamed.push_back(shared_from_this());
    outstanding = impl->streamed.size();
  }
  // A caller that never completes them would keep every tensor alive: past this many, wait here.
  constexpr std::size_t kMaxOutstanding = 4096;
  if (outstanding > kMaxOutstanding) owner.complete_streamed();
}

bool NcclWork::completed() const {
  if (!completion) {
    NcclCommunicator& owner = *impl->owner;
    flush_point_to_point(*impl, owner.context(), owner.stream());
  }
  // A recorded call runs at the replays: never known complete here (its caller retires it in
  // stream order, wait_on_stream).
  if (completion->recorded) return false;
  return cudaEventQuery(completion->done) == cudaSuccess;
}

// --- NcclCommunicator ----------------------------------------------------------------------

namespace {

std::unique_ptr<NcclCommunicator::Impl> make_impl() { return std::make_unique<NcclCommunicator::Impl>(); }

// The extra per-tag communicators (tag 0 uses `comm` itself).
void split_tag_communicators(NcclCommunicator::Impl& impl, int tags, int rank) {
  impl.tag_comms.assign(1, impl.comm);
  for (int tag = 1; tag < tags; ++tag) {
    ncclComm_t tag_comm = nullptr;
    MYRIAD_NCCL_CHECK(ncclCommSplit(impl.comm, 0, rank, &tag_comm, nullptr));
    impl.tag_comms.push_back(tag_comm);
  }
}

// The intra-node and inter-node communicators of a hierarchical all-reduce (none when flat).
void split_hierarchy(NcclCommunicator::Impl& impl, const NodeGrouping& h, int rank, int size) {
  if (h.nodes <= 1 || h.per_node <= 1) return;
  MYRIAD_CHECK(h.nodes * h.per_node == size, "hierarchy of " << h.nodes << " nodes x " << h.per_node
                                                             << " members is not the group's " << size << " ranks");
  const int local = rank % h.per_node, node = rank / h.per_node;
  MYRIAD_NCCL_CHECK(ncclCommSplit(impl.comm, node, local, &impl.intra, nullptr));
  MYRIAD_NCCL_CHECK(ncclCommSplit(impl.comm, local, node, &impl.inter, nullptr));
}

}  // namespace

NcclCommunicator::NcclCommunicator(distributed::Communicator& host, DeviceContext& context, NcclOptions options)
    : host_(&host),
      context_(context),
      options_(options),
      name_(host.name()),
      rank_(host.rank()),
      size_(host.size()),
      impl_(make_impl()) {
  MYRIAD_CHECK(options_.p2p_tags >= 1, "NcclCommunicator for group '" << name_ << "': p2p_tags must be at least 1");
  impl_->owner = this;
  // The unique id travels as bytes over the host communicator (MPI_Bcast for MpiCommunicator).
  ncclUniqueId id{};
  if (rank_ == 0) MYRIAD_NCCL_CHECK(ncclGetUniqueId(&id));
  Tensor id_bytes = Tensor::empty({static_cast<std::int64_t>(sizeof(id))}, DType::i8);
  std::memcpy(id_bytes.raw_data(), &id, sizeof(id));
  host.broadcast(id_bytes, 0);
  std::memcpy(&id, id_bytes.raw_data(), sizeof(id));

  DeviceGuard guard(context.device());
  MYRIAD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MYRIAD_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->compute_ready, cudaEventDisableTiming));
  try {
    MYRIAD_NCCL_CHECK(ncclCommInitRank(&impl_->comm, size_, id, rank_));
    split_tag_communicators(*impl_, options_.p2p_tags, rank_);
    split_hierarchy(*impl_, options_.hierarchy, rank_, size_);
  } catch (const Error& e) {
    impl_->abort_all();
    MYRIAD_THROW("NcclCommunicator for group '" << name_ << "' (rank " << rank_ << " of " << size_
                                                << ", cuda:" << context.device() << "): " << e.what());
  }
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<distributed::Communicator> owned_host, DeviceContext& context,
                                   NcclOptions options, std::unique_ptr<Impl> impl)
    : owned_host_(std::move(owned_host)),
      host_(owned_host_.get()),
      context_(context),
      options_(options),
      name_(host_->name()),
      rank_(host_->rank()),
      size_(host_->size()),
      impl_(std::move(impl)) {
  impl_->owner = this;
  DeviceGuard guard(context.device());
  MYRIAD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MYRIAD_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->compute_ready, cudaEventDisableTiming));
}

void NcclCommunicator::complete_streamed() {
  std::vector<std::shared_ptr<NcclWork>> works;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    works.swap(impl_->streamed);
  }
  for (const std::shared_ptr<NcclWork>& work : works) work->wait();
}

NcclCommunicator::~NcclCommunicator() {
  int previous = -1;
  const bool known = cudaGetDevice(&previous) == cudaSuccess;
  (void)cudaSetDevice(context_.device());
  if (impl_->failure.empty()) {
    try {
      flush_point_to_point(*impl_, context_, stream_);
    } catch (...) {
      // destruction never throws; the failure already aborted the communicators
    }
    (void)cudaStreamSynchronize(stream_);
    for (ncclComm_t c : impl_->tag_comms) {
      if (c != nullptr) (void)ncclCommDestroy(c);
    }
    for (ncclComm_t c : {impl_->intra, impl_->inter}) {
      if (c != nullptr) (void)ncclCommDestroy(c);
    }
  }
  (void)cudaEventDestroy(impl_->compute_ready);
  (void)cudaStreamDestroy(stream_);
  if (known) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

namespace {

distributed::WorkHandle make_work(NcclCommunicator::Impl& impl, CommOp op, std::shared_ptr<Completion> completion,
                                  std::vector<Tensor> tensors) {
  auto work = std::make_shared<NcclWork>();
  work->impl = &impl;
  work->op = op;
  work->completion = std::move(completion);
  work->tensors = std::move(tensors);
  return work;
}

}  // namespace

distributed::WorkHandle NcclCommunicator::all_reduce_async(Tensor tensor, distributed::ReduceOp op) {
  if (tensor.defined() && tensor.device().is_cpu()) return host_->all_reduce_async(std::move(tensor), op);
  distributed::check_all_reduce_args(*this, tensor, DeviceType::cuda);
  check_usable(*impl_, CommOp::all_reduce);
  flush_point_to_point(*impl_, context_, stream_);
  if (sums_exactly(tensor, op)) return exact_all_reduce(std::move(tensor));
  const auto element = static_cast<std::int64_t>(dtype_size(tensor.dtype()));
  const std::int64_t traffic = all_reduce_traffic(tensor.numel(), element);
  count_bytes(*impl_, CommOp::all_reduce, traffic, traffic);
  return make_work(*impl_, CommOp::all_reduce,
                   launch(*impl_, context_, stream_, CommOp::all_reduce,
                          [&] { queue_all_reduce(tensor.raw_data(), tensor.numel(), tensor.dtype(), op); }),
                   {tensor});
}

NodeGrouping NcclCommunicator::hierarchy() const {
  return impl_->intra != nullptr ? options_.hierarchy : NodeGrouping{.nodes = 1, .per_node = size_};
}

std::int64_t NcclCommunicator::all_reduce_traffic(std::int64_t n, std::int64_t element) const {
  if (impl_->intra == nullptr) return 2 * ring_phase_bytes(n * element, size_);
  const NodeGrouping& h = options_.hierarchy;
  const std::int64_t m = n / h.per_node, body = m * h.per_node;
  return 2 * ring_phase_bytes(body * element, h.per_node) + 2 * ring_phase_bytes(m * element, h.nodes) +
         2 * ring_phase_bytes((n - body) * element, size_);
}

void NcclCommunicator::queue_all_reduce(void* data, std::int64_t n, DType dtype, distributed::ReduceOp op) {
  const ncclDataType_t type = reduction_type(dtype);
  if (impl_->intra == nullptr) {
    MYRIAD_NCCL_CHECK(
        ncclAllReduce(data, data, static_cast<std::size_t>(n), type, reduction_op(op), impl_->comm, stream_));
    return;
  }
  // Hierarchical: the first L m elements intra reduce-scatter, inter all-reduce of the chunk,
  // intra all-gather; the rest one flat all-reduce (nccl_communicator.h).
  const NodeGrouping& h = options_.hierarchy;
  const auto element = static_cast<std::int64_t>(dtype_size(dtype));
  const std::int64_t L = h.per_node, m = n / L, body = m * L;
  char* base = static_cast<char*>(data);
  char* mine = base + (rank_ % h.per_node) * m * element;
  const auto count = static_cast<std::size_t>(m);
  if (m > 0) {
    MYRIAD_NCCL_CHECK(ncclReduceScatter(base, mine, count, type, reduction_op(op), impl_->intra, stream_));
    MYRIAD_NCCL_CHECK(ncclAllReduce(mine, mine, count, type, reduction_op(op), impl_->inter, stream_));
    MYRIAD_NCCL_CHECK(ncclAllGather(mine, base, count, type, impl_->intra, stream_));
  }
  if (n > body) {
    char* rest = base + body * element;
    MYRIAD_NCCL_CHECK(
        ncclAllReduce(rest, rest, static_cast<std::size_t>(n - body), type, reduction_op(op), impl_->comm, stream_));
  }
}

void NcclCommunicator::queue_reduce_scatter(const void* input, void* output, std::int64_t n, DType dtype,
                                            distributed::ReduceOp op) {
  const ncclDataType_t type = reduction_type(dtype);
  if (n % size_ == 0) {
    MYRIAD_NCCL_CHECK(ncclReduceScatter(input, output, static_cast<std::size_t>(n / size_), type, reduction_op(op),
                                        impl_->comm, stream_));
    return;
  }
  // Unequal chunks: chunk r is reduced onto rank r (recvbuff is used at the root only).
  const auto element = static_cast<std::int64_t>(dtype_size(dtype));
  MYRIAD_NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < size_; ++r) {
    const distributed::ChunkRange chunk = distributed::chunk_range(n, size_, r);
    MYRIAD_NCCL_CHECK(ncclReduce(static_cast<const char*>(input) + chunk.begin * element, output,
                                 static_cast<std::size_t>(chunk.size()), type, reduction_op(op), r, impl_->comm,
                                 stream_));
  }
  MYRIAD_NCCL_CHECK(ncclGroupEnd());
}

distributed::WorkHandle NcclCommunicator::reduce_scatter_async(Tensor input, Tensor output, distributed::ReduceOp op) {
  if (input.defined() && input.device().is_cpu()) {
    return host_->reduce_scatter_async(std::move(input), std::move(output), op);
  }
  distributed::check_reduce_scatter_args(*this, input, output, DeviceType::cuda);
  check_usable(*impl_, CommOp::reduce_scatter);
  flush_point_to_point(*impl_, context_, stream_);
  if (sums_exactly(input, op)) return exact_reduce_scatter(std::move(input), std::move(output));
  const std::int64_t traffic = ring_phase_bytes(static_cast<std::int64_t>(input.nbytes()), size_);
  count_bytes(*impl_, CommOp::reduce_scatter, traffic, traffic);
  return make_work(
      *impl_, CommOp::reduce_scatter,
      launch(*impl_, context_, stream_, CommOp::reduce_scatter,
             [&] { queue_reduce_scatter(input.raw_data(), output.raw_data(), input.numel(), input.dtype(), op); }),
      {input, output});
}

bool NcclCommunicator::sums_exactly(const Tensor& tensor, distributed::ReduceOp op) const {
  return options_.exact_sums && op == distributed::ReduceOp::sum && tensor.dtype() == DType::f32 && tensor.numel() > 0;
}

distributed::WorkHandle NcclCommunicator::exact_all_reduce(Tensor tensor) {
  const std::int64_t n = tensor.numel();
  Tensor exponents = cuda::device_empty(context_, {exact_sum_blocks(n)}, DType::i32);
  Tensor fixed = cuda::device_empty(context_, {n}, DType::i64);
  const std::int64_t traffic = all_reduce_traffic(exponents.numel(), 4) + all_reduce_traffic(n, 8);
  count_bytes(*impl_, CommOp::all_reduce, traffic, traffic);
  const ExactSumBuffers buffers{.exponents = exponents.data<std::int32_t>(), .fixed = fixed.data<std::int64_t>()};
  return make_work(*impl_, CommOp::all_reduce,
                   launch(*impl_, context_, stream_, CommOp::all_reduce,
                          [&] {
                            queue_exact_all_reduce(
                                tensor.data<float>(), n, exact_sum_headroom(size_), buffers, stream_,
                                [this](void* data, std::int64_t count, DType dtype, distributed::ReduceOp op) {
                                  queue_all_reduce(data, count, dtype, op);
                                });
                          }),
                   {tensor, exponents, fixed});
}

distributed::WorkHandle NcclCommunicator::exact_reduce_scatter(Tensor input, Tensor output) {
  const std::int64_t n = input.numel();
  const distributed::ChunkRange mine = distributed::chunk_range(n, size_, rank_);
  Tensor exponents = cuda::device_empty(context_, {exact_sum_blocks(n)}, DType::i32);
  Tensor fixed = cuda::device_empty(context_, {n + std::max<std::int64_t>(mine.size(), 1)}, DType::i64);
  const std::int64_t traffic = all_reduce_traffic(exponents.numel(), 4) + ring_phase_bytes(n * 8, size_);
  count_bytes(*impl_, CommOp::reduce_scatter, traffic, traffic);
  const ExactSumBuffers buffers{.exponents = exponents.data<std::int32_t>(),
                                .fixed = fixed.data<std::int64_t>(),
                                .chunk = fixed.data<std::int64_t>() + n};
  return make_work(*impl_, CommOp::reduce_scatter,
                   launch(*impl_, context_, stream_, CommOp::reduce_scatter,
                          [&] {
                            queue_exact_reduce_scatter(
                                input.data<float>(), n, output.data<float>(), mine, exact_sum_headroom(size_), buffers,
                                stream_,
                                [this](void* data, std::int64_t count, DType dtype, distributed::ReduceOp op) {
                                  queue_all_reduce(data, count, dtype, op);
                                },
                                [this](const void* from, void* into, std::int64_t count) {
                                  queue_reduce_scatter(from, into, count, DType::i64, distributed::ReduceOp::sum);
                                });
                          }),
                   {input, output, exponents, fixed});
}

distributed::WorkHandle NcclCommunicator::all_gather_async(Tensor input, Tensor output) {
  if (input.defined() && input.device().is_cpu()) return host_->all_gather_async(std::move(input), std::move(output));
  distributed::check_all_gather_args(*this, input, output, DeviceType::cuda);
  check_usable(*impl_, CommOp::all_gather);
  flush_point_to_point(*impl_, context_, stream_);
  const std::int64_t traffic = ring_phase_bytes(static_cast<std::int64_t>(output.nbytes()), size_);
  count_bytes(*impl_, CommOp::all_gather, traffic, traffic);
  const std::int64_t n = output.numel();
  const std::size_t element = dtype_size(output.dtype());
  return make_work(
      *impl_, CommOp::all_gather,
      launch(*impl_, context_, stream_, CommOp::all_gather,
             [&] {
               if (n % size_ == 0) {
                 MYRIAD_NCCL_CHECK(ncclAllGather(input.raw_data(), output.raw_data(),
                                                 static_cast<std::size_t>(n / size_) * element, ncclUint8, impl_->comm,
                                                 stream_));
                 return;
               }
               // Unequal chunks: rank r broadcasts its chunk into place on every rank.
               MYRIAD_NCCL_CHECK(ncclGroupStart());
               for (int r = 0; r < size_; ++r) {
                 const distributed::ChunkRange chunk = distributed::chunk_range(n, size_, r);
                 MYRIAD_NCCL_CHECK(ncclBroadcast(r == rank_ ? input.raw_data() : nullptr, bytes_at(output, chunk.begin),
                                                 static_cast<std::size_t>(chunk.size()) * element, ncclUint8, r,
                                                 impl_->comm, stream_));
               }
               MYRIAD_NCCL_CHECK(ncclGroupEnd());
             }),
      {input, output});
}

distributed::WorkHandle NcclCommunicator::broadcast_async(Tensor tensor, int root) {
  if (tensor.defined() && tensor.device().is_cpu()) return host_->broadcast_async(std::move(tensor), root);
  distributed::check_broadcast_args(*this, tensor, root, DeviceType::cuda);
  check_usable(*impl_, CommOp::broadcast);
  flush_point_to_point(*impl_, context_, stream_);
  const auto bytes = static_cast<std::int64_t>(tensor.nbytes());
  count_bytes(*impl_, CommOp::broadcast, rank_ == root ? bytes : 0, rank_ == root ? 0 : bytes);
  return make_work(*impl_, CommOp::broadcast,
                   launch(*impl_, context_, stream_, CommOp::broadcast,
                          [&] {
                            MYRIAD_NCCL_CHECK(ncclBroadcast(tensor.raw_data(), tensor.raw_data(), tensor.nbytes(),
                                                            ncclUint8, root, impl_->comm, stream_));
                          }),
                   {tensor});
}

namespace {

distributed::WorkHandle queue_point_to_point(NcclCommunicator::Impl& impl, bool send, const Tensor& tensor, int peer,
                                             int tag) {
  const CommOp op = send ? CommOp::send : CommOp::recv;
  check_usable(impl, op);
  auto work = std::make_shared<NcclWork>();
  work->impl = &impl;
  work->op = op;
  work->tensors = {tensor};
  const auto bytes = static_cast<std::int64_t>(tensor.nbytes());
  count_bytes(impl, op, send ? bytes : 0, send ? 0 : bytes);
  std::lock_guard<std::mutex> lock(impl.mutex);
  impl.pending.push_back({send, tensor.raw_data(), tensor.nbytes(), peer, tag, work});
  return work;
}

}  // namespace

distributed::WorkHandle NcclCommunicator::send_async(Tensor tensor, int peer, int tag) {
  distributed::check_point_to_point_args("send", *this, tensor, peer, tag, options_.p2p_tags - 1, DeviceType::cuda);
  return queue_point_to_point(*impl_, true, tensor, peer, tag);
}

distributed::WorkHandle NcclCommunicator::recv_async(Tensor tensor, int peer, int tag) {
  distributed::check_point_to_point_args("recv", *this, tensor, peer, tag, options_.p2p_tags - 1, DeviceType::cuda);
  return queue_point_to_point(*impl_, false, tensor, peer, tag);
}

void NcclCommunicator::start_point_to_point() { flush_point_to_point(*impl_, context_, stream_); }

distributed::WorkHandle NcclCommunicator::all_to_all_async(Tensor input, Tensor output) {
  if (input.defined() && input.device().is_cpu()) return host_->all_to_all_async(std::move(input), std::move(output));
  distributed::check_all_to_all_args(*this, input, output, DeviceType::cuda);
  const std::vector<std::int64_t> counts(static_cast<std::size_t>(size_), input.numel() / size_);
  return all_to_all_v_async(std::move(input), counts, std::move(output), counts);
}

distributed::WorkHandle NcclCommunicator::all_to_all_v_async(Tensor input, std::vector<std::int64_t> send_counts,
                                                             Tensor output, std::vector<std::int64_t> recv_counts) {
  if (input.defined() && input.device().is_cpu()) {
    return host_->all_to_all_v_async(std::move(input), std::move(send_counts), std::move(output),
                                     std::move(recv_counts));
  }
  distributed::check_all_to_all_v_args(*this, input, send_counts, output, recv_counts, DeviceType::cuda);
  check_usable(*impl_, CommOp::all_to_all);
  flush_point_to_point(*impl_, context_, stream_);
  const std::size_t element = dtype_size(input.dtype());
  std::int64_t sent = 0, received = 0;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    sent += send_counts[static_cast<std::size_t>(p)] * static_cast<std::int64_t>(element);
    received += recv_counts[static_cast<std::size_t>(p)] * static_cast<std::int64_t>(element);
  }
  count_bytes(*impl_, CommOp::all_to_all, sent, received);
  return make_work(*impl_, CommOp::all_to_all,
                   launch(*impl_, context_, stream_, CommOp::all_to_all,
                          [&] {
                            MYRIAD_NCCL_CHECK(ncclGroupStart());
                            std::int64_t send_offset = 0, recv_offset = 0;
                            for (int p = 0; p < size_; ++p) {
                              const auto send_count = send_counts[static_cast<std::size_t>(p)];
                              const auto recv_count = recv_counts[static_cast<std::size_t>(p)];
                              MYRIAD_NCCL_CHECK(ncclSend(bytes_at(input, send_offset),
                                                         static_cast<std::size_t>(send_count) * element, ncclUint8, p,
                                                         impl_->comm, stream_));
                              MYRIAD_NCCL_CHECK(ncclRecv(bytes_at(output, recv_offset),
                                                         static_cast<std::size_t>(recv_count) * element, ncclUint8, p,
                                                         impl_->comm, stream_));
                              send_offset += send_count;
                              recv_offset += recv_count;
                            }
                            MYRIAD_NCCL_CHECK(ncclGroupEnd());
                          }),
                   {input, output});
}

distributed::WorkHandle NcclCommunicator::barrier_async() {
  check_usable(*impl_, CommOp::barrier);
  flush_point_to_point(*impl_, context_, stream_);
  count_bytes(*impl_, CommOp::barrier, 0, 0);
  // An all-reduce of one float: complete on a rank only once every rank has joined.
  auto token = std::make_shared<DeviceBuffer>(sizeof(float), context_.device());
  auto work = make_work(*impl_, CommOp::barrier,
                        launch(*impl_, context_, stream_, CommOp::barrier,
                               [&] {
                                 MYRIAD_CUDA_CHECK(cudaMemsetAsync(token->data(), 0, sizeof(float), stream_));
                                 MYRIAD_NCCL_CHECK(ncclAllReduce(token->data(), token->data(), 1, ncclFloat32, ncclSum,
                                                                 impl_->comm, stream_));
                               }),
                        {});
  // The token must live until the all-reduce ran: synchronise here (a barrier is rare).
  work->wait();
  return work;
}

void NcclCommunicator::abort(int exit_code, const std::string& reason) {
  impl_->abort_all();
  host_->abort(exit_code, reason);
  std::abort();  // not reached: the host communicator's abort ends the process
}

std::unique_ptr<distributed::Communicator> NcclCommunicator::split(int color, int key, const std::string& name) {
  check_usable(*impl_, CommOp::barrier);
  flush_point_to_point(*impl_, context_, stream_);
  std::unique_ptr<distributed::Communicator> host_part = host_->split(color, key, name);
  auto impl = make_impl();
  try {
    MYRIAD_NCCL_CHECK(ncclCommSplit(impl_->comm, color, key, &impl->comm, nullptr));
    split_tag_communicators(*impl, options_.p2p_tags, host_part->rank());
  } catch (const Error& e) {
    impl->abort_all();
    MYRIAD_THROW(comm_context("split", *this) << " into '" << name << "': " << e.what());
  }
  return std::unique_ptr<distributed::Communicator>(
      new NcclCommunicator(std::move(host_part), context_,
                           NcclOptions{.p2p_tags = options_.p2p_tags, .timeout_seconds = options_.timeout_seconds},
                           std::move(impl)));  // flat: a split group has its own placement
}

distributed::CommStats NcclCommunicator::stats() const {
  // Stream stalls that became measurable since (the stream has passed their waits) count now.
  std::vector<std::shared_ptr<NcclWork>> unsettled, still;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    unsettled.swap(impl_->unsettled);
  }
  std::vector<std::shared_ptr<NcclWork>> settled;
  for (const std::shared_ptr<NcclWork>& work : unsettled) (work->measure_stall() ? settled : still).push_back(work);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (const std::shared_ptr<NcclWork>& work : settled) {
    if (work->stall_counted) continue;
    impl_->stats[work->op].wait_seconds += work->stall;
    work->stall_counted = true;
  }
  impl_->unsettled.insert(impl_->unsettled.end(), still.begin(), still.end());
  return impl_->stats;
}

void NcclCommunicator::reset_stats() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->stats = distributed::CommStats{};
}

void NcclCommunicator::count_replayed(const distributed::CommStats& recorded) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (std::size_t op = 0; op < recorded.ops.size(); ++op) {
    distributed::CommOpStats& entry = impl_->stats.ops[op];
    entry.calls += recorded.ops[op].calls;
    entry.bytes_sent += recorded.ops[op].bytes_sent;
    entry.bytes_received += recorded.ops[op].bytes_received;
  }
}

}  // namespace myriad::distributed
