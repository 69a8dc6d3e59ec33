// NCCL emulated over MPI for the emulated device tests (see cuda_on_host.cpp): "device" memory is
// host memory there, so each NCCL call becomes the MPI call with the same meaning on the same
// buffers, and NcclCommunicator's own code (unique-id exchange, groups, per-tag communicators,
// unequal-chunk paths, statistics) runs unchanged against it. Linked only into the emulated test
// binaries, never into the library.
//
// Model: a communicator is an MPI communicator. ncclCommInitRank splits MPI_COMM_WORLD by the
// unique id, which ncclGetUniqueId fills with the creating world rank (every world rank must be
// creating a communicator at the same time, as the engine's groups do). Inside
// ncclGroupStart/End, send/recv are MPI_Isend/Irecv completed at the outermost ncclGroupEnd;
// collectives are blocking MPI calls (all ranks issue them in the same order). Results are
// computed at the call into a private buffer and delivered into the output only when the program
// synchronises with the stream past the call (emulated_streams.h), as a GPU would make them
// visible — so reading an output before waiting for it fails the tests. Inputs are read at the
// call. Reductions: f32, i32, i64. On a stream being recorded into a CUDA graph (emulated_streams.h)
// each call is recorded instead and runs at every replay of the graph, in the replay's order.
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "emulated_streams.h"

struct ncclComm {
  MPI_Comm comm = MPI_COMM_NULL;
};

namespace {

MPI_Datatype mpi_type(ncclDataType_t type) {
  switch (type) {
    case ncclFloat32:
      return MPI_FLOAT;
    case ncclInt32:
      return MPI_INT32_T;
    case ncclInt64:
      return MPI_INT64_T;
    case ncclUint8:
      return MPI_BYTE;
    default:
      return MPI_DATATYPE_NULL;  // bf16 / f16: not emulated
  }
}

std::size_t type_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclFloat32:
    case ncclInt32:
      return 4;
    case ncclInt64:
      return 8;
    case ncclUint8:
      return 1;
    default:
      return 0;
  }
}

MPI_Op mpi_op(ncclRedOp_t op) { return op == ncclMax ? MPI_MAX : MPI_SUM; }

// The calling thread's open group: its depth and the point-to-point requests to complete.
// A group recorded into a CUDA graph keeps its replay's requests in `recorded` instead (posted by
// its members' recorded work, completed by the recorded group end on `recorded_stream`).
struct GroupState {
  int depth = 0;
  std::vector<MPI_Request> requests;
  std::shared_ptr<std::vector<MPI_Request>> recorded;
  cudaStream_t recorded_stream = nullptr;
};
GroupState& group_state() {
  thread_local GroupState state;  // NCCL's group state is per thread as well
  return state;
}

ncclResult_t checked(int mpi_status) { return mpi_status == MPI_SUCCESS ? ncclSuccess : ncclSystemError; }

using Bytes = std::shared_ptr<std::vector<char>>;

Bytes private_buffer(std::size_t bytes, const void* initial = nullptr) {
  auto buffer = std::make_shared<std::vector<char>>(bytes);
  if (initial != nullptr && bytes > 0) std::memcpy(buffer->data(), initial, bytes);
  return buffer;
}

// The result in `result` reaches `output` when the program synchronises with `stream`.
void deliver_later(cudaStream_t stream, void* output, Bytes result) {
  const std::size_t bytes = result->size();
  myriad::emulated::defer_on_stream(
      stream,
      [output, result = std::move(result)] {
        if (!result->empty()) std::memcpy(output, result->data(), result->size());
      },
      output, bytes);
}

int comm_rank(ncclComm_t comm) {
  int rank = 0;
  MPI_Comm_rank(comm->comm, &rank);
  return rank;
}

int comm_size(ncclComm_t comm) {
  int size = 0;
  MPI_Comm_size(comm->comm, &size);
  return size;
}

}  // namespace

