// CudaGraphRecorder: run_in_pool / record switch the context's allocator to the recorder's private
// pool for the duration of the work (and back, also when the work throws); the pool is released
// after the graph, when the recorder goes.
#include "cuda_graph_recorder.h"

#include "myriad/core/error.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/stream_graph.h"

namespace myriad::train {

namespace {

class CudaGraphRecorder final : public GraphRecorder {
 public:
  explicit CudaGraphRecorder(cuda::DeviceContext& context)
      : context_(context), pool_(context.allocator().create_private_pool()) {}
  ~CudaGraphRecorder() override {
    graph_.reset();
    context_.allocator().release_private_pool(pool_);
  }

  void run_in_pool(const std::function<void()>& work) override {
    InPool in(context_.allocator(), pool_);
    work();
  }

  void record(const std::function<void()>& work) override {
    MYRIAD_CHECK(!graph_, "GraphRecorder: one recording per recorder");
    cuda::DeviceGuard guard(context_.device());
    InPool in(context_.allocator(), pool_);
    cuda::StreamCapture capture(context_.stream());
    work();
    graph_ = capture.finish();
  }

  void replay() override {
    MYRIAD_CHECK(graph_, "GraphRecorder: nothing recorded to replay");
    cuda::DeviceGuard guard(context_.device());
    graph_->launch(context_.stream());
  }

  std::size_t launches() const override { return graph_ ? graph_->nodes() : 0; }

 private:
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

  cuda::DeviceContext& context_;
  PoolId pool_;
  std::unique_ptr<cuda::StreamGraph> graph_;
};

}  // namespace

std::unique_ptr<GraphRecorder> make_cuda_graph_recorder(cuda::DeviceContext& context) {
  return std::make_unique<CudaGraphRecorder>(context);
}

}  // namespace myriad::train
