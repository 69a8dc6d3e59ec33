// Device checks at every op's dispatch point: a tensor on another device than the rest is an
// error naming the op, the argument and both devices; tensors all on a device whose memory no
// backend made name the op, the tensor and the device. The "device" tensors here are host memory labelled
// cuda:0 — dispatch must reject them before touching their data.
#include <gtest/gtest.h>

#include "myriad/ops/activations.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/bias_add.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/matmul.h"
#include "myriad/ops/norms.h"
#include "myriad/ops/softmax.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;

// A tensor of `shape` / `dtype` whose storage claims to live on cuda:0.
Tensor labelled_cuda(const Shape& shape, DType dtype = DType::f32) {
  Tensor host = Tensor::zeros(shape, dtype);
  auto storage = Storage::wrap(host.raw_data(), host.nbytes(), Device::cuda(0), [keep = host.storage()](void*) {});
  return Tensor::from_storage(storage, shape, contiguous_strides(shape), 0, dtype);
}

TEST(OpChecks, MixedDevicesNameOpArgumentAndDevices) {
  Tensor a = Tensor::zeros({4, 3}), b_gpu = labelled_cuda({3, 2}), out = Tensor::zeros({4, 2});
  expect_error_naming([&] { matmul_forward(MatmulArgs{}, a, b_gpu, out); }, {"matmul_forward", "'b'", "cuda:0", "cpu"});

  Tensor x = Tensor::zeros({2, 8}), w_gpu = labelled_cuda({8}), bias = Tensor::zeros({8});
  Tensor y = Tensor::zeros({2, 8}), mean = Tensor::zeros({2}), rstd = Tensor::zeros({2});
  expect_error_naming([&] { layernorm_forward(LayernormArgs{}, x, w_gpu, bias, y, mean, rstd); },
                      {"layernorm_forward", "cuda:0"});
  Tensor y_gpu = labelled_cuda({2, 8});
  expect_error_naming([&] { gelu_forward(GeluArgs{}, x, y_gpu); }, {"gelu_forward", "cuda:0"});
  expect_error_naming([&] { softmax_forward(SoftmaxArgs{}, x, y_gpu); }, {"softmax_forward", "cuda:0"});
  expect_error_naming([&] { bias_add_forward(BiasAddArgs{}, x, labelled_cuda({8}), y); },
                      {"bias_add_forward", "cuda:0"});

  Tensor q = Tensor::zeros({1, 2, 4, 8}), k_gpu = labelled_cuda({1, 2, 4, 8}), v = Tensor::zeros({1, 2, 4, 8});
  Tensor att = Tensor::zeros({1, 2, 4, 8}), lse = Tensor::zeros({1, 2, 4});
  expect_error_naming([&] { attention_forward(AttentionArgs{}, q, k_gpu, v, att, lse); },
                      {"attention_forward", "cuda:0"});

  Tensor ids_gpu = labelled_cuda({2, 3}, DType::i32), table = Tensor::zeros({5, 4}), emb = Tensor::zeros({2, 3, 4});
  expect_error_naming([&] { embedding_forward(EmbeddingArgs{}, ids_gpu, table, emb); },
                      {"embedding_forward", "cuda:0"});

  Tensor logits = Tensor::zeros({2, 5}), targets_gpu = labelled_cuda({2}, DType::i32);
  Tensor losses = Tensor::zeros({2}), lse2 = Tensor::zeros({2});
  expect_error_naming([&] { cross_entropy_forward(CrossEntropyArgs{}, logits, targets_gpu, losses, lse2); },
                      {"cross_entropy_forward", "cuda:0"});
}

TEST(OpChecks, AllOnADeviceWithoutImplementationNamesOpAndDevice) {
  // Ops a backend provides: device memory that no backend made is refused naming the tensor.
  Tensor a = labelled_cuda({4, 3}), b = labelled_cuda({3, 2}), out = labelled_cuda({4, 2});
  expect_error_naming([&] { matmul_forward(MatmulArgs{}, a, b, out); },
                      {"matmul_forward", "'a'", "cuda:0", "no compute backend made"});
  Tensor x = labelled_cuda({2, 8}), y = labelled_cuda({2, 8});
  expect_error_naming([&] { gelu_forward(GeluArgs{}, x, y); }, {"gelu_forward", "cuda:0", "no compute backend"});
  expect_error_naming([&] { softmax_forward(SoftmaxArgs{}, x, y); },
                      {"softmax_forward", "cuda:0", "no compute backend"});
  // (An op the backend of the tensors lacks names op and device: CudaBackendTest.OpsNoBackendProvides….)
}

}  // namespace
}  // namespace myriad
