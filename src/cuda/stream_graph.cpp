// StreamGraph and StreamCapture over the CUDA runtime's stream capture and graph calls.
#include "myriad/cuda/stream_graph.h"

#include "myriad/cuda/check.h"

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

bool is_capturing(cudaStream_t stream) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status == cudaStreamCaptureStatusActive;
}

}  // namespace myriad::cuda
