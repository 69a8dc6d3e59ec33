// The overlapped rings of sequence and context parallelism, and the pipeline's sends, on a device
// group, with the CUDA layer and NCCL emulated (myriad_emulated_mpi_tests only: it counts the NCCL groups launched). A
// device communicator holds send / recv back until they are waited on, and launches them ordered after the compute
// stream's work issued by then — so a ring must start each transfer before it issues the GEMM block the transfer is to
// overlap, or the transfer runs after that GEMM. Checked by counting the groups launched when each block is handed out;
// the results equal the host rings' bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "emulated_streams.h"
#include "mpi_test_support.h"
#include "myriad/core/local_device.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/cuda_backend.h"
#include "myriad/cuda/device_context.h"
#include "myriad/distributed/nccl_communicator.h"
#include "myriad/ops/elementwise.h"
#include "myriad/parallel/context_parallel_group.h"
#include "myriad/parallel/pipeline_executor.h"
#include "myriad/parallel/tensor_parallel_regions.h"

namespace myriad {
namespace {

class DeviceTensorParallelRings : public ::testing::Test {
 protected:
  void SetUp() override {
    host_ = testing::make_world("host");
    const int device = select_local_device(local_rank_from_environment(), cuda::cuda_device_count_or_zero());
    context_ = std::make_unique<cuda::DeviceContext>(device);
    backend_ = std::make_unique<cuda::CudaBackend>(*context_);
    nccl_ = std::make_unique<distributed::NcclCommunicator>(*host_, *context_);
  }
  void TearDown() override {
    nccl_.reset();
    backend_.reset();
    context_.reset();
  }
  Tensor random(const Shape& shape, std::uint64_t stream) const {
    Tensor t = Tensor::empty(shape);
    fill_uniform(t, -1.0f, 1.0f, 2031, stream);
    return t;
  }
  static bool same_bits(const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() && std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>());
  }

