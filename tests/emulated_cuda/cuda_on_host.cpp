// The CUDA layer of the CUDA ops backend emulated on the host, so the backend's own code — the
// launches it makes for each op, the pointers, shapes and strides it passes, which calls
// overwrite or accumulate — and everything above it (the one model placed on the backend, the
// Engine's training.device cuda) is checked in every CI run on machines without a GPU, against
// the CPU backend. Linked only into the emulated test binaries (label cpu), never into the library.
//
// What is replaced: the CUDA runtime calls (copies and memsets become memcpy / memset on host
// memory; devices are tracked per thread and every launch is checked against its stream's device;
// work registered by the emulated NCCL is delivered only when the program synchronises with its
// stream: emulated_streams.h), DeviceBuffer (aligned host memory, filled with 0xFF bytes like the
// GPU tests' buffers so unwritten data shows up as NaN), DeviceContext, and every kernel launcher
// and gemm() — each by the CPU reference op that defines the launcher's documented contract
// (ops/*.h), or a plain loop for the layout kernels — and the one cuBLAS call the backend makes
// itself, cublasGemmGroupedBatchedEx, by a loop over its column-major problems on host memory.
// What is not checked here: the kernels themselves (tests/gpu does that on a device).
#include <cuda_runtime_api.h>
#include <cublasLt.h>
#include <cublas_api.h>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <climits>
#include <cstdint>
#include <algorithm>
#include <atomic>
#include <deque>
#include <execinfo.h>
#include <unistd.h>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>
#include "emulated_streams.h"
#include "myriad/ops/fp8.h"
#include "myriad/ops/int8_linear.h"
#include "myriad/core/tensor.h"
#include "myriad/cuda/cudnn_attention.h"
#include "myriad/cuda/device_buffer.h"
#include "myriad/cuda/device_context.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/device_allocator.h"
#include "myriad/cuda/gemm.h"
#include "myriad/cuda/kernels.h"
#include "myriad/ops/norms.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/bias_add.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/adamw.h"
#include "myriad/ops/compression.h"
#include "myriad/ops/exact_sum.h"
#include "myriad/ops/onebit_adam_update.h"
#include "myriad/ops/matmul.h"
#include "myriad/ops/softmax.h"
#include "myriad/ops/token_routing.h"
#include "myriad/ops/moe_routing.h"
#include "myriad/ops/vocab_shard_loss.h"

namespace myriad::emulated {
namespace {

// Per stream: deliveries registered so far (`issued`), those run (`delivered`), the rest in order.
struct StreamQueue {
  std::uint64_t issued = 0, delivered = 0;
  std::deque<std::function<void()>> pending;
  std::deque<std::pair<const char*, std::size_t>> targets;  // per pending delivery: the bytes it writes
};
struct Streams {
  std::mutex mutex;
  std::map<cudaStream_t, StreamQueue> queues;
  std::uint64_t wait_polls = 0;    // emulated ncclCommGetAsyncError calls: a wait loop's polls
  std::uint64_t stream_waits = 0;  // cudaStreamSynchronize calls
  std::uint64_t host_waits = 0;    // every way the host waits for device work (host_synchronizations)
  std::uint64_t cudnn_calls = 0;   // emulated cuDNN attention launches (cudnn_attention_calls)
};
Streams& streams() {
  static Streams all;  // the emulated driver's state
  return all;
}

// An event: the stream it was recorded on and that stream's deliveries issued at the time.
// `polled_at`: wait_polls at this event's last "not ready" answer. A query with work outstanding
// answers "not ready" — as a GPU still running it would — unless a wait loop has polled since
// the last such answer (NcclWork::wait checks the communicator's asynchronous error between
// queries; a one-off completion check does not), which then delivers.
// An event recorded on a stream being recorded into a graph is `captured`: it orders the graph's
// work (a fork or a join, see Recording below) and `position` counts the work its stream had
// appended; a GPU refuses to query, synchronise with or time it (cudaErrorCapturedEvent).
struct EmulatedEvent {
  cudaStream_t stream = nullptr;
  std::uint64_t position = 0;
  std::uint64_t polled_at = UINT64_MAX;
  bool captured = false;
};

// Runs `stream`'s deliveries up to `position` (outside the lock: a delivery only copies memory).
void deliver_up_to(cudaStream_t stream, std::uint64_t position) {
  while (true) {
    std::function<void()> next;
    {
      std::lock_guard<std::mutex> lock(streams().mutex);
      StreamQueue& q = streams().queues[stream];
      if (q.delivered >= position || q.pending.empty()) return;
      next = std::move(q.pending.front());
      q.pending.pop_front();
      q.targets.pop_front();
      ++q.delivered;
    }
    next();
  }
}

void deliver_all() {
  std::vector<cudaStream_t> all;
  {
    std::lock_guard<std::mutex> lock(streams().mutex);
    for (const auto& [stream, queue] : streams().queues) all.push_back(stream);
  }
  for (cudaStream_t s : all) deliver_up_to(s, UINT64_MAX);
}

// With MYRIAD_EMULATED_SYNC_TRACE set: "[tag] call suffix" and the call stack that led here, on stderr.
void trace_call(const char* tag, const char* call, const char* suffix = "") {
  static const bool trace = std::getenv("MYRIAD_EMULATED_SYNC_TRACE") != nullptr;
  if (!trace) return;
  void* frames[32];
  const int depth = backtrace(frames, 32);
  std::fprintf(stderr, "[%s] %s%s\n", tag, call, suffix);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
}

}  // namespace

// Counts one device→host synchronisation (emulated_streams.h); `what` names the call in a trace.
void note_host_wait(const char* what) {
  {
    std::lock_guard<std::mutex> lock(streams().mutex);
    ++streams().host_waits;
  }
  trace_call("emulated sync", what);
}

// A call refused while recording: with MYRIAD_EMULATED_SYNC_TRACE set, where it was made.
void note_capture_refusal(const char* call) { trace_call("emulated capture", call, " refused while recording"); }

// A wait loop polls only after its event answered "not ready": one poll is one host wait.
void note_wait_poll() {
  {
    std::lock_guard<std::mutex> lock(streams().mutex);
    ++streams().wait_polls;
  }
  note_host_wait("a wait loop over an event (NcclWork::wait)");
}

// A query of `event`: true (delivered) when nothing is outstanding or a wait loop polled since
// its last "not ready".
bool query_ready(EmulatedEvent& event) {
  {
    std::lock_guard<std::mutex> lock(streams().mutex);
    const StreamQueue& q = streams().queues[event.stream];
    const bool busy = q.delivered < event.position && !q.pending.empty();
    const bool waited = event.polled_at != UINT64_MAX && streams().wait_polls > event.polled_at;
    if (busy && !waited) {
      event.polled_at = streams().wait_polls;
      return false;
    }
  }
  deliver_up_to(event.stream, event.position);
  return true;
}

bool records(cudaStream_t stream);  // below: whether the calling thread records `stream` (or it joined)

void defer_on_stream(cudaStream_t stream, std::function<void()> deliver, const void* output, std::size_t bytes) {
  MYRIAD_CHECK(!records(stream),
               "emulated NCCL: a collective on a stream being recorded into a CUDA graph (the "
               "emulation runs MPI at the call, so it cannot be replayed)");
  std::lock_guard<std::mutex> lock(streams().mutex);
  StreamQueue& q = streams().queues[stream];
  q.pending.push_back(std::move(deliver));
  q.targets.emplace_back(static_cast<const char*>(output), bytes);
  ++q.issued;
}

void deliver_writes_to(cudaStream_t stream, const void* input, std::size_t bytes) {
  const auto* begin = static_cast<const char*>(input);
  std::uint64_t position = 0;
  {
    std::lock_guard<std::mutex> lock(streams().mutex);
    const StreamQueue& q = streams().queues[stream];
    for (std::size_t i = 0; i < q.targets.size(); ++i) {
      const auto [at, size] = q.targets[i];
      if (at < begin + bytes && begin < at + size) position = q.delivered + i + 1;
    }
  }
  if (position > 0) deliver_up_to(stream, position);
}

// The current device (per thread, as the CUDA runtime keeps it) and the device each stream was
// made on. A kernel launch on a stream of another device than the current one fails on a GPU;
// here every emulated launcher checks it, so a missing DeviceGuard / cudaSetDevice fails the
// emulated tests of any rank whose GPU is not device 0.
thread_local int current_device = 0;
std::atomic<int> compute_capability{90};  // what cudaDeviceGetAttribute reports (set_compute_capability)
struct StreamDevices {
  std::mutex mutex;
  std::map<cudaStream_t, int> device_of;
};
StreamDevices& stream_devices() {
  static StreamDevices all;  // the emulated driver's state
  return all;
}
void register_stream(cudaStream_t stream, int device) {
  std::lock_guard<std::mutex> lock(stream_devices().mutex);
  stream_devices().device_of[stream] = device;
}
void forget_stream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(stream_devices().mutex);
  stream_devices().device_of.erase(stream);
}
void check_launch_device(cudaStream_t stream) {
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(stream_devices().mutex);
    const auto found = stream_devices().device_of.find(stream);
    if (found != stream_devices().device_of.end()) device = found->second;
  }
  MYRIAD_CHECK(device < 0 || device == current_device,
               "emulated CUDA: a kernel launched on a stream of cuda:" << device << " while cuda:" << current_device
                                                                       << " is the current device (a missing "
                                                                          "DeviceGuard or cudaSetDevice)");
}

// Stream capture (CUDA graphs), per thread as cudaStreamCaptureModeThreadLocal keeps it: while
// a thread records a stream, work launched on that stream is appended to the graph instead of run
// (kernels, cuBLAS calls, async copies and memsets, NCCL calls, each as a closure over the
// arguments it was launched with — a graph's baked-in kernel parameters), and a call capture
// forbids (a host wait, a blocking copy, an event query) fails and invalidates the recording, as on
// a GPU. A launch replays the closures in order. Another stream joins the recording, as on a GPU,
// when it waits for an event recorded on a recorded stream (a fork: NcclCommunicator's stream
// waiting for the compute stream); its work is then appended too, in issue order (one valid order
// of the graph's nodes), and it must join back — the origin stream waits for an event recorded
// on it after its last work — before the recording ends (else cudaErrorStreamCaptureUnjoined, as
// on a GPU). Work on streams that did not join runs at once, as it would on a GPU.
struct EmulatedGraph {
  std::vector<std::function<void()>> work;
};
struct JoinedStream {
  std::uint64_t launches = 0;  // work appended from this stream
  std::uint64_t rejoined = 0;  // of which the origin stream has waited for the first `rejoined`
};
struct Recording {
  cudaStream_t stream = nullptr;  // the origin: cudaStreamBeginCapture's stream
  std::map<cudaStream_t, JoinedStream> joined;
  std::unique_ptr<EmulatedGraph> graph;
  const char* invalidated_by = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
};
thread_local Recording recording;
thread_local cudaStreamCaptureMode thread_capture_mode = cudaStreamCaptureModeGlobal;
std::atomic<std::uint64_t> graphs_launched{0}, graph_work_replayed{0}, capture_refusals{0};