namespace {
// A launch reads its inputs after the stream's earlier work (a stream's order): earlier deferred
// results that land in [input, + bytes) are delivered first — except inside a group whose
// receives are still in flight (they arrive at ncclGroupEnd; a group's members are independent).
void follow_stream_order(cudaStream_t stream, const void* input, std::size_t bytes) {
  if (group_state().requests.empty()) myriad::emulated::deliver_writes_to(stream, input, bytes);
}
// Outermost groups that carried send / recv (myriad::emulated::point_to_point_groups_launched).
std::atomic<std::uint64_t>& point_to_point_groups() {
  static std::atomic<std::uint64_t> launched{0};  // the emulated library's state
  return launched;
}
// A collective's MPI status and the result to write into its output (none: nothing to write).
struct Outcome {
  int status = MPI_SUCCESS;
  Bytes result;
};

// Runs `run` now, its inputs read after the stream's earlier work and its result delivered when
// the program synchronises with the stream — or, on a stream being recorded into a CUDA graph,
// records it: each replay runs it and writes the result at once (a replay's work runs in order).
ncclResult_t collective(cudaStream_t stream, const void* input, std::size_t input_bytes, void* output,
                        std::function<Outcome()> run) {
  if (myriad::emulated::stream_is_recorded(stream)) {
    myriad::emulated::record_on_stream(stream, [output, run = std::move(run)] {
      const Outcome done = run();
      if (done.status != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);  // a replayed NCCL call has no caller to tell
      if (done.result && !done.result->empty()) std::memcpy(output, done.result->data(), done.result->size());
    });
    return ncclSuccess;
  }
  follow_stream_order(stream, input, input_bytes);
  const Outcome done = run();
  if (done.result) deliver_later(stream, output, done.result);
  return checked(done.status);
}

}  // namespace

namespace myriad::emulated {
std::uint64_t point_to_point_groups_launched() { return point_to_point_groups().load(); }
}  // namespace myriad::emulated

