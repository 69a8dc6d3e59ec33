// myriad::Error carries rank, file and line; device and dtype parsing name what is allowed.
#include <gtest/gtest.h>

#include <cstdlib>

#include "myriad/core/device.h"
#include "myriad/core/dtype.h"
#include "myriad/core/error.h"
#include "myriad/core/logging.h"

namespace myriad {
namespace {

TEST(Error, MessageCarriesRankFileAndLine) {
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  try {
    MYRIAD_CHECK(1 + 1 == 3, "arithmetic is broken: " << 42);
    FAIL() << "check did not throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(e.rank(), 3);
    EXPECT_NE(what.find("[rank 3]"), std::string::npos) << what;
    EXPECT_NE(what.find("test_error.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("arithmetic is broken: 42"), std::string::npos) << what;
    EXPECT_GT(e.line(), 0);
  }
  unsetenv("OMPI_COMM_WORLD_RANK");
}

TEST(Error, ExcerptBoundsQuotedInput) {
  EXPECT_EQ(excerpt("fast"), "fast");
  EXPECT_EQ(excerpt(std::string(200, 'a')), std::string(200, 'a'));
  const std::string huge(20u << 20, 'x');
  const std::string quoted = excerpt(huge);
  EXPECT_EQ(quoted, std::string(200, 'x') + "... (20971520 bytes)");
  // Never inside a UTF-8 character: "é" is two bytes, the cut backs off to its first.
  const std::string accents = std::string(199, 'a') + "\xc3\xa9" + std::string(10, 'b');
  EXPECT_EQ(excerpt(accents), std::string(199, 'a') + "... (211 bytes)");
}

TEST(Device, ParsesAndRejects) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::parse("cuda:3").str(), "cuda:3");
  EXPECT_THROW(Device::parse("cuda:-1"), Error);
  EXPECT_THROW(Device::parse("tpu"), Error);
}

TEST(DType, SizesNamesAndParse) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(parse_dtype("f16"), DType::f16);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(parse_dtype(dtype_name(DType::f64)), DType::f64);
  try {
    parse_dtype("f8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allowed: f32, bf16"), std::string::npos);
  }
}

TEST(Logging, RankLoggerRejectsUnknownLevel) {
  auto logger = make_rank_logger(5, "warn");
  EXPECT_EQ(logger->level(), spdlog::level::warn);
  EXPECT_THROW(make_rank_logger(0, "loud"), Error);
}

}  // namespace
}  // namespace myriad
