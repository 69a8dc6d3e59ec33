// CudaGraphRecorder: train::GraphRecorder over cuda::PooledStreamGraph.
#include "cuda_graph_recorder.h"

#include "myriad/cuda/stream_graph.h"

namespace myriad::train {

namespace {

class CudaGraphRecorder final : public GraphRecorder {
 public:
  explicit CudaGraphRecorder(cuda::DeviceContext& context) : graph_(context) {}
  void run_in_pool(const std::function<void()>& work) override { graph_.run_in_pool(work); }
  void record(const std::function<void()>& work) override { graph_.record(work); }
  void replay() override { graph_.replay(); }
  std::size_t launches() const override { return graph_.launches(); }

 private:
  cuda::PooledStreamGraph graph_;
};

}  // namespace

std::unique_ptr<GraphRecorder> make_cuda_graph_recorder(cuda::DeviceContext& context) {
  return std::make_unique<CudaGraphRecorder>(context);
}

}  // namespace myriad::train