bool records(cudaStream_t stream) {
  return recording.graph != nullptr && (recording.stream == stream || recording.joined.count(stream) > 0);
}
// Appends `work` to the recording when `stream` is recorded (and returns true).
bool append_if_recorded(cudaStream_t stream, std::function<void()>& work) {
  if (!records(stream)) return false;
  if (stream != recording.stream) ++recording.joined[stream].launches;
  recording.graph->work.push_back(std::move(work));
  return true;
}
void launch(cudaStream_t stream, std::function<void()> work) {
  check_launch_device(stream);
  if (!append_if_recorded(stream, work)) work();
}
// True (and the recording invalidated) when the calling thread records a stream and `call` is
// one capture forbids.
bool capture_forbids(const char* call) {
  if (!recording.graph || thread_capture_mode == cudaStreamCaptureModeRelaxed) return false;
  if (recording.invalidated_by == nullptr) recording.invalidated_by = call;
  ++capture_refusals;
  note_capture_refusal(call);
  return true;
}
bool recording_now() { return recording.graph != nullptr; }
bool stream_is_recorded(cudaStream_t stream) { return records(stream); }
void record_on_stream(cudaStream_t stream, std::function<void()> work) {
  MYRIAD_CHECK(append_if_recorded(stream, work), "emulated CUDA: record_on_stream on a stream not being recorded");
}
std::uint64_t cuda_graphs_launched() { return graphs_launched; }
std::uint64_t cuda_graph_work_replayed() { return graph_work_replayed; }
std::uint64_t calls_refused_while_capturing() { return capture_refusals; }

// A cuBLAS handle: the stream its work goes to (the context's), so launches can be checked.
struct EmulatedCublas {
  cudaStream_t stream = nullptr;
};

std::uint64_t stream_synchronizations() {
  std::lock_guard<std::mutex> lock(streams().mutex);
  return streams().stream_waits;
}

std::uint64_t host_synchronizations() {
  std::lock_guard<std::mutex> lock(streams().mutex);
  return streams().host_waits;
}

void set_compute_capability(int capability) { compute_capability = capability; }

std::uint64_t cudnn_attention_calls() {
  std::lock_guard<std::mutex> lock(streams().mutex);
  return streams().cudnn_calls;
}

static void count_cudnn_call() {
  std::lock_guard<std::mutex> lock(streams().mutex);
  ++streams().cudnn_calls;
}

}  // namespace myriad::emulated

using myriad::emulated::EmulatedEvent;

extern "C" {
// Copies may be issued to a stream of another device than the current one (the CUDA programming
// guide allows it, unlike kernel launches): not checked.
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t stream) {
  std::function<void()> work = [=] { std::memcpy(d, s, n); };
  if (!myriad::emulated::append_if_recorded(stream, work)) work();
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t stream) {
  std::function<void()> work = [=] { std::memset(d, v, n); };
  if (!myriad::emulated::append_if_recorded(stream, work)) work();
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  using myriad::emulated::recording;
  if (recording.graph) return cudaErrorIllegalState;  // one recording per thread here
  recording.stream = stream;
  recording.joined.clear();
  recording.graph = std::make_unique<myriad::emulated::EmulatedGraph>();
  recording.invalidated_by = nullptr;
  recording.mode = mode;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  using myriad::emulated::recording;
  *graph = nullptr;
  if (!recording.graph || recording.stream != stream) return cudaErrorIllegalState;
  std::unique_ptr<myriad::emulated::EmulatedGraph> taken = std::move(recording.graph);
  recording.stream = nullptr;
  bool unjoined = false;
  for (const auto& [joined_stream, joined] : recording.joined) unjoined |= joined.rejoined != joined.launches;
  recording.joined.clear();
  if (recording.invalidated_by != nullptr) return cudaErrorStreamCaptureInvalidated;
  if (unjoined) return cudaErrorStreamCaptureUnjoined;  // a forked stream's work the origin never waited for
  *graph = reinterpret_cast<cudaGraph_t>(taken.release());
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  using myriad::emulated::recording;
  *status = !myriad::emulated::records(stream)    ? cudaStreamCaptureStatusNone
            : recording.invalidated_by != nullptr ? cudaStreamCaptureStatusInvalidated
                                                  : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  std::swap(*mode, myriad::emulated::thread_capture_mode);
  return cudaSuccess;
}
// An instantiated graph is the recorded graph itself (a shared closure list).
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  *exec = reinterpret_cast<cudaGraphExec_t>(graph);
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (nodes != nullptr) return cudaErrorNotSupported;
  *count = reinterpret_cast<myriad::emulated::EmulatedGraph*>(graph)->work.size();
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (myriad::emulated::capture_forbids("cudaGraphLaunch while recording")) return cudaErrorStreamCaptureUnsupported;
  myriad::emulated::check_launch_device(stream);
  const auto& graph = *reinterpret_cast<const myriad::emulated::EmulatedGraph*>(exec);
  for (const std::function<void()>& work : graph.work) work();
  ++myriad::emulated::graphs_launched;
  myriad::emulated::graph_work_replayed += graph.work.size();
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return cudaSuccess; }  // the graph owns the closures
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<myriad::emulated::EmulatedGraph*>(graph);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (myriad::emulated::capture_forbids("cudaStreamSynchronize")) return cudaErrorStreamCaptureUnsupported;
  {
    std::lock_guard<std::mutex> lock(myriad::emulated::streams().mutex);
    ++myriad::emulated::streams().stream_waits;
  }
  myriad::emulated::note_host_wait("cudaStreamSynchronize");
  myriad::emulated::deliver_up_to(s, UINT64_MAX);
  return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t) { return "emu"; }
