// cuda::PooledStreamGraph (cuda/stream_graph.h): ops on the CUDA backend recorded once and replayed
// compute what the CPU ops compute on each new input copied into the recorded input buffer; the
// temporaries the recorded work allocates stay the graph's (a tensor allocated between replays
// does not share them); a host wait while recording fails the recording and leaves the stream
// usable. On a GPU these are CUDA graphs; on the emulated layer (tests/emulated_cuda) a recording
// holds the launchers' closures and a replay runs them.
#include <gtest/gtest.h>

#include "cuda_backend_fixture.h"
#include "myriad/core/error.h"
#include "myriad/cuda/stream_graph.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/matmul.h"
#include "myriad/ops/placement.h"

namespace myriad::testing {
namespace {

class StreamGraphTest : public CudaBackendTest {};

// out = gelu(x) · w on the CPU.
Tensor reference_of(const Tensor& x, const Tensor& w) {
  Tensor h = Tensor::empty(x.shape()), out = Tensor::empty({x.size(0), w.size(1)});
  gelu_forward(GeluArgs{}, x, h);
  matmul_forward(MatmulArgs{}, h, w, out);
  return out;
}

TEST_F(StreamGraphTest, ReplaysComputeTheOpsOnEachNewInput) {
  const Tensor w_host = random({32, 24}, 1);
  const Tensor w = on_device(w_host);
  Tensor x = backend_->empty({16, 32}), out = backend_->empty({16, 24});
  const ops::Placement placement{backend_.get()};
  auto work = [&] {
    Tensor h = placement.empty({16, 32});  // a temporary: from the graph's pool
    gelu_forward(GeluArgs{}, x, h);
    matmul_forward(MatmulArgs{}, h, w, out);
  };
  cuda::PooledStreamGraph graph(*context_);
  EXPECT_FALSE(graph.recorded());
  EXPECT_THROW(graph.replay(), Error);
  copy(on_device(random({16, 32}, 2)), x);
  work();  // as usual first
  graph.run_in_pool(work);
  graph.record(work);
  EXPECT_TRUE(graph.recorded());
  EXPECT_GE(graph.launches(), 2u);
  EXPECT_THROW(graph.record(work), Error) << "one recording per graph";
  for (std::uint64_t round = 0; round < 3; ++round) {
    const Tensor x_host = random({16, 32}, 10 + round);
    copy(on_device(x_host), x);
    // A tensor allocated and written between replays, alive across the next one: it must not be
    // one of the graph's temporaries.
    Tensor bystander = placement.empty({16, 32});
    copy(x, bystander);
    graph.replay();
    expect_close(out, reference_of(x_host, w_host), 1e-5, "replayed gelu · w");
    expect_close(bystander, x_host, 0.0, "a tensor allocated between replays");
  }
}

TEST_F(StreamGraphTest, AHostWaitWhileRecordingFailsTheRecordingAndLeavesTheStreamUsable) {
  Tensor x = on_device(random({8, 8}, 3)), h = backend_->empty({8, 8});
  cuda::PooledStreamGraph graph(*context_);
  try {
    graph.record([&] {
      gelu_forward(GeluArgs{}, x, h);
      (void)backend_->copy_to_host(h);  // the host waits for the stream: capture forbids it
    });
    ADD_FAILURE() << "a host wait was recorded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA error"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(graph.recorded());
  EXPECT_FALSE(cuda::is_capturing(context_->stream()));
  const Tensor x_host = random({8, 8}, 4);
  copy(on_device(x_host), x);
  gelu_forward(GeluArgs{}, x, h);  // eager again
  Tensor want = Tensor::empty({8, 8});
  gelu_forward(GeluArgs{}, x_host, want);
  expect_close(h, want, 1e-5, "gelu after a failed recording");
}

}  // namespace
}  // namespace myriad::testing
