// Tensor views, copies, conversions and bounds checks.
#include <gtest/gtest.h>

#include "myriad/core/tensor.h"
#include "reference.h"

namespace myriad {
namespace {

Tensor iota(const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

TEST(Tensor, ContiguousStridesAndNumel) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.strides(), (Strides{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw_data()) % kHostAlignment, 0u);
}

TEST(Tensor, TransposeIsAViewAndContiguousCopies) {
  Tensor t = iota({2, 3});
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.storage(), t.storage());
  EXPECT_EQ(tt.get({2, 1}), 5.0);
  Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), t.storage());
  std::vector<double> expected = {0, 3, 1, 4, 2, 5};
  EXPECT_EQ(testing::to_f64(c), expected);
}

TEST(Tensor, SliceSelectPermuteShareStorage) {
  Tensor t = iota({2, 3, 4});
  Tensor s = t.slice(2, 1, 3);  // (2, 3, 2)
  EXPECT_EQ(s.get({1, 2, 0}), 1 * 12 + 2 * 4 + 1);
  Tensor sel = t.select(1, 2);  // (2, 4)
  EXPECT_EQ(sel.shape(), (Shape{2, 4}));
  EXPECT_EQ(sel.get({1, 3}), 12 + 8 + 3);
  Tensor p = t.permute({2, 0, 1});  // (4, 2, 3)
  EXPECT_EQ(p.get({3, 1, 2}), t.get({1, 2, 3}));
  sel.set({0, 0}, -1.0);
  EXPECT_EQ(t.get({0, 2, 0}), -1.0);
}

TEST(Tensor, ViewInfersAndRejects) {
  Tensor t = iota({2, 3, 4});
  EXPECT_EQ(t.view({6, -1}).shape(), (Shape{6, 4}));
  EXPECT_THROW(t.view({5, -1}), Error);
  EXPECT_THROW(t.transpose(0, 1).view({24}), Error);
  EXPECT_EQ(t.transpose(0, 1).reshape({24}).numel(), 24);
}

TEST(Tensor, OutOfRangeViewsThrowWithShape) {
  Tensor t = iota({2, 3});
  try {
    t.slice(1, 1, 5);
    FAIL() << "slice out of range did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32[2, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.select(0, 2), Error);
  EXPECT_THROW(t.get({0, 3}), Error);
  EXPECT_THROW(Tensor::from_storage(t.storage(), {7}, {1}, 0, DType::f32), Error);
  EXPECT_THROW(t.data<std::int32_t>(), Error);
}

TEST(Tensor, DtypeConversionRoundTrips) {
  Tensor t = iota({3, 5});
  for (DType d : {DType::bf16, DType::f16, DType::i32, DType::i64}) {
    Tensor back = t.to(d).to(DType::f32);  // small integers are exact in every type
    EXPECT_EQ(testing::to_f64(back), testing::to_f64(t)) << dtype_name(d);
  }
}

TEST(Tensor, CopyFromStridedConvertsAndChecksShape) {
  Tensor src = iota({4, 3}).transpose(0, 1);  // (3, 4) strided
  Tensor dst = Tensor::empty({3, 4}, DType::bf16);
  dst.copy_from(src);
  EXPECT_EQ(testing::to_f64(dst), testing::to_f64(src));
  Tensor wrong = Tensor::empty({4, 3});
  EXPECT_THROW(wrong.copy_from(src), Error);
}

TEST(Tensor, FillAndFull) {
  Tensor t = Tensor::full({3, 2}, 2.5);
  for (double v : testing::to_f64(t)) EXPECT_EQ(v, 2.5);
  Tensor strided = t.transpose(0, 1);
  strided.fill(-1.0);
  for (double v : testing::to_f64(t)) EXPECT_EQ(v, -1.0);
  Tensor ints = Tensor::full({4}, 7, DType::i64);
  EXPECT_EQ(ints.data<std::int64_t>()[3], 7);
}

TEST(Tensor, DeviceTensorsNeedTheCudaBackend) { EXPECT_THROW(Tensor::empty({2}, DType::f32, Device::cuda(0)), Error); }

}  // namespace
}  // namespace myriad