const char* cudaGetErrorString(cudaError_t) { return "emu"; }
cudaError_t cudaGetDevice(int* d) {
  *d = myriad::emulated::current_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= 8) return cudaErrorInvalidDevice;
  myriad::emulated::current_device = d;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (device < 0 || device >= 8) return cudaErrorInvalidDevice;
  if (attribute == cudaDevAttrComputeCapabilityMajor)
    *value = myriad::emulated::compute_capability / 10;
  else if (attribute == cudaDevAttrComputeCapabilityMinor)
    *value = myriad::emulated::compute_capability % 10;
  else
    return cudaErrorInvalidValue;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* c) {
  *c = 8;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  myriad::emulated::forget_stream(s);
  delete reinterpret_cast<int*>(s);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  if (myriad::emulated::capture_forbids("cudaDeviceSynchronize")) return cudaErrorStreamCaptureUnsupported;
  myriad::emulated::note_host_wait("cudaDeviceSynchronize");
  myriad::emulated::deliver_all();
  return cudaSuccess;
}
// Page-locked host memory is plain host memory here.
cudaError_t cudaMallocHost(void** p, size_t n) {
  if (myriad::emulated::capture_forbids("cudaMallocHost")) return cudaErrorStreamCaptureUnsupported;
  *p = std::malloc(n);
  return *p != nullptr || n == 0 ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind kind) {
  if (myriad::emulated::capture_forbids("cudaMemcpy")) return cudaErrorStreamCaptureUnsupported;
  if (kind == cudaMemcpyDeviceToHost) myriad::emulated::note_host_wait("cudaMemcpy device to host");
  std::memcpy(d, s, n);
  return cudaSuccess;
}
// Streams and events: launches run at once; an event marks its stream's deferred deliveries up to
// its recording, which a query, synchronisation or stream wait on it delivers (emulated_streams.h).
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = reinterpret_cast<cudaStream_t>(new int);
  myriad::emulated::register_stream(*s, myriad::emulated::current_device);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = reinterpret_cast<cudaEvent_t>(new EmulatedEvent);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<EmulatedEvent*>(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  auto* event = reinterpret_cast<EmulatedEvent*>(e);
  using myriad::emulated::recording;
  if (myriad::emulated::records(s)) {
    event->stream = s;
    event->position = s == recording.stream ? 0 : recording.joined[s].launches;
    event->captured = true;
    return cudaSuccess;
  }
  std::lock_guard<std::mutex> lock(myriad::emulated::streams().mutex);
  event->stream = s;
  event->position = myriad::emulated::streams().queues[s].issued;
  event->polled_at = UINT64_MAX;
  event->captured = false;
  return cudaSuccess;
}
static cudaError_t deliver_event(cudaEvent_t e) {
  const auto* event = reinterpret_cast<const EmulatedEvent*>(e);
  myriad::emulated::deliver_up_to(event->stream, event->position);
  return cudaSuccess;
}
static bool captured(cudaEvent_t e) { return reinterpret_cast<const EmulatedEvent*>(e)->captured; }
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (myriad::emulated::capture_forbids("cudaEventQuery")) return cudaErrorStreamCaptureUnsupported;
  if (captured(e)) return cudaErrorCapturedEvent;
  return myriad::emulated::query_ready(*reinterpret_cast<EmulatedEvent*>(e)) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (myriad::emulated::capture_forbids("cudaEventSynchronize")) return cudaErrorStreamCaptureUnsupported;
  if (captured(e)) return cudaErrorCapturedEvent;
  myriad::emulated::note_host_wait("cudaEventSynchronize");
  return deliver_event(e);
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = 0.0f;
  return captured(start) || captured(end) ? cudaErrorCapturedEvent : cudaSuccess;
}
// A wait for a captured event forks the waiting stream into the recording (or, by the origin
// stream, joins the event's stream back up to the event); outside a recording it is refused.
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  using myriad::emulated::recording;
  if (!captured(e)) return deliver_event(e);
  const auto* event = reinterpret_cast<const EmulatedEvent*>(e);
  if (!myriad::emulated::records(event->stream)) return cudaErrorCapturedEvent;  // its recording ended
  if (!myriad::emulated::records(s)) {
    recording.joined[s] = {};
  } else if (s == recording.stream && event->stream != recording.stream) {
    std::uint64_t& rejoined = recording.joined[event->stream].rejoined;
    rejoined = std::max(rejoined, event->position);
  }
  return cudaSuccess;
}
// cuBLAS's grouped GEMM (column-major, cuBLAS's contract) as a loop, f32 only: for problem p of
// group i, C_p = alpha_i op(A_p) op(B_p) + beta_i C_p (C not read when beta is 0); the pointer
// arrays are "device" (here host) memory, the rest host arrays; pointer mode host.
cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t handle, const cublasOperation_t transa_array[],
                                          const cublasOperation_t transb_array[], const int m_array[],
                                          const int n_array[], const int k_array[], const void* alpha_array,
                                          const void* const Aarray[], cudaDataType_t Atype, const int lda_array[],
                                          const void* const Barray[], cudaDataType_t Btype, const int ldb_array[],
                                          const void* beta_array, void* const Carray[], cudaDataType_t Ctype,
                                          const int ldc_array[], int group_count, const int group_size[],
                                          cublasComputeType_t computeType) {
  if (Atype != CUDA_R_32F || Btype != CUDA_R_32F || Ctype != CUDA_R_32F || computeType != CUBLAS_COMPUTE_32F) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  for (int i = 0; i < group_count; ++i) {
    const bool ta = transa_array[i] != CUBLAS_OP_N, tb = transb_array[i] != CUBLAS_OP_N;
    if (m_array[i] < 0 || n_array[i] < 0 || k_array[i] < 0 || lda_array[i] < (ta ? k_array[i] : m_array[i]) ||
        ldb_array[i] < (tb ? n_array[i] : k_array[i]) || ldc_array[i] < m_array[i])
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  // The host arrays are read when the call is made (a graph keeps them as parameters), the pointer
  // arrays and matrices when the work runs.
  const auto* alpha_values = static_cast<const float*>(alpha_array);
  const auto* beta_values = static_cast<const float*>(beta_array);
  std::vector<int> groups(group_size, group_size + group_count);
  std::vector<float> alphas(alpha_values, alpha_values + group_count), betas(beta_values, beta_values + group_count);
  std::vector<int> ms(m_array, m_array + group_count), ns(n_array, n_array + group_count),
      ks(k_array, k_array + group_count), ldas(lda_array, lda_array + group_count),
      ldbs(ldb_array, ldb_array + group_count), ldcs(ldc_array, ldc_array + group_count);
  std::vector<cublasOperation_t> tas(transa_array, transa_array + group_count),
      tbs(transb_array, transb_array + group_count);
  myriad::emulated::launch(reinterpret_cast<myriad::emulated::EmulatedCublas*>(handle)->stream, [=] {
    int problem = 0;
    for (int i = 0; i < group_count; ++i) {
      const bool ta = tas[i] != CUBLAS_OP_N, tb = tbs[i] != CUBLAS_OP_N;
      const std::int64_t m = ms[i], n = ns[i], k = ks[i], lda = ldas[i], ldb = ldbs[i], ldc = ldcs[i];
      for (int q = 0; q < groups[i]; ++q, ++problem) {
        const auto* a = static_cast<const float*>(Aarray[problem]);
        const auto* b = static_cast<const float*>(Barray[problem]);
        auto* c = static_cast<float*>(Carray[problem]);
        for (std::int64_t col = 0; col < n; ++col)
          for (std::int64_t row = 0; row < m; ++row) {
            float sum = 0.0f;
            for (std::int64_t p = 0; p < k; ++p) {
              sum += (ta ? a[p + row * lda] : a[row + p * lda]) * (tb ? b[col + p * ldb] : b[p + col * ldb]);
            }
            float& out = c[row + col * ldc];
            out = betas[i] == 0.0f ? alphas[i] * sum : alphas[i] * sum + betas[i] * out;
          }
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}
}

namespace myriad::cuda {
int cuda_device_count_or_zero() noexcept { return 8; }  // enough for one emulated GPU per test rank
DeviceBuffer::DeviceBuffer(std::size_t bytes, int device) : bytes_(bytes), device_(device) {
  if (bytes) {
    data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    std::memset(data_, 0xff, bytes);
  }
}
DeviceBuffer::~DeviceBuffer() { release(); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), device_(o.device_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}
void DeviceBuffer::release() noexcept {
  std::free(data_);
  data_ = nullptr;
  bytes_ = 0;
}
DeviceGuard::DeviceGuard(int device) : previous_(emulated::current_device) { emulated::current_device = device; }
DeviceGuard::~DeviceGuard() { emulated::current_device = previous_; }
void select_device(int device) {
  MYRIAD_CHECK(device >= 0 && device < 8, "emulated select_device: no device " << device);
  emulated::current_device = device;
}
void* DeviceRawAllocator::allocate(std::size_t b) { return std::aligned_alloc(64, (b + 63) / 64 * 64); }
void DeviceRawAllocator::release(void* p, std::size_t) { std::free(p); }
void DeviceContext::StreamDeleter::operator()(std::remove_pointer_t<cudaStream_t>* stream) const noexcept {
  emulated::forget_stream(stream);
  delete reinterpret_cast<int*>(stream);
}
void DeviceContext::CublasLtDeleter::operator()(std::remove_pointer_t<cublasLtHandle_t>*) const noexcept {}
void DeviceContext::CublasDeleter::operator()(std::remove_pointer_t<cublasHandle_t>* handle) const noexcept {
  delete reinterpret_cast<emulated::EmulatedCublas*>(handle);
}
DeviceContext::DeviceContext(int device, std::size_t) : device_(device), raw_allocator_(device) {
  // A stream of its own on `device`, so that launches can be checked against the current device.
  stream_.reset(reinterpret_cast<std::remove_pointer_t<cudaStream_t>*>(new int));
  emulated::register_stream(stream_.get(), device);
  cublas_.reset(reinterpret_cast<cublasHandle_t>(new emulated::EmulatedCublas{stream_.get()}));
  allocator_ = std::make_unique<CachingAllocator>(raw_allocator_);
}
DeviceContext::~DeviceContext() = default;
void DeviceContext::GemmPlansDeleter::operator()(GemmPlans*) const noexcept {}  // gemm() is emulated: no plans
void DeviceContext::synchronize() const {}

// Host memory as a tensor; a null pointer (a launcher's optional argument: "skip it") is an
// undefined tensor, which the CPU ops read the same way.
static Tensor W(const void* p, const Shape& s, DType t = DType::f32) {
  if (p == nullptr && shape_numel(s) > 0) return Tensor();
  std::size_t bytes = shape_numel(s) * dtype_size(t);
  return Tensor::from_storage(Storage::wrap(const_cast<void*>(p), bytes, Device::cpu(), [](void*) {}), s,
                              contiguous_strides(s), 0, t);
}

// An operand as f32: itself, or its bf16 / f16 / FP8 values widened (exactly) into a new tensor.
static Tensor operand(const void* p, const Shape& s, cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F:
      return W(p, s);
    case CUDA_R_16BF:
      return W(p, s, DType::bf16).to(DType::f32);
    case CUDA_R_16F:
      return W(p, s, DType::f16).to(DType::f32);
    case CUDA_R_8F_E4M3:
      return W(p, s, DType::f8e4m3).to(DType::f32);
    case CUDA_R_8F_E5M2:
      return W(p, s, DType::f8e5m2).to(DType::f32);
    default:
      MYRIAD_THROW("emulated gemm: f32, bf16, f16 or FP8 inputs only");
  }
}

// cuBLASLt has an algorithm for every shape the emulation is asked for.
bool gemm_available(const DeviceContext&, const Gemm&, const void*, const void*, const void*) { return true; }

void gemm(const DeviceContext& context, const Gemm& g, const void* a, const void* b, const void* bias, void* c,
          void* aux) {
  DeviceGuard guard(context.device());  // as the real gemm(): it runs on its context's device
  emulated::launch(context.stream(), [=]() mutable {
    MYRIAD_CHECK(!g.accumulate || g.epilogue == GemmEpilogue::none, "emu gemm");
    // f32 outputs, or a 16-bit one of the operands' type (no epilogue, not accumulated): the f32
    // sums rounded once into it, as cuBLASLt's output conversion does.
    const cudaDataType_t output = g.output_type.value_or(g.type);
    const bool narrow_output = output == CUDA_R_16BF || output == CUDA_R_16F;
    const bool narrow_dgelu = narrow_output && output == g.type && g.epilogue == GemmEpilogue::dgelu;
    MYRIAD_CHECK(
        output == CUDA_R_32F || narrow_dgelu || (narrow_output && output == g.type && g.epilogue == GemmEpilogue::none),
        "emulated gemm: f32 outputs, or 16-bit ones of the operands' type without an epilogue or "
        "with DGELU");
    Tensor A = operand(a, g.transpose_a ? Shape{g.k, g.m} : Shape{g.m, g.k}, g.type);
    Tensor B = operand(b, g.transpose_b ? Shape{g.n, g.k} : Shape{g.k, g.n}, g.b_type.value_or(g.type));
    Tensor narrow_c = narrow_output ? W(c, {g.m, g.n}, output == CUDA_R_16BF ? DType::bf16 : DType::f16) : Tensor();
    Tensor Cm = narrow_output ? Tensor::empty({g.m, g.n}) : W(c, {g.m, g.n});
    // FP8 operand scales: read when the launch runs, as cuBLASLt reads its scale pointers.
    const float alpha =
        g.alpha * (g.a_scale != nullptr ? *g.a_scale : 1.0f) * (g.b_scale != nullptr ? *g.b_scale : 1.0f);
    matmul_forward(
        MatmulArgs{
            .transpose_a = g.transpose_a, .transpose_b = g.transpose_b, .alpha = alpha, .accumulate = g.accumulate},
        A, B, Cm);
    if (narrow_dgelu) {  // C = AB * gelu'(aux), aux and C of the 16-bit type: rounded once
      return gelu_backward(GeluArgs{}, W(aux, {g.m, g.n}, narrow_c.dtype()), Cm, narrow_c);
    }
    if (narrow_output) return narrow_c.copy_from(Cm);
    const Tensor bias_vector = W(bias, {g.n});
    switch (g.epilogue) {
      case GemmEpilogue::none:
        return;
      case GemmEpilogue::bias:
      case GemmEpilogue::bias_gelu:
        bias_add_forward(BiasAddArgs{}, Cm, bias_vector, Cm);
        if (g.epilogue == GemmEpilogue::bias_gelu) gelu_forward(GeluArgs{}, Cm, Cm);
        return;
      case GemmEpilogue::gelu_aux:
      case GemmEpilogue::bias_gelu_aux: {  // aux = AB (+ bias), C = gelu(aux)
        Tensor pre = W(aux, {g.m, g.n});
        if (g.epilogue == GemmEpilogue::bias_gelu_aux) bias_add_forward(BiasAddArgs{}, Cm, bias_vector, Cm);
        copy(Cm, pre);
        gelu_forward(GeluArgs{}, pre, Cm);
        return;
      }
      case GemmEpilogue::dgelu:
      case GemmEpilogue::dgelu_bgrad: {  // C = AB * gelu'(aux); bias <- column sums of C (written)
        gelu_backward(GeluArgs{}, W(aux, {g.m, g.n}), Cm, Cm);
        if (g.epilogue == GemmEpilogue::dgelu_bgrad) {
          Tensor sums = W(bias, {g.n}), no_grad_x;
          zero(sums);
          bias_add_backward(BiasAddArgs{}, Cm, no_grad_x, sums);
        }
        return;
      }
    }
  });
}
void linear_gemm(const DeviceContext& context, const LinearGemm& l, const void* x, const void* weight, const void* bias,
                 void* y) {  // as the real one: y = x W^T through gemm()
  gemm(context,
       Gemm{.m = l.m,
            .n = l.n,
            .k = l.k,
            .transpose_b = true,
            .type = l.type,
            .output_type = CUDA_R_32F,
            .epilogue = l.epilogue,
            .accumulate = l.accumulate},
       x, weight, bias, y);
}

void fp8_quantize_f32(const float* x, std::uint8_t* out, std::uint8_t* out_t, float* amax, std::int64_t rows,
                      std::int64_t cols, const float* scale, bool e5m2, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {  // the scale read when the launch runs, as the kernel does
    const DType format = e5m2 ? DType::f8e5m2 : DType::f8e4m3;
    Tensor o = W(out, {rows, cols}, format), ot = W(out_t, {cols, rows}, format), a = W(amax, {1});
    cpu::fp8_quantize(W(x, {rows, cols}), W(scale, {1}), o, ot, a);
  });
}

void int8_linear_forward_f32(const float* x, const std::int8_t* q, const float* scales, const float* bias, float* y,
                             std::int64_t rows, std::int64_t n, std::int64_t k, std::int64_t group_size,
                             cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor out = W(y, {rows, n});
    cpu::int8_linear_forward(Int8Args{.group_size = group_size}, W(x, {rows, k}), W(q, {n, k}, DType::i8),
                             W(scales, {n, int8_groups(k, group_size)}), bias != nullptr ? W(bias, {n}) : Tensor(),
                             out);
  });
}
void int8_embedding_forward_f32(const std::int32_t* ids, const std::int8_t* q, const float* scales, float* out,
                                std::int64_t n, std::int64_t c, std::int64_t group_size, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    std::int64_t rows = 0;  // the table's rows: one past the largest id (the kernel reads no others)
    for (std::int64_t i = 0; i < n; ++i) rows = std::max<std::int64_t>(rows, ids[i] + 1);
    Tensor o = W(out, {n, c});
    cpu::int8_embedding_forward(Int8Args{.group_size = group_size}, W(ids, {n}, DType::i32), W(q, {rows, c}, DType::i8),
                                W(scales, {rows, int8_groups(c, group_size)}), o);
  });
}
void gelu_forward_f32(const float* x, float* out, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {n});
    gelu_forward(GeluArgs{}, W(x, {n}), o);
  });
}
void gelu_backward_f32(const float* x, const float* go, float* gx, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor tmp = Tensor::empty({n});
    gelu_backward(GeluArgs{}, W(x, {n}), W(go, {n}), tmp);
    std::memcpy(gx, tmp.raw_data(), n * 4);
  });
}
void layernorm_forward_f32(const float* x, const float* w, const float* b, float* out, float* mean, float* rstd,
                           std::int64_t N, std::int64_t C, float eps, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {N, C}), m = W(mean, {N}), r = W(rstd, {N});
    layernorm_forward(LayernormArgs{.eps = eps}, W(x, {N, C}), W(w, {C}), W(b, {C}), o, m, r);
  });
}
std::int64_t layernorm_backward_scratch_floats(std::int64_t, std::int64_t) { return 0; }
void layernorm_backward_f32(const float* go, const float* x, const float* w, const float* mean, const float* rstd,
                            float* gx, float* gw, float* gb, float*, std::int64_t, std::int64_t N, std::int64_t C,
                            cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor tx = W(gx, {N, C}), tw = W(gw, {C}), tb = W(gb, {C});
    layernorm_backward(LayernormArgs{}, W(x, {N, C}), W(w, {C}), W(mean, {N}), W(rstd, {N}), W(go, {N, C}), tx, tw, tb);
  });
}
void rmsnorm_forward_f32(const float* x, const float* w, float* out, float* rstd, std::int64_t N, std::int64_t C,
                         float eps, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {N, C}), r = W(rstd, {N});
    rmsnorm_forward(RmsnormArgs{.eps = eps}, W(x, {N, C}), W(w, {C}), o, r);
  });
}
void rmsnorm_backward_f32(const float* go, const float* x, const float* w, const float* rstd, float* gx, float* gw,
                          float*, std::int64_t, std::int64_t N, std::int64_t C, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor tx = W(gx, {N, C}), tw = W(gw, {C});
    rmsnorm_backward(RmsnormArgs{}, W(x, {N, C}), W(w, {C}), W(rstd, {N}), W(go, {N, C}), tx, tw);
  });
}
void swiglu_forward_f32(const float* gate, const float* up, float* out, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor tmp = Tensor::empty({n});
    swiglu_forward(SwigluArgs{}, W(gate, {n}), W(up, {n}), tmp);
    std::memcpy(out, tmp.raw_data(), static_cast<std::size_t>(n) * 4);
  });
}
void swiglu_backward_f32(const float* gate, const float* up, const float* go, float* gg, float* gu, std::int64_t n,
                         cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor tg = Tensor::empty({n}), tu = Tensor::empty({n});
    swiglu_backward(SwigluArgs{}, W(gate, {n}), W(up, {n}), W(go, {n}), tg, tu);
    if (gg != nullptr) std::memcpy(gg, tg.raw_data(), static_cast<std::size_t>(n) * 4);
    if (gu != nullptr) std::memcpy(gu, tu.raw_data(), static_cast<std::size_t>(n) * 4);
  });
}
// The tables and rotation of the kernels' contract (kernels.h): float64 angles, pairs (i, i + D/2).
void rope_table_f32(float* cos_table, float* sin_table, std::int64_t seq, std::int64_t D, double theta,
                    std::int64_t offset, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    const std::int64_t half = D / 2;
    for (std::int64_t t = 0; t < seq; ++t) {
      for (std::int64_t i = 0; i < half; ++i) {
        const double angle =
            static_cast<double>(offset + t) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
        cos_table[t * half + i] = static_cast<float>(std::cos(angle));
        sin_table[t * half + i] = static_cast<float>(std::sin(angle));
      }
    }
  });
}
void rope_f32(const float* x, float* out, const float* cos_table, const float* sin_table, std::int64_t batch,
              std::int64_t seq, std::int64_t heads, std::int64_t D, bool backward, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    const std::int64_t half = D / 2;
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t t = 0; t < seq; ++t)
        for (std::int64_t h = 0; h < heads; ++h) {
          const float* xr = x + ((b * seq + t) * heads + h) * D;
          float* yr = out + ((b * seq + t) * heads + h) * D;
          for (std::int64_t i = 0; i < half; ++i) {
            const float c = cos_table[t * half + i], s = backward ? -sin_table[t * half + i] : sin_table[t * half + i];
            const float x1 = xr[i], x2 = xr[i + half];
            yr[i] = x1 * c - x2 * s;
            yr[i + half] = x2 * c + x1 * s;
          }
        }
  });
}
void embedding_forward_f32(const std::int32_t* ids, const float* table, float* out, long long* bad, std::int64_t n,
                           std::int64_t V, std::int64_t C, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    for (std::int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] >= V) {
        if (i < *bad) *bad = i;
        std::memset(out + i * C, 0, C * 4);
        continue;
      }
      std::memcpy(out + i * C, table + ids[i] * C, C * 4);
    }
  });
}
// The real kernel sorts the ids in scratch (size from CUB); here 8 bytes a token plus 64 stand
// for it, and the launcher requires (and overwrites) that much, so a backend that passes no or
// short scratch fails here too.
std::int64_t embedding_backward_scratch_bytes(std::int64_t n, std::int64_t) { return n > 0 ? 8 * n + 64 : 0; }
void embedding_backward_f32(const std::int32_t* ids, const float* go, float* gt, long long* bad, void* scratch,
                            std::int64_t scratch_bytes, std::int64_t n, std::int64_t V, std::int64_t C,
                            cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    const std::int64_t needed = embedding_backward_scratch_bytes(n, V);
    MYRIAD_CHECK(needed == 0 || (scratch != nullptr && scratch_bytes >= needed),
                 "embedding_backward_f32: scratch " << scratch << " holds " << scratch_bytes << " bytes, needs "
                                                    << needed << " (embedding_backward_scratch_bytes)");
    if (needed > 0) std::memset(scratch, 0xff, static_cast<std::size_t>(needed));
    for (std::int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] >= V) {
        if (i < *bad) *bad = i;
        continue;
      }
      for (std::int64_t c = 0; c < C; ++c) gt[ids[i] * C + c] += go[i * C + c];
    }
  });
}
// The CPU op's arguments for a flash launcher's shape: offsets, accumulate and, with a layout, a
// host BlockLayout copied from its arrays ("device" memory is host memory here). The launchers'
// own layout rule (a query tile inside one layout block: block_size a multiple of `tile`) is
// checked as the kernels check it.
static AttentionArgs flash_args(const char* op, const FlashAttentionShape& s, std::int64_t tile, BlockLayout& layout) {
  AttentionArgs args{
      .scale = s.scale, .causal = s.causal, .q_offset = s.q_offset, .k_offset = s.k_offset, .accumulate = s.accumulate};
  if (s.layout.row_begin == nullptr) return args;
  MYRIAD_CHECK(s.layout.block_size >= 1 && s.layout.block_size % tile == 0,
               op << ": layout block_size " << s.layout.block_size << " must be a positive multiple of " << tile
                  << " (the kernel's query tile, which must lie inside one layout block)");
  layout.block_size = s.layout.block_size;
  layout.query_blocks = s.layout.query_blocks;
  layout.sets = s.layout.sets;
  // Entries past the sequence (>= query_blocks: a selection's padding, which the kernels skip)
  // are dropped, leaving the compressed rows the CPU op reads.
  const std::int64_t rows = s.layout.sets * s.layout.query_blocks;
  layout.row_begin.assign(1, 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t e = s.layout.row_begin[r]; e < s.layout.row_begin[r + 1]; ++e) {
      if (s.layout.key_blocks[e] < s.layout.query_blocks) layout.key_blocks.push_back(s.layout.key_blocks[e]);
    }
    layout.row_begin.push_back(layout.kept_blocks());
  }
  args.layout = &layout;
  return args;
}
static Shape q_shape(const FlashAttentionShape& s) { return {s.batch, s.q_heads, s.q_seq, s.head_dim}; }
static Shape kv_shape(const FlashAttentionShape& s) { return {s.batch, s.kv_heads, s.key_rows(), s.head_dim}; }
static Shape lse_shape(const FlashAttentionShape& s) { return {s.batch, s.q_heads, s.q_seq}; }
void flash_attention_forward_f32(const float* q, const float* k, const float* v, float* out, float* lse,
                                 const FlashAttentionShape& s, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    BlockLayout layout;
    const AttentionArgs args = flash_args("flash_attention_forward_f32", s, kFlashAttentionLayoutTile, layout);
    Shape sq = q_shape(s), sk = kv_shape(s);
    Tensor o = W(out, sq), l = W(lse, lse_shape(s));
    attention_forward(args, W(q, sq), W(k, sk), W(v, sk), o, l);
  });
}
void flash_attention_backward_f32(const float* q, const float* k, const float* v, const float* out, const float* lse,
                                  const float* go, float* gq, float* gk, float* gv, float*, std::int64_t,
                                  const FlashAttentionShape& s, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    BlockLayout layout;
    const AttentionArgs args = flash_args("flash_attention_backward_f32", s, kFlashAttentionLayoutTile, layout);
    Shape sq = q_shape(s), sk = kv_shape(s);
    Tensor a = W(gq, sq), b = W(gk, sk), c = W(gv, sk);
    attention_backward(args, W(q, sq), W(k, sk), W(v, sk), W(out, sq), W(lse, lse_shape(s)), W(go, sq), a, b, c);
  });
}
void attention_merge_f32(float* out, float* lse, const float* part_out, const float* part_lse, std::int64_t rows,
                         std::int64_t head_dim, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {1, 1, rows, head_dim}), l = W(lse, {1, 1, rows});
    attention_merge(o, l, W(part_out, {1, 1, rows, head_dim}), W(part_lse, {1, 1, rows}));
  });
}
// 16-bit attention: the CPU op on the widened bf16 / f16 inputs, outputs rounded to the same type
// (with accumulate, the gradients are widened first, summed in f32 and rounded once).
template <typename H>
constexpr DType kHalf = std::is_same_v<H, __half> ? DType::f16 : DType::bf16;
template <typename H>
static Tensor widen(const H* p, const Shape& s) {
  return W(p, s, kHalf<H>).to(DType::f32);
}
template <typename H>
static void narrow(const Tensor& t, H* out) {
  Tensor h = t.to(kHalf<H>);  // round to nearest even (core/half.h); f16 past 65504 -> inf
  std::memcpy(out, h.raw_data(), h.nbytes());
}
template <typename H>
static void attention_forward_half(const char* op, std::int64_t tile, const H* q, const H* k, const H* v, H* out,
                                   float* lse, const FlashAttentionShape& s) {
  BlockLayout layout;
  const AttentionArgs args = flash_args(op, s, tile, layout);
  Shape sq = q_shape(s), sk = kv_shape(s);
  Tensor o = Tensor::empty(sq), l = W(lse, lse_shape(s));
  attention_forward(args, widen(q, sq), widen(k, sk), widen(v, sk), o, l);
  narrow(o, out);
}
template <typename H>
static void attention_backward_half(const char* op, std::int64_t tile, const H* q, const H* k, const H* v, const H* out,
                                    const float* lse, const H* go, H* gq, H* gk, H* gv, const FlashAttentionShape& s) {
  BlockLayout layout;
  const AttentionArgs args = flash_args(op, s, tile, layout);
  Shape sq = q_shape(s), sk = kv_shape(s);
  Tensor a = s.accumulate ? widen(gq, sq) : Tensor::empty(sq), b = s.accumulate ? widen(gk, sk) : Tensor::empty(sk);
  Tensor c = s.accumulate ? widen(gv, sk) : Tensor::empty(sk);
  attention_backward(args, widen(q, sq), widen(k, sk), widen(v, sk), widen(out, sq), W(lse, lse_shape(s)),
                     widen(go, sq), a, b, c);
  narrow(a, gq);
  narrow(b, gk);
  narrow(c, gv);
}
void flash_attention_forward_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                  __nv_bfloat16* out, float* lse, const FlashAttentionShape& s,
                                  cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    attention_forward_half("flash_attention_forward_bf16", kFlashAttentionLayoutTile, q, k, v, out, lse, s);
  });
}
void flash_attention_forward_tc_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                     __nv_bfloat16* out, float* lse, const FlashAttentionShape& s,
                                     cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    attention_forward_half("flash_attention_forward_tc_bf16", kFlashAttentionTcLayoutTile, q, k, v, out, lse, s);
  });
}
void flash_attention_forward_tc_f16(const __half* q, const __half* k, const __half* v, __half* out, float* lse,
                                    const FlashAttentionShape& s, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    attention_forward_half("flash_attention_forward_tc_f16", kFlashAttentionTcLayoutTile, q, k, v, out, lse, s);
  });
}
void flash_attention_backward_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                   const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* go,
                                   __nv_bfloat16* gq, __nv_bfloat16* gk, __nv_bfloat16* gv, float*, std::int64_t,
                                   const FlashAttentionShape& s, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    attention_backward_half("flash_attention_backward_bf16", kFlashAttentionLayoutTile, q, k, v, out, lse, go, gq, gk,
                            gv, s);
  });
}
void flash_attention_backward_tc_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                      const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* go,
                                      __nv_bfloat16* gq, __nv_bfloat16* gk, __nv_bfloat16* gv, float*, std::int64_t,
                                      const FlashAttentionShape& s, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    attention_backward_half("flash_attention_backward_tc_bf16", kFlashAttentionTcLayoutTile, q, k, v, out, lse, go, gq,
                            gk, gv, s);
  });
}
void flash_attention_backward_tc_f16(const __half* q, const __half* k, const __half* v, const __half* out,
                                     const float* lse, const __half* go, __half* gq, __half* gk, __half* gv, float*,
                                     std::int64_t, const FlashAttentionShape& s, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    attention_backward_half("flash_attention_backward_tc_f16", kFlashAttentionTcLayoutTile, q, k, v, out, lse, go, gq,
                            gk, gv, s);
  });
}
// cuDNN's fused attention (cuda/cudnn_attention.h) as the CPU op on the widened 16-bit inputs,
// like the flash launchers: the backend's dispatch to it and its buffers are the real code.
class CudnnAttention {
 public:
  cudaStream_t stream = nullptr;
};
std::shared_ptr<CudnnAttention> make_cudnn_attention(cudaStream_t stream, std::string&) {
  auto attention = std::make_shared<CudnnAttention>();
  attention->stream = stream;
  return attention;
}
bool cudnn_attention_prepare(CudnnAttention&, const CudnnAttentionShape&, bool, std::int64_t& workspace_bytes,
                             std::string&) {
  workspace_bytes = 4096;  // some workspace, so that its allocation is exercised
  return true;
}
static FlashAttentionShape flash_shape_of(const CudnnAttentionShape& s) {
  return FlashAttentionShape{.batch = s.batch,
                             .q_heads = s.q_heads,
                             .kv_heads = s.kv_heads,
                             .q_seq = s.seq,
                             .head_dim = s.head_dim,
                             .scale = s.scale,
                             .causal = s.causal};
}
void cudnn_attention_forward(CudnnAttention& attention, const CudnnAttentionShape& s, const void* q, const void* k,
                             const void* v, void* out, float* lse, void*) {
  emulated::count_cudnn_call();
  emulated::launch(attention.stream, [=] {
    const FlashAttentionShape f = flash_shape_of(s);
    if (s.f16) {
      attention_forward_half("cudnn_attention_forward", 1, static_cast<const __half*>(q), static_cast<const __half*>(k),
                             static_cast<const __half*>(v), static_cast<__half*>(out), lse, f);
    } else {
      using B = __nv_bfloat16;
      attention_forward_half("cudnn_attention_forward", 1, static_cast<const B*>(q), static_cast<const B*>(k),
                             static_cast<const B*>(v), static_cast<B*>(out), lse, f);
    }
  });
}
void cudnn_attention_backward(CudnnAttention& attention, const CudnnAttentionShape& s, const void* q, const void* k,
                              const void* v, const void* out, const float* lse, const void* go, void* gq, void* gk,
                              void* gv, void*) {
  emulated::count_cudnn_call();
  emulated::launch(attention.stream, [=] {
    const FlashAttentionShape f = flash_shape_of(s);
    const auto run = [&]<typename H>(H*) {
      attention_backward_half("cudnn_attention_backward", 1, static_cast<const H*>(q), static_cast<const H*>(k),
                              static_cast<const H*>(v), static_cast<const H*>(out), lse, static_cast<const H*>(go),
                              static_cast<H*>(gq), static_cast<H*>(gk), static_cast<H*>(gv), f);
    };
    if (s.f16) {
      run(static_cast<__half*>(nullptr));
    } else {
      run(static_cast<__nv_bfloat16*>(nullptr));
    }
  });
}
template <typename H>
static void widen_into(const H* x, float* out, std::int64_t n) {
  Tensor wide = widen(x, {n});
  std::memcpy(out, wide.raw_data(), static_cast<std::size_t>(n) * 4);
}
void convert_bf16_to_f32(const __nv_bfloat16* x, float* out, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable { widen_into(x, out, n); });
}
void convert_f16_to_f32(const __half* x, float* out, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable { widen_into(x, out, n); });
}
void cross_entropy_forward_f32(const float* logits, const std::int32_t* t, float* losses, float* lse, long long* bad,
                               std::int64_t N, std::int64_t V, std::int64_t L, std::int32_t ig,
                               cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    for (std::int64_t i = 0; i < N; ++i)
      if (t[i] != ig && (t[i] < 0 || t[i] >= V) && i < *bad) *bad = i;
    Tensor l = W(losses, {N}), s = W(lse, {N});
    cross_entropy_forward(CrossEntropyArgs{.ignore_index = ig, .classes = V}, W(logits, {N, L}), W(t, {N}, DType::i32),
                          l, s);
  });
}
void vocab_shard_tokens_i32(const std::int32_t* tokens, std::int32_t* out, std::int64_t n, std::int64_t vocab_start,
                            std::int64_t rows, bool state, std::int32_t elsewhere, std::int32_t ignore_index,
                            cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor result = W(out, {n}, DType::i32);
    const VocabShardMap map{.output = state ? VocabShardMap::Output::state : VocabShardMap::Output::rows,
                            .vocab_start = vocab_start,
                            .rows = rows,
                            .elsewhere = elsewhere,
                            .ignore_index = ignore_index};
    vocab_shard_tokens(map, W(tokens, {n}, DType::i32), result);
  });
}
void vocab_shard_partials_f32(const std::int32_t* state, const float* local_lse, const float* local_loss,
                              const float* maxima, float* packed, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor out = W(packed, {2 * n});
    vocab_shard_partials(W(state, {n}, DType::i32), W(local_lse, {n}), W(local_loss, {n}), W(maxima, {n}), out);
  });
}
void vocab_shard_combine_f32(const std::int32_t* state, const float* maxima, const float* packed, float* lse,
                             float* losses, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor out_lse = W(lse, {n}), out_losses = W(losses, {n});
    vocab_shard_combine(W(state, {n}, DType::i32), W(maxima, {n}), W(packed, {2 * n}), out_lse, out_losses);
  });
}
void softmax_forward_f32(const float* x, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {rows, cols});
    softmax_forward(SoftmaxArgs{}, W(x, {rows, cols}), o);
  });
}
void softmax_backward_f32(const float* out, const float* go, float* gx, std::int64_t rows, std::int64_t cols,
                          cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor g = W(gx, {rows, cols});
    softmax_backward(SoftmaxArgs{}, W(out, {rows, cols}), W(go, {rows, cols}), g);
  });
}
void cross_entropy_backward_f32(const float* logits, const std::int32_t* t, const float* lse, const float* gl,
                                float* glog, std::int64_t N, std::int64_t V, std::int64_t L, std::int32_t ig,
                                cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor tmp = Tensor::empty({N, L});
    cross_entropy_backward(CrossEntropyArgs{.ignore_index = ig, .classes = V}, W(logits, {N, L}), W(t, {N}, DType::i32),
                           W(lse, {N}), W(gl, {N}), tmp);
    std::memcpy(glog, tmp.raw_data(), N * L * 4);
  });
}
void cross_entropy_backward_shard_f32(const float* logits, const std::int32_t* t, const float* lse, const float* gl,
                                      float* glog, std::int64_t N, std::int64_t V, std::int64_t L, std::int64_t start,
                                      std::int32_t ig, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    for (std::int64_t i = 0; i < N; ++i) {  // the contract of kernels.h, as a loop
      const float scale = t[i] == ig ? 0.0f : gl[i];
      for (std::int64_t v = 0; v < L; ++v) {
        const float p = v < V ? std::exp(logits[i * L + v] - lse[i]) : 0.0f;
        glog[i * L + v] = (p - (start + v == t[i] && v < V ? 1.0f : 0.0f)) * scale;
      }
    }
  });
}
void adamw_update_f32(float* p, const float* g, float* m, float* v, std::int64_t n, const AdamWStep& s,
                      cudaStream_t launch_stream, const AdamWCopyPointers& copies) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor tp = W(p, {n}), tm = W(m, {n}), tv = W(v, {n});
    const DType format = copies.f16 ? DType::f16 : DType::bf16;
    const AdamWCopies host_copies{.format = format,
                                  .rounded = copies.rounded != nullptr ? W(copies.rounded, {n}) : Tensor(),
                                  .narrow = copies.narrow != nullptr ? W(copies.narrow, {n}, format) : Tensor()};
    adamw_update(AdamWArgs{.lr = s.lr,
                           .beta1 = s.beta1,
                           .beta2 = s.beta2,
                           .eps = s.eps,
                           .weight_decay = s.weight_decay,
                           .step = s.step,
                           .grad_scale = s.grad_scale},
                 tp, W(g, {n}), tm, tv, host_copies);
  });
}
// Compression codes and 1-bit Adam's update: the CPU ops on the launchers' pointers.
static void encode_on_host(const CompressionSpec& spec, const float* x, float* error, std::uint8_t* code,
                           std::int64_t n) {
  Tensor e = W(error, {n}), c = W(code, {encoded_bytes(spec, n)}, DType::i8);
  compress_encode(spec, W(x, {n}), e, c);
}
static void decode_on_host(const CompressionSpec& spec, const std::uint8_t* code, float* out, std::int64_t n,
                           bool accumulate) {
  Tensor o = W(out, {n});
  compress_decode(spec, W(code, {encoded_bytes(spec, n)}, DType::i8), o, accumulate);
}
// A ratio whose topk_count(ratio, n) is k (the launchers take k; the op takes the ratio).
static CompressionSpec topk_spec(std::int64_t n, std::int64_t k) {
  CompressionSpec spec{Compression::topk, static_cast<double>(k) / static_cast<double>(n)};
  if (topk_count(spec.topk_ratio, n) != k) spec.topk_ratio = std::nextafter(spec.topk_ratio, 0.0);
  if (topk_count(spec.topk_ratio, n) != k) {
    std::fprintf(stderr, "emulated topk: no ratio gives k %lld of n %lld\n", static_cast<long long>(k),
                 static_cast<long long>(n));
    std::abort();
  }
  return spec;
}
void sign_encode_f32(const float* x, float* error, std::uint8_t* code, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream,
                   [=]() mutable { encode_on_host(CompressionSpec{Compression::sign}, x, error, code, n); });
}
void int8_encode_f32(const float* x, float* error, std::uint8_t* code, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream,
                   [=]() mutable { encode_on_host(CompressionSpec{Compression::int8}, x, error, code, n); });
}
void topk_encode_f32(const float* x, float* error, std::uint8_t* code, std::int64_t n, std::int64_t k,
                     cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    if (n > 0) encode_on_host(topk_spec(n, k), x, error, code, n);
  });
}
void sign_decode_f32(const std::uint8_t* code, float* out, std::int64_t n, bool accumulate,
                     cudaStream_t launch_stream) {
  emulated::launch(launch_stream,
                   [=]() mutable { decode_on_host(CompressionSpec{Compression::sign}, code, out, n, accumulate); });
}
void int8_decode_f32(const std::uint8_t* code, float* out, std::int64_t n, bool accumulate,
                     cudaStream_t launch_stream) {
  emulated::launch(launch_stream,
                   [=]() mutable { decode_on_host(CompressionSpec{Compression::int8}, code, out, n, accumulate); });
}
void topk_decode_f32(const std::uint8_t* code, float* out, std::int64_t n, std::int64_t k, bool accumulate,
                     cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    if (n > 0) decode_on_host(topk_spec(n, k), code, out, n, accumulate);
  });
}
// Exact sums: the host encoding (ops/exact_sum.h) on the launchers' pointers. NcclCommunicator
// launches them on its own stream between collectives whose results the emulated NCCL delivers
// late, so each launcher first delivers the stream's pending writes into what it reads or
// writes (the stream's order), and the decode's output is delivered like a collective's result.
void exact_sum_exponents_f32(const float* x, std::int64_t n, std::int32_t* exponents, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    const std::int64_t blocks = exact_sum_blocks(n);
    emulated::deliver_writes_to(launch_stream, x, static_cast<std::size_t>(n) * sizeof(float));
    emulated::deliver_writes_to(launch_stream, exponents, static_cast<std::size_t>(blocks) * sizeof(std::int32_t));
    myriad::exact_sum_exponents(x, n, exponents);
  });
}
void to_exact_fixed_f32(const float* x, std::int64_t n, const std::int32_t* exponents, int headroom, std::int64_t* q,
                        cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    emulated::deliver_writes_to(launch_stream, x, static_cast<std::size_t>(n) * sizeof(float));
    emulated::deliver_writes_to(launch_stream, exponents,
                                static_cast<std::size_t>(exact_sum_blocks(n)) * sizeof(std::int32_t));
    emulated::deliver_writes_to(launch_stream, q, static_cast<std::size_t>(n) * sizeof(std::int64_t));
    myriad::to_exact_fixed(x, n, exponents, headroom, q);
  });
}
void from_exact_fixed_f32(const std::int64_t* q, std::int64_t first, std::int64_t n, const std::int32_t* exponents,
                          int headroom, float* out, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    if (n == 0) return;
    const std::int64_t blocks = exact_sum_blocks(first + n);
    emulated::deliver_writes_to(launch_stream, q, static_cast<std::size_t>(n) * sizeof(std::int64_t));
    emulated::deliver_writes_to(launch_stream, exponents, static_cast<std::size_t>(blocks) * sizeof(std::int32_t));
    emulated::deliver_writes_to(launch_stream, out, static_cast<std::size_t>(n) * sizeof(float));
    auto result = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n));
    myriad::from_exact_fixed(q, first, n, exponents, headroom, result->data());
    emulated::defer_on_stream(
        launch_stream, [out, result] { std::memcpy(out, result->data(), result->size() * sizeof(float)); }, out,
        static_cast<std::size_t>(n) * sizeof(float));
  });
}
void onebit_adam_momentum_f32(float* m, const float* g, std::int64_t n, float beta1, float gain,
                              cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor tm = W(m, {n});
    onebit_adam_momentum(OneBitAdamMomentumArgs{.beta1 = beta1, .gain = gain}, tm, W(g, {n}));
  });
}
void onebit_adam_update_f32(float* p, float* m, const float* v, std::int64_t n, const OneBitAdamStep& s,
                            cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor tp = W(p, {n}), tm = W(m, {n});
    onebit_adam_update(OneBitAdamUpdateArgs{.lr = s.lr,
                                            .decay = s.decay,
                                            .bias1 = s.bias1,
                                            .bias2 = s.bias2,
                                            .eps = s.eps,
                                            .inverse_replicas = s.inverse_replicas},
                       tp, tm, W(v, {n}));
  });
}
std::int64_t grad_norm_scratch_doubles(std::int64_t) { return 1; }
void grad_norm_squared_f32(const float* g, std::int64_t n, double*, std::int64_t, double* out,
                           cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable { *out = grad_norm_squared(W(g, {n})); });
}
// The forward kernels' 16-bit outputs: the ops' own (f32 math, rounded once; ops/f32_output.h).
template <typename H>
static void layernorm_forward_into(const float* x, const float* w, const float* b, H* out, float* mean, float* rstd,
                                   std::int64_t N, std::int64_t C, float eps, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {N, C}, kHalf<H>), m = W(mean, {N}), r = W(rstd, {N});
    layernorm_forward(LayernormArgs{.eps = eps}, W(x, {N, C}), W(w, {C}), W(b, {C}), o, m, r);
  });
}
void layernorm_forward_f32(const float* x, const float* w, const float* b, __nv_bfloat16* out, float* mean, float* rstd,
                           std::int64_t N, std::int64_t C, float eps, cudaStream_t launch_stream) {
  layernorm_forward_into(x, w, b, out, mean, rstd, N, C, eps, launch_stream);
}
void layernorm_forward_f32(const float* x, const float* w, const float* b, __half* out, float* mean, float* rstd,
                           std::int64_t N, std::int64_t C, float eps, cudaStream_t launch_stream) {
  layernorm_forward_into(x, w, b, out, mean, rstd, N, C, eps, launch_stream);
}
template <typename H>
static void rmsnorm_forward_into(const float* x, const float* w, H* out, float* rstd, std::int64_t N, std::int64_t C,
                                 float eps, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {N, C}, kHalf<H>), r = W(rstd, {N});
    rmsnorm_forward(RmsnormArgs{.eps = eps}, W(x, {N, C}), W(w, {C}), o, r);
  });
}
void rmsnorm_forward_f32(const float* x, const float* w, __nv_bfloat16* out, float* rstd, std::int64_t N,
                         std::int64_t C, float eps, cudaStream_t launch_stream) {
  rmsnorm_forward_into(x, w, out, rstd, N, C, eps, launch_stream);
}
void rmsnorm_forward_f32(const float* x, const float* w, __half* out, float* rstd, std::int64_t N, std::int64_t C,
                         float eps, cudaStream_t launch_stream) {
  rmsnorm_forward_into(x, w, out, rstd, N, C, eps, launch_stream);
}
// The norms from a 16-bit x (the residual stream under mixed precision): the ops read it widened.
template <typename T>
constexpr DType kStored = std::is_same_v<T, float> ? DType::f32 : kHalf<T>;
template <typename X, typename O>
static void layernorm_from_16bit(const X* x, const float* w, const float* b, O* out, float* mean, float* rstd,
                                 std::int64_t N, std::int64_t C, float eps, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {N, C}, kStored<O>), m = W(mean, {N}), r = W(rstd, {N});
    layernorm_forward(LayernormArgs{.eps = eps}, W(x, {N, C}, kHalf<X>), W(w, {C}), W(b, {C}), o, m, r);
  });
}
template <typename X, typename O>
static void rmsnorm_from_16bit(const X* x, const float* w, O* out, float* rstd, std::int64_t N, std::int64_t C,
                               float eps, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {N, C}, kStored<O>), r = W(rstd, {N});
    rmsnorm_forward(RmsnormArgs{.eps = eps}, W(x, {N, C}, kHalf<X>), W(w, {C}), o, r);
  });
}
template <typename X>
static void norm_backward_from_16bit(bool centered, const float* go, const X* x, const float* w, const float* mean,
                                     const float* rstd, float* gx, float* gw, float* gb, std::int64_t N, std::int64_t C,
                                     cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor tx = W(gx, {N, C}), tw = W(gw, {C}), tb = W(gb, {C});
    const Tensor wide_x = W(x, {N, C}, kHalf<X>);
    if (centered) {
      layernorm_backward(LayernormArgs{}, wide_x, W(w, {C}), W(mean, {N}), W(rstd, {N}), W(go, {N, C}), tx, tw, tb);
    } else {
      rmsnorm_backward(RmsnormArgs{}, wide_x, W(w, {C}), W(rstd, {N}), W(go, {N, C}), tx, tw);
    }
  });
}
#define MYRIAD_EMULATED_NORMS_FROM(X)                                                                                  \
  void layernorm_forward_f32(const X* x, const float* w, const float* b, X* out, float* mean, float* rstd,             \
                             std::int64_t N, std::int64_t C, float eps, cudaStream_t launch_stream) {                  \
    layernorm_from_16bit(x, w, b, out, mean, rstd, N, C, eps, launch_stream);                                          \
  }                                                                                                                    \
  void layernorm_forward_f32(const X* x, const float* w, const float* b, float* out, float* mean, float* rstd,         \
                             std::int64_t N, std::int64_t C, float eps, cudaStream_t launch_stream) {                  \
    layernorm_from_16bit(x, w, b, out, mean, rstd, N, C, eps, launch_stream);                                          \
  }                                                                                                                    \
  void rmsnorm_forward_f32(const X* x, const float* w, X* out, float* rstd, std::int64_t N, std::int64_t C, float eps, \
                           cudaStream_t launch_stream) {                                                               \
    rmsnorm_from_16bit(x, w, out, rstd, N, C, eps, launch_stream);                                                     \
  }                                                                                                                    \
  void rmsnorm_forward_f32(const X* x, const float* w, float* out, float* rstd, std::int64_t N, std::int64_t C,        \
                           float eps, cudaStream_t launch_stream) {                                                    \
    rmsnorm_from_16bit(x, w, out, rstd, N, C, eps, launch_stream);                                                     \
  }                                                                                                                    \
  void layernorm_backward_f32(const float* go, const X* x, const float* w, const float* mean, const float* rstd,       \
                              float* gx, float* gw, float* gb, float*, std::int64_t, std::int64_t N, std::int64_t C,   \
                              cudaStream_t launch_stream) {                                                            \
    norm_backward_from_16bit(true, go, x, w, mean, rstd, gx, gw, gb, N, C, launch_stream);                             \
  }                                                                                                                    \
  void rmsnorm_backward_f32(const float* go, const X* x, const float* w, const float* rstd, float* gx, float* gw,      \
                            float*, std::int64_t, std::int64_t N, std::int64_t C, cudaStream_t launch_stream) {        \
    norm_backward_from_16bit(false, go, x, w, nullptr, rstd, gx, gw, nullptr, N, C, launch_stream);                    \
  }
