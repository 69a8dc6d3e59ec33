// StreamGraph and StreamCapture over the CUDA runtime's stream capture and graph calls;
// PooledStreamGraph switches the context's allocator to its private pool for the duration of the
// work (and back, also when the work throws).
#include "myriad/cuda/stream_graph.h"

#include "myriad/cuda/check.h"
#include "myriad/cuda/device_context.h"
#include "myriad/cuda/device_guard.h"

namespace myriad::cuda {

StreamGraph::~StreamGraph() {
  (void)cudaGraphExecDestroy(exec_);
  (void)cudaGraphDestroy(graph_);
}

void StreamGraph::launch(cudaStream_t stream) const { MYRIAD_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

std::size_t StreamGraph::nodes() const {
  std::size_t count = 0;
  MYRIAD_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &count));
  return count;
}

StreamCapture::StreamCapture(cudaStream_t stream) : stream_(stream) {
  MYRIAD_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
}

StreamCapture::~StreamCapture() {
  if (!recording_) return;
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(stream_, &graph);  // invalidated or not: discarded
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();
}

std::unique_ptr<StreamGraph> StreamCapture::finish() {
  recording_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (ended != cudaSuccess) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    MYRIAD_CUDA_CHECK(ended);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  if (made != cudaSuccess) {
    (void)cudaGraphDestroy(graph);
    MYRIAD_CUDA_CHECK(made);
  }
  return std::make_unique<StreamGraph>(graph, exec);
}

namespace {

// The allocator serves `pool` while this lives.
class InPool {
 public:
  InPool(CachingAllocator& allocator, PoolId pool) : allocator_(allocator), before_(allocator.allocation_pool()) {
    allocator_.set_allocation_pool(pool);
  }
  ~InPool() { allocator_.set_allocation_pool(before_); }
  InPool(const InPool&) = delete;
  InPool& operator=(const InPool&) = delete;

 private:
  CachingAllocator& allocator_;
  PoolId before_;
};

}  // namespace

PooledStreamGraph::PooledStreamGraph(DeviceContext& context)
    : context_(context), pool_(context.allocator().create_private_pool()) {}

PooledStreamGraph::~PooledStreamGraph() {
  graph_.reset();
  context_.allocator().release_private_pool(pool_);
}

void PooledStreamGraph::run_in_pool(const std::function<void()>& work) {
  InPool in(context_.allocator(), pool_);
  work();
}

void PooledStreamGraph::record(const std::function<void()>& work) {
  MYRIAD_CHECK(!graph_, "PooledStreamGraph: one recording per graph");
  DeviceGuard guard(context_.device());
  InPool in(context_.allocator(), pool_);
  StreamCapture capture(context_.stream());
  work();
  graph_ = capture.finish();
}

void PooledStreamGraph::replay() const {
  MYRIAD_CHECK(graph_, "PooledStreamGraph: nothing recorded to replay");
  DeviceGuard guard(context_.device());
  graph_->launch(context_.stream());
}

bool is_capturing(cudaStream_t stream) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status == cudaStreamCaptureStatusActive;
}

}  // namespace myriad::cuda
