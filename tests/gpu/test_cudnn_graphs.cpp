// Every cuDNN attention graph the CUDA backend can ask for builds on this GPU (cuda/
// cudnn_attention.h): bf16 and f16, causal or not, multi-head and grouped-query heads, head dims
// 64 and 128, forward and backward — the frontend validates each graph and its heuristics find an
// engine; the workspace each needs is printed. Skips without a GPU, and names the reason where
// this build or GPU has no cuDNN attention. (The values are checked against the CPU op by
// CudaBackendTest.SixteenBitAttentionRunsCudnnWhereItAppliesElseTheTensorCoreKernels.)
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>

#include "gpu_test_support.h"
#include "myriad/cuda/cudnn_attention.h"
#include "myriad/cuda/device_context.h"

namespace myriad::cuda {
namespace {

TEST(CudnnAttentionGraphs, EveryShapeTheBackendSendsBuilds) {
  MYRIAD_REQUIRE_GPU();
  DeviceContext context(0);
  std::string why_not;
  const std::shared_ptr<CudnnAttention> cudnn = make_cudnn_attention(context.stream(), why_not);
  if (cudnn == nullptr) GTEST_SKIP() << "no cuDNN attention here: " << why_not;
  for (const bool f16 : {false, true}) {
    for (const bool causal : {true, false}) {
      for (const std::int64_t kv_heads : {8, 2, 1}) {
        for (const std::int64_t head_dim : {64, 128}) {
          const CudnnAttentionShape shape{.batch = 2,
                                          .q_heads = 8,
                                          .kv_heads = kv_heads,
                                          .seq = 1024,
                                          .head_dim = head_dim,
                                          .scale = static_cast<float>(1.0 / std::sqrt(double(head_dim))),
                                          .causal = causal,
                                          .f16 = f16};
          for (const bool backward : {false, true}) {
            std::int64_t workspace = 0;
            std::string reason;
            EXPECT_TRUE(cudnn_attention_prepare(*cudnn, shape, backward, workspace, reason)) << reason;
            std::cout << (f16 ? "f16" : "bf16") << (causal ? " causal" : " full") << " Hkv " << kv_heads << " D "
                      << head_dim << (backward ? " backward" : " forward") << ": workspace " << workspace << " B\n";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace myriad::cuda