MYRIAD_EMULATED_NORMS_FROM(__nv_bfloat16)
MYRIAD_EMULATED_NORMS_FROM(__half)
#undef MYRIAD_EMULATED_NORMS_FROM
template <typename H>
static void gelu_forward_into(const float* x, H* out, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {n}, kHalf<H>);
    gelu_forward(GeluArgs{}, W(x, {n}), o);
  });
}
void gelu_forward_f32(const float* x, __nv_bfloat16* out, std::int64_t n, cudaStream_t launch_stream) {
  gelu_forward_into(x, out, n, launch_stream);
}
void gelu_forward_f32(const float* x, __half* out, std::int64_t n, cudaStream_t launch_stream) {
  gelu_forward_into(x, out, n, launch_stream);
}
template <typename H>
static void gelu_forward_sixteen_bit(const H* x, H* out, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {n}, kHalf<H>);
    gelu_forward(GeluArgs{}, W(x, {n}, kHalf<H>), o);
  });
}
void gelu_forward_bf16(const __nv_bfloat16* x, __nv_bfloat16* out, std::int64_t n, cudaStream_t launch_stream) {
  gelu_forward_sixteen_bit(x, out, n, launch_stream);
}
void gelu_forward_f16(const __half* x, __half* out, std::int64_t n, cudaStream_t launch_stream) {
  gelu_forward_sixteen_bit(x, out, n, launch_stream);
}
template <typename H>
static void gelu_backward_sixteen_bit(const H* x, const float* go, H* gx, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(gx, {n}, kHalf<H>);
    gelu_backward(GeluArgs{}, W(x, {n}, kHalf<H>), W(go, {n}), o);
  });
}
void gelu_backward_f32(const __nv_bfloat16* x, const float* go, __nv_bfloat16* gx, std::int64_t n,
                       cudaStream_t launch_stream) {
  gelu_backward_sixteen_bit(x, go, gx, n, launch_stream);
}
void gelu_backward_f32(const __half* x, const float* go, __half* gx, std::int64_t n, cudaStream_t launch_stream) {
  gelu_backward_sixteen_bit(x, go, gx, n, launch_stream);
}
template <typename G, typename H>
static void swiglu_forward_into(const G* gate, const G* up, H* out, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {n}, kHalf<H>);
    swiglu_forward(SwigluArgs{}, W(gate, {n}, kStored<G>), W(up, {n}, kStored<G>), o);
  });
}
void swiglu_forward_f32(const float* gate, const float* up, __nv_bfloat16* out, std::int64_t n,
                        cudaStream_t launch_stream) {
  swiglu_forward_into(gate, up, out, n, launch_stream);
}
void swiglu_forward_f32(const float* gate, const float* up, __half* out, std::int64_t n, cudaStream_t launch_stream) {
  swiglu_forward_into(gate, up, out, n, launch_stream);
}
void swiglu_forward_f32(const __nv_bfloat16* gate, const __nv_bfloat16* up, __nv_bfloat16* out, std::int64_t n,
                        cudaStream_t launch_stream) {
  swiglu_forward_into(gate, up, out, n, launch_stream);
}
void swiglu_forward_f32(const __half* gate, const __half* up, __half* out, std::int64_t n, cudaStream_t launch_stream) {
  swiglu_forward_into(gate, up, out, n, launch_stream);
}
// rope_rows on the host: the views widened exactly, the f32 rotation of rope_f32's contract, the
// result rounded once into the output view (the kernel's f32 math and one rounding).
template <typename In, typename Out>
static void rope_rows_on_host(const In* x, Out* out, const float* cos_table, const float* sin_table, const RopeRows& r,
                              cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    const auto dtype_of = [](auto* p) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(p)>>;
      return std::is_same_v<T, float> ? DType::f32 : kHalf<T>;
    };
    const Shape shape = {r.batch, r.seq, r.heads, r.head_dim};
    const auto view = [&](const void* p, DType t, std::int64_t batch_stride, std::int64_t row_stride) {
      const std::int64_t extent = (r.batch - 1) * batch_stride + (r.seq - 1) * row_stride + r.heads * r.head_dim;
      return Tensor::from_storage(Storage::wrap(const_cast<void*>(p), static_cast<std::size_t>(extent) * dtype_size(t),
                                                Device::cpu(), [](void*) {}),
                                  shape, {batch_stride, row_stride, r.head_dim, 1}, 0, t);
    };
    const Tensor in = view(x, dtype_of(x), r.x_batch_stride, r.x_row_stride).to(DType::f32);
    Tensor rotated = Tensor::empty(shape);
    float* y = rotated.data<float>();
    const float* v = in.data<float>();
    const std::int64_t half = r.head_dim / 2;
    for (std::int64_t row = 0; row < r.batch * r.seq * r.heads; ++row) {
      const std::int64_t t = (row / r.heads) % r.seq;
      for (std::int64_t i = 0; i < half; ++i) {
        const float c = cos_table[t * half + i], s = r.backward ? -sin_table[t * half + i] : sin_table[t * half + i];
        const float a = v[row * r.head_dim + i], e = v[row * r.head_dim + i + half];
        y[row * r.head_dim + i] = a * c - e * s;
        y[row * r.head_dim + i + half] = e * c + a * s;
      }
    }
    Tensor target = view(out, dtype_of(out), r.out_batch_stride, r.out_row_stride);
    target.copy_from(rotated);
  });
}
void rope_rows(const float* x, float* out, const float* c, const float* s, const RopeRows& r, cudaStream_t st) {
  rope_rows_on_host(x, out, c, s, r, st);
}
void rope_rows(const float* x, __nv_bfloat16* out, const float* c, const float* s, const RopeRows& r, cudaStream_t st) {
  rope_rows_on_host(x, out, c, s, r, st);
}
void rope_rows(const float* x, __half* out, const float* c, const float* s, const RopeRows& r, cudaStream_t st) {
  rope_rows_on_host(x, out, c, s, r, st);
}
void rope_rows(const __nv_bfloat16* x, __nv_bfloat16* out, const float* c, const float* s, const RopeRows& r,
               cudaStream_t st) {
  rope_rows_on_host(x, out, c, s, r, st);
}
void rope_rows(const __half* x, __half* out, const float* c, const float* s, const RopeRows& r, cudaStream_t st) {
  rope_rows_on_host(x, out, c, s, r, st);
}
void rope_rows(const __nv_bfloat16* x, float* out, const float* c, const float* s, const RopeRows& r, cudaStream_t st) {
  rope_rows_on_host(x, out, c, s, r, st);
}
void rope_rows(const __half* x, float* out, const float* c, const float* s, const RopeRows& r, cudaStream_t st) {
  rope_rows_on_host(x, out, c, s, r, st);
}
template <typename G, typename H>
static void swiglu_backward_into(const G* gate, const G* up, const float* go, H* gg, H* gu, std::int64_t n,
                                 cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor tg = gg != nullptr ? W(gg, {n}, kHalf<H>) : Tensor(), tu = gu != nullptr ? W(gu, {n}, kHalf<H>) : Tensor();
    swiglu_backward(SwigluArgs{}, W(gate, {n}, kStored<G>), W(up, {n}, kStored<G>), W(go, {n}), tg, tu);
  });
}
void swiglu_backward_f32(const float* gate, const float* up, const float* go, __nv_bfloat16* gg, __nv_bfloat16* gu,
                         std::int64_t n, cudaStream_t launch_stream) {
  swiglu_backward_into(gate, up, go, gg, gu, n, launch_stream);
}
void swiglu_backward_f32(const float* gate, const float* up, const float* go, __half* gg, __half* gu, std::int64_t n,
                         cudaStream_t launch_stream) {
  swiglu_backward_into(gate, up, go, gg, gu, n, launch_stream);
}
void swiglu_backward_f32(const __nv_bfloat16* gate, const __nv_bfloat16* up, const float* go, __nv_bfloat16* gg,
                         __nv_bfloat16* gu, std::int64_t n, cudaStream_t launch_stream) {
  swiglu_backward_into(gate, up, go, gg, gu, n, launch_stream);
}
void swiglu_backward_f32(const __half* gate, const __half* up, const float* go, __half* gg, __half* gu, std::int64_t n,
                         cudaStream_t launch_stream) {
  swiglu_backward_into(gate, up, go, gg, gu, n, launch_stream);
}
void convert_f32_to_bf16(const float* x, __nv_bfloat16* out, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable { narrow(W(x, {n}), out); });
}
void convert_f32_to_f16(const float* x, __half* out, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable { narrow(W(x, {n}), out); });
}
void add_f32(const float* a, const float* b, float* out, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  });
}
void fill_f32(float* out, float value, std::int64_t n, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    for (std::int64_t i = 0; i < n; ++i) out[i] = value;
  });
}
void axpby_f32(float alpha, const float* a, float beta, const float* b, float* out, std::int64_t n, bool accumulate,
               cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    for (std::int64_t i = 0; i < n; ++i) {
      const float value = b == nullptr ? alpha * a[i] : alpha * a[i] + beta * b[i];
      out[i] = accumulate ? out[i] + value : value;
    }
  });
}
// One 16-bit side: the elementwise op on the widened b, or its f32 result rounded into out.
template <typename B, typename O>
static void mixed_axpby(float alpha, const float* a, float beta, const B* b, O* out, std::int64_t n, bool accumulate,
                        cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    MYRIAD_CHECK((std::is_same_v<O, float> || !accumulate), "axpby_f32: a 16-bit out is written, not accumulated");
    Tensor o = W(out, {n}, kStored<O>);
    if (accumulate) {
      Tensor value = Tensor::empty({n});
      add_forward(AddArgs{.alpha = alpha, .beta = beta}, W(a, {n}), W(b, {n}, kStored<B>), value);
      add_forward(AddArgs{}, value, o, o);
      return;
    }
    add_forward(AddArgs{.alpha = alpha, .beta = beta}, W(a, {n}), W(b, {n}, kStored<B>), o);
  });
}
void axpby_f32(float alpha, const float* a, float beta, const __nv_bfloat16* b, float* out, std::int64_t n,
               bool accumulate, cudaStream_t launch_stream) {
  mixed_axpby(alpha, a, beta, b, out, n, accumulate, launch_stream);
}
void axpby_f32(float alpha, const float* a, float beta, const __half* b, float* out, std::int64_t n, bool accumulate,
               cudaStream_t launch_stream) {
  mixed_axpby(alpha, a, beta, b, out, n, accumulate, launch_stream);
}
void axpby_f32(float alpha, const float* a, float beta, const float* b, __nv_bfloat16* out, std::int64_t n,
               bool accumulate, cudaStream_t launch_stream) {
  mixed_axpby(alpha, a, beta, b, out, n, accumulate, launch_stream);
}
void axpby_f32(float alpha, const float* a, float beta, const float* b, __half* out, std::int64_t n, bool accumulate,
               cudaStream_t launch_stream) {
  mixed_axpby(alpha, a, beta, b, out, n, accumulate, launch_stream);
}
void add_broadcast_rows_f32(float* x, const float* row, std::int64_t rows, std::int64_t w, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    for (std::int64_t i = 0; i < rows * w; ++i) x[i] += row[i % w];
  });
}
void column_sums_accumulate_f32(const float* x, float* out, std::int64_t rows, std::int64_t cols,
                                cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    for (std::int64_t c = 0; c < cols; ++c) {
      float s = 0;
      for (std::int64_t r = 0; r < rows; ++r) s += x[r * cols + c];
      out[c] += s;
    }
  });
}
template <typename H>
static void column_sums_of_halves(const H* x, float* out, std::int64_t rows, std::int64_t cols,
                                  cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    const Tensor wide = W(x, {rows, cols}, kHalf<H>).to(DType::f32);  // exact
    const float* v = wide.data<float>();
    for (std::int64_t c = 0; c < cols; ++c) {
      float s = 0;
      for (std::int64_t r = 0; r < rows; ++r) s += v[r * cols + c];
      out[c] += s;
    }
  });
}
void column_sums_accumulate_f32(const __nv_bfloat16* x, float* out, std::int64_t rows, std::int64_t cols,
                                cudaStream_t launch_stream) {
  column_sums_of_halves(x, out, rows, cols, launch_stream);
}
void column_sums_accumulate_f32(const __half* x, float* out, std::int64_t rows, std::int64_t cols,
                                cudaStream_t launch_stream) {
  column_sums_of_halves(x, out, rows, cols, launch_stream);
}
// The layout kernels over f32 or 16-bit elements (the 16-bit ones move bits).
template <typename Element>
static void split_heads_on_host(const Element* src, std::int64_t st, Element* dst, std::int64_t B, std::int64_t T,
                                std::int64_t H, std::int64_t D, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t d = 0; d < D; ++d) dst[((b * H + h) * T + t) * D + d] = src[(b * T + t) * st + h * D + d];
  });
}
template <typename Element>
static void merge_heads_on_host(const Element* src, Element* dst, std::int64_t st, std::int64_t B, std::int64_t T,
                                std::int64_t H, std::int64_t D, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t d = 0; d < D; ++d) dst[(b * T + t) * st + h * D + d] = src[((b * H + h) * T + t) * D + d];
  });
}
void split_heads_f32(const float* src, std::int64_t st, float* dst, std::int64_t B, std::int64_t T, std::int64_t H,
                     std::int64_t D, cudaStream_t launch_stream) {
  split_heads_on_host(src, st, dst, B, T, H, D, launch_stream);
}
void merge_heads_f32(const float* src, float* dst, std::int64_t st, std::int64_t B, std::int64_t T, std::int64_t H,
                     std::int64_t D, cudaStream_t launch_stream) {
  merge_heads_on_host(src, dst, st, B, T, H, D, launch_stream);
}
void split_heads_16(const std::uint16_t* src, std::int64_t st, std::uint16_t* dst, std::int64_t B, std::int64_t T,
                    std::int64_t H, std::int64_t D, cudaStream_t launch_stream) {
  split_heads_on_host(src, st, dst, B, T, H, D, launch_stream);
}
void merge_heads_16(const std::uint16_t* src, std::uint16_t* dst, std::int64_t st, std::int64_t B, std::int64_t T,
                    std::int64_t H, std::int64_t D, cudaStream_t launch_stream) {
  merge_heads_on_host(src, dst, st, B, T, H, D, launch_stream);
}
// Token routing: the CPU ops on the launcher's contract — an index out of range lowers *bad to
// its flat position and counts as -1 (the CPU op would throw instead, so it gets the cleaned map).
static Tensor routing_indices(const std::int32_t* p, std::int64_t n, std::int64_t high, long long* bad) {
  Tensor cleaned = Tensor::empty({n}, DType::i32);
  for (std::int64_t i = 0; i < n; ++i) {
    const bool ok = p[i] >= -1 && p[i] < high;
    if (!ok && p[i] != -1 && i < *bad) *bad = i;
    cleaned.data<std::int32_t>()[i] = ok ? p[i] : -1;
  }
  return cleaned;
}
void gather_rows_f32(const float* x, const std::int32_t* source, float* out, long long* bad, std::int64_t rows,
                     std::int64_t tokens, std::int64_t C, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {rows, C});
    gather_rows(W(x, {tokens, C}), routing_indices(source, rows, tokens, bad), o);
  });
}
void combine_rows_forward_f32(const float* rows, const std::int32_t* slot, const float* weight, float* out,
                              long long* bad, std::int64_t tokens, std::int64_t k, std::int64_t R, std::int64_t C,
                              cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor o = W(out, {tokens, C});
    combine_rows_forward(W(rows, {R, C}), routing_indices(slot, tokens * k, R, bad).view({tokens, k}),
                         W(weight, {tokens, k}), o);
  });
}
void combine_rows_backward_f32(const float* rows, const std::int32_t* slot, const float* weight, const float* go,
                               float* grad_rows, float* grad_weight, long long* bad, std::int64_t tokens,
                               std::int64_t k, std::int64_t R, std::int64_t C, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    Tensor gr = W(grad_rows, {R, C}), gw = W(grad_weight, {tokens, k});
    combine_rows_backward(W(rows, {R, C}), routing_indices(slot, tokens * k, R, bad).view({tokens, k}),
                          W(weight, {tokens, k}), W(go, {tokens, C}), gr, gw);
  });
}
// Block selection: the CPU ops on the launchers' arguments.
void block_means_f32(const float* x, float* out, std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D,
                     std::int64_t stride_b, std::int64_t stride_h, std::int64_t stride_t, std::int64_t block_size,
                     cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    const std::int64_t nb = blocks_covering(T, block_size);
    const std::int64_t span =
        B == 0 || H == 0 || T == 0 ? 0 : (B - 1) * stride_b + (H - 1) * stride_h + (T - 1) * stride_t + D;
    const Tensor in =
        Tensor::from_storage(Storage::wrap(const_cast<float*>(x), static_cast<std::size_t>(span) * sizeof(float),
                                           Device::cpu(), [](void*) {}),
                             {B, H, T, D}, {stride_b, stride_h, stride_t, 1}, 0, DType::f32);
    Tensor o = W(out, {B, H, nb, D});
    block_means(in, block_size, o);
  });
}
void select_blocks_f32(const BlockSelectShape& s, const float* qbar, const float* kbar, std::int32_t* key_blocks,
                       std::int64_t* row_begin, std::int32_t* counts, double* mass, double* totals,
                       cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    const BlockSelectArgs args{
        .fixed = {.local_blocks = s.local_blocks, .global_blocks = s.global_blocks, .stride_blocks = s.stride_blocks},
        .block_size = s.block_size,
        .sparse_ratio = s.sparse_ratio,
        .threshold = s.threshold,
        .max_blocks = s.max_blocks,
        .scale = s.scale,
        .seq_len = s.seq_len,
        .chunk_blocks = s.chunk_blocks,
        .chunk0 = s.chunk0,
        .chunk1 = s.chunk1};
    const std::int64_t nb = s.query_blocks, rows = s.batch * s.q_heads * nb;
    MYRIAD_CHECK(s.capacity == selection_capacity(args, nb),
                 "select_blocks_f32: capacity " << s.capacity << ", the args give " << selection_capacity(args, nb));
    SelectedBlocks out{.block_size = s.block_size,
                       .query_blocks = nb,
                       .sets = s.batch * s.q_heads,
                       .capacity = s.capacity,
                       .key_blocks = W(key_blocks, {rows, s.capacity}, DType::i32),
                       .row_begin = W(row_begin, {rows + 1}, DType::i64),
                       .counts = W(counts, {rows}, DType::i32),
                       .mass = W(mass, {rows}, DType::f64)};
    Tensor t = totals != nullptr ? W(totals, {5}, DType::f64) : Tensor();
    select_blocks(args, W(qbar, {s.batch, s.q_heads, nb, s.head_dim}), W(kbar, {s.batch, s.kv_heads, nb, s.head_dim}),
                  out, t);
  });
}
// MoE routing: the CPU op on the launcher's arguments (no scratch needed).
std::int64_t route_tokens_scratch_bytes(const RouteShape&) { return 8; }
std::int64_t count_route_choices_scratch_bytes(const RouteShape&) { return 8; }
static RouteArgs route_args(const RouteShape& s) {
  return RouteArgs{.top_k = s.top_k,
                   .seq_len = s.seq_len,
                   .capacity = s.capacity,
                   .sigmoid = s.sigmoid,
                   .normalize_top_k = s.normalize_top_k,
                   .padded = s.padded,
                   .context_ranks = s.context_ranks,
                   .context_rank = s.context_rank};
}
static Tensor route_context(const RouteShape& s, const std::int64_t* context) {
  if (context == nullptr) return Tensor();
  return W(const_cast<std::int64_t*>(context), {s.context_ranks, s.tokens / s.seq_len, 2, s.experts}, DType::i64);
}
void count_route_choices_f32(const RouteShape& s, const float* logits, std::int64_t* counts, void*, std::int64_t,
                             cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    const RouteArgs args = route_args(s);
    Tensor out = W(counts, {s.tokens / s.seq_len, args.chunks(), s.experts}, DType::i64);
    count_route_choices(args, W(logits, {s.tokens, s.experts}), out);
  });
}
void route_tokens_f32(const RouteShape& s, const float* logits, const std::int64_t* context, std::int32_t* expert,
                      float* weight, std::int32_t* slot, std::int32_t* source, std::int64_t source_rows,
                      std::int64_t* counts, double* totals, void*, std::int64_t, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    const std::int64_t N = s.tokens, E = s.experts, k = s.top_k;
    RoutedTokens out{.expert = W(expert, {N, k}, DType::i32),
                     .weight = W(weight, {N, k}),
                     .slot = W(slot, {N, k}, DType::i32),
                     .source = W(source, {source_rows}, DType::i32),
                     .counts = W(counts, {E}, DType::i64),
                     .totals = totals != nullptr ? W(totals, {E + 3}, DType::f64) : Tensor()};
    route_tokens(route_args(s), W(logits, {N, E}), out, route_context(s, context));
  });
}
void route_tokens_backward_f32(const RouteShape& s, const float* logits, const std::int64_t* context,
                               const std::int32_t* expert, const float* grad_weight, double aux_scale, double z_scale,
                               const float* scale, float* grad_logits, void*, std::int64_t,
                               cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    const std::int64_t N = s.tokens, E = s.experts, k = s.top_k;
    Tensor g = W(grad_logits, {N, E});
    route_tokens_backward(route_args(s), W(logits, {N, E}), W(expert, {N, k}, DType::i32), W(grad_weight, {N, k}),
                          aux_scale, z_scale, g, route_context(s, context),
                          scale != nullptr ? W(scale, {1}) : Tensor());
  });
}
void add_group_bias_f32(float* x, const float* bias, const std::int64_t* offsets, std::int64_t groups, std::int64_t,
                        std::int64_t cols, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    for (std::int64_t g = 0; g < groups; ++g)
      for (std::int64_t r = offsets[g]; r < offsets[g + 1]; ++r)
        for (std::int64_t c = 0; c < cols; ++c) x[r * cols + c] += bias[g * cols + c];
  });
}
void group_column_sums_accumulate_f32(const float* x, float* out, const std::int64_t* offsets, std::int64_t groups,
                                      std::int64_t, std::int64_t cols, cudaStream_t launch_stream) {
  emulated::launch(launch_stream, [=]() mutable {
    for (std::int64_t g = 0; g < groups; ++g) {
      if (offsets[g] == offsets[g + 1]) continue;  // an empty group's row is not touched
      for (std::int64_t c = 0; c < cols; ++c) {
        float s = 0;
        for (std::int64_t r = offsets[g]; r < offsets[g + 1]; ++r) s += x[r * cols + c];
        out[g * cols + c] += s;
      }
    }
  });
}
}  // namespace myriad::cuda