  std::unique_ptr<distributed::MpiCommunicator> host_;
  std::unique_ptr<cuda::DeviceContext> context_;
  std::unique_ptr<cuda::CudaBackend> backend_;
  std::unique_ptr<distributed::NcclCommunicator> nccl_;
  const nn::TransformerConfig model_ = nn::TransformerConfig::gpt2(64, 1, 2, 8, 16);
  static constexpr std::int64_t kRows = 4, kWidth = 8;
};

// The gather: before the k-th block is consumed, the transfer of the next one is launched (k + 1
// groups; the last block overlaps nothing).
TEST_F(DeviceTensorParallelRings, GatherStartsEachTransferBeforeItsBlockIsConsumed) {
  const int parts = host_->size(), rank = host_->rank();
  const Tensor mine = random({1, kRows, kWidth}, static_cast<std::uint64_t>(rank));
  parallel::TensorParallelRegions on_host(*host_, true, model_), on_device(*nccl_, true, model_);
  Tensor expected = Tensor::empty({parts, kRows, kWidth});
  on_host.gather_rows_overlapped(mine, expected, [](std::int64_t, std::int64_t) {});
  Tensor full = backend_->copy_from_host(Tensor::zeros({parts, kRows, kWidth}));
  const std::uint64_t before = emulated::point_to_point_groups_launched();
  int consumed = 0;
  on_device.gather_rows_overlapped(backend_->copy_from_host(mine), full, [&](std::int64_t, std::int64_t) {
    EXPECT_EQ(emulated::point_to_point_groups_launched() - before,
              static_cast<std::uint64_t>(std::min(consumed + 1, parts - 1)))
        << "block " << consumed << " on rank " << rank;
    ++consumed;
  });
  nccl_->complete_streamed();
  EXPECT_EQ(consumed, parts);
  EXPECT_TRUE(same_bits(backend_->copy_to_host(full), expected));
}

// The reduce-scatter: the s-th block is produced while the sum of the (s - 1)-th is in transfer
// (s groups launched; the first block has nothing before it).
TEST_F(DeviceTensorParallelRings, ReduceScatterStartsEachTransferBeforeTheNextBlockIsProduced) {
  const int parts = host_->size(), rank = host_->rank();
  const Tensor partial = random({parts * kRows, kWidth}, 10 + static_cast<std::uint64_t>(rank));
  parallel::TensorParallelRegions on_host(*host_, true, model_), on_device(*nccl_, true, model_);
  Tensor host_full = Tensor::empty({parts, kRows, kWidth}), expected = Tensor::empty({1, kRows, kWidth});
  on_host.reduce_to_rows_overlapped(host_full, expected, [&](std::int64_t begin, std::int64_t end, Tensor& out) {
    copy(partial.slice(0, begin, end), out);
  });
  const Tensor device_partial = backend_->copy_from_host(partial);
  Tensor full = backend_->copy_from_host(Tensor::zeros({parts, kRows, kWidth}));
  Tensor rows = backend_->copy_from_host(Tensor::zeros({1, kRows, kWidth}));
  const std::uint64_t before = emulated::point_to_point_groups_launched();
  int produced = 0;
  on_device.reduce_to_rows_overlapped(full, rows, [&](std::int64_t begin, std::int64_t end, Tensor& out) {
    EXPECT_EQ(emulated::point_to_point_groups_launched() - before, static_cast<std::uint64_t>(produced))
        << "block " << produced << " on rank " << rank;
    copy(device_partial.slice(0, begin, end), out);
    ++produced;
  });
  nccl_->complete_streamed();
  EXPECT_EQ(produced, parts);
  EXPECT_TRUE(same_bits(backend_->copy_to_host(rows), expected));
}

// Context parallelism's ring shift is under way when it returns (the attention kernels on the
// blocks held run next).
TEST_F(DeviceTensorParallelRings, ContextParallelShiftIsUnderWayWhenItReturns) {
  const int parts = host_->size(), rank = host_->rank();
  parallel::ContextParallelGroup ring(*nccl_);
  const Tensor mine = random({kRows, kWidth}, 30 + static_cast<std::uint64_t>(rank));
  const Tensor theirs = random({kRows, kWidth}, 30 + static_cast<std::uint64_t>((rank - 1 + parts) % parts));
  Tensor arriving = backend_->copy_from_host(Tensor::zeros({kRows, kWidth}));
  const std::uint64_t before = emulated::point_to_point_groups_launched();
  std::unique_ptr<nn::RingTransfer> shift = ring.ring_shift(backend_->copy_from_host(mine), arriving, 0);
  EXPECT_EQ(emulated::point_to_point_groups_launched() - before, 1u);
  shift->wait();
  nccl_->complete_streamed();
  EXPECT_TRUE(same_bits(backend_->copy_to_host(arriving), theirs));
}

// A pipeline stage of one chunk whose buffers are device tensors and whose forward records how many
// point-to-point groups had been launched when it was called (its compute does nothing).
class LaunchRecordingStage final : public nn::PipelineStage {
 public:
  explicit LaunchRecordingStage(cuda::CudaBackend& backend) : backend_(backend) {}
  int num_chunks() const override { return 1; }
  void prepare(std::int64_t, std::int64_t, Recompute, int slots) override {
    while (static_cast<int>(buffers_.size()) < slots) buffers_.push_back(backend_.copy_from_host(Tensor::zeros({64})));
  }
  Recompute buffer_mode() const override { return Recompute::none; }
  Tensor chunk_input(int, int slot) override { return buffers_.at(static_cast<std::size_t>(slot)); }
  Tensor chunk_output(int, int slot) override { return buffers_.at(static_cast<std::size_t>(slot)); }
  Tensor chunk_grad(int, int slot) override { return buffers_.at(static_cast<std::size_t>(slot)); }
  std::int64_t forward_chunk(int, int, const Tensor&, const Tensor&) override {
    launched_at_forward.push_back(emulated::point_to_point_groups_launched());
    return 0;
  }
  double take_loss_sum() override { return 0.0; }
  void clear_losses() override {}
  void backward_chunk(int, int, const Tensor&, const Tensor&, float) override {}

  std::vector<std::uint64_t> launched_at_forward;

 private:
  cuda::CudaBackend& backend_;
  std::vector<Tensor> buffers_;
};

// Stage 0's warm-up forwards of 1F1B (p = 2) follow its activation sends with no receive between:
// each send is launched before the next forward runs, not held until the stage's first receive.
TEST_F(DeviceTensorParallelRings, PipelineSendsAreLaunchedBeforeTheNextForward) {
  if (host_->size() != 2) GTEST_SKIP() << "two pipeline stages: np2";
  LaunchRecordingStage stage(*backend_);
  parallel::PipelineExecutor executor(stage, *nccl_, PipelineSchedule::one_f_one_b, 4, 1);
  const std::vector<Tensor> ids(4, Tensor::zeros({1, 8}, DType::i32)), targets = ids;
  const std::uint64_t before = emulated::point_to_point_groups_launched();
  executor.run(ids, targets, 1.0f, Recompute::none);
  nccl_->complete_streamed();
  ASSERT_EQ(stage.launched_at_forward.size(), 4u);
  if (host_->rank() == 0) {  // forward k (k >= 1) comes after k sends, each launched by then
    EXPECT_GE(stage.launched_at_forward[1] - before, 1u);
  }
}

}  // namespace
}  // namespace myriad