extern "C" {

const char* ncclGetErrorString(ncclResult_t) { return "emulated NCCL error"; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id->internal, &world_rank, sizeof(world_rank));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int creator = 0;
  std::memcpy(&creator, id.internal, sizeof(creator));
  auto* c = new ncclComm;
  if (MPI_Comm_split(MPI_COMM_WORLD, creator, rank, &c->comm) != MPI_SUCCESS) return ncclSystemError;
  int size = 0;
  MPI_Comm_size(c->comm, &size);
  if (size != nranks) return ncclInvalidUsage;
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  auto* c = new ncclComm;
  const ncclResult_t status = checked(MPI_Comm_split(comm->comm, color, key, &c->comm));
  *newcomm = c;
  return status;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm->comm != MPI_COMM_NULL) MPI_Comm_free(&comm->comm);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* error) {
  myriad::emulated::note_wait_poll();  // NcclWork::wait polls this between event queries
  *error = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_state().depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  GroupState& g = group_state();
  if (--g.depth > 0) return ncclSuccess;
  if (g.recorded) {  // the replay completes its members' requests here
    myriad::emulated::record_on_stream(g.recorded_stream, [requests = std::move(g.recorded)] {
      point_to_point_groups().fetch_add(1);
      if (MPI_Waitall(static_cast<int>(requests->size()), requests->data(), MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      requests->clear();
    });
    g.recorded.reset();
    g.recorded_stream = nullptr;
  }
  if (g.requests.empty()) return ncclSuccess;
  point_to_point_groups().fetch_add(1);
  const int status = MPI_Waitall(static_cast<int>(g.requests.size()), g.requests.data(), MPI_STATUSES_IGNORE);
  g.requests.clear();
  return checked(status);
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (mpi_type(type) == MPI_DATATYPE_NULL) return ncclInvalidArgument;
  return collective(stream, send, count * type_bytes(type), recv, [=] {
    Bytes result = private_buffer(count * type_bytes(type), send);
    return Outcome{
        MPI_Allreduce(MPI_IN_PLACE, result->data(), static_cast<int>(count), mpi_type(type), mpi_op(op), comm->comm),
        result};
  });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  if (mpi_type(type) == MPI_DATATYPE_NULL) return ncclInvalidArgument;
  const std::size_t input_bytes = count * type_bytes(type) * static_cast<std::size_t>(comm_size(comm));
  return collective(stream, send, input_bytes, recv, [=] {
    Bytes result = private_buffer(count * type_bytes(type));
    return Outcome{
        MPI_Reduce_scatter_block(send, result->data(), static_cast<int>(count), mpi_type(type), mpi_op(op), comm->comm),
        result};
  });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  const std::size_t ranks = static_cast<std::size_t>(comm_size(comm));
  return collective(stream, send, count * type_bytes(type), recv, [=] {
    // In place (NCCL's rule) send is this rank's chunk of recv: read first, like any input.
    Bytes chunk = private_buffer(count * type_bytes(type), send);
    Bytes result = private_buffer(count * type_bytes(type) * ranks);
    return Outcome{MPI_Allgather(chunk->data(), static_cast<int>(count), mpi_type(type), result->data(),
                                 static_cast<int>(count), mpi_type(type), comm->comm),
                   result};
  });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  const bool is_root = comm_rank(comm) == root;
  return collective(stream, send, send != nullptr ? count * type_bytes(type) : 0, recv, [=] {
    Bytes result = private_buffer(count * type_bytes(type), is_root ? send : nullptr);
    return Outcome{MPI_Bcast(result->data(), static_cast<int>(count), mpi_type(type), root, comm->comm), result};
  });
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  if (mpi_type(type) == MPI_DATATYPE_NULL) return ncclInvalidArgument;
  const bool is_root = comm_rank(comm) == root;
  return collective(stream, send, count * type_bytes(type), recv, [=] {
    Bytes result = private_buffer(count * type_bytes(type), send);
    const int status = MPI_Reduce(is_root ? MPI_IN_PLACE : result->data(), is_root ? result->data() : nullptr,
                                  static_cast<int>(count), mpi_type(type), mpi_op(op), root, comm->comm);
    return Outcome{status, is_root ? result : Bytes()};  // the root's recv only
  });
}

namespace {

// A send or receive joins the open group, or completes at once outside one.
ncclResult_t point_to_point(int status, const MPI_Request& request) {  // read after the call (a reference)
  if (status != MPI_SUCCESS) return ncclSystemError;
  GroupState& g = group_state();
  if (g.depth > 0) {
    g.requests.push_back(request);
    return ncclSuccess;
  }
  MPI_Request pending = request;
  return checked(MPI_Wait(&pending, MPI_STATUS_IGNORE));
}

}  // namespace

namespace {

// A send or receive on a stream being recorded into a CUDA graph: `post` starts it at each replay,
// inside the recorded group (completed at its end) or on its own (completed at once).
ncclResult_t record_point_to_point(cudaStream_t stream, std::function<int(MPI_Request*)> post) {
  GroupState& g = group_state();
  if (g.depth == 0) {
    myriad::emulated::record_on_stream(stream, [post = std::move(post)] {
      MPI_Request request;
      if (post(&request) != MPI_SUCCESS || MPI_Wait(&request, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    });
    return ncclSuccess;
  }
  if (!g.recorded) {
    g.recorded = std::make_shared<std::vector<MPI_Request>>();
    g.recorded_stream = stream;
  }
  myriad::emulated::record_on_stream(stream, [post = std::move(post), requests = g.recorded] {
    MPI_Request request;
    if (post(&request) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
    requests->push_back(request);
  });
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  if (myriad::emulated::stream_is_recorded(stream)) {
    return record_point_to_point(stream, [=](MPI_Request* request) {
      return MPI_Isend(send, static_cast<int>(count), mpi_type(type), peer, 0, comm->comm, request);
    });
  }
  follow_stream_order(stream, send, count * type_bytes(type));
  MPI_Request request;
  return point_to_point(MPI_Isend(send, static_cast<int>(count), mpi_type(type), peer, 0, comm->comm, &request),
                        request);
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  if (myriad::emulated::stream_is_recorded(stream)) {  // a replay's receive lands in place (its work runs in order)
    return record_point_to_point(stream, [=](MPI_Request* request) {
      return MPI_Irecv(recv, static_cast<int>(count), mpi_type(type), peer, 0, comm->comm, request);
    });
  }
  // Received into a private buffer (complete by the time the stream is synchronised with: the
  // group ends inside the launch), delivered like a collective's result.
  Bytes result = private_buffer(count * type_bytes(type));
  MPI_Request request;
  const ncclResult_t status = point_to_point(
      MPI_Irecv(result->data(), static_cast<int>(count), mpi_type(type), peer, 0, comm->comm, &request), request);
  deliver_later(stream, recv, result);
  return status;
}

}  // extern "C"
