// AsyncCheckpointWriter: a background write produces the same checkpoint as a synchronous one
// (loaded back bit for bit), the snapshot is independent of later changes to the live tensors,
// only one write is in flight, and a failing write is reported by the next wait().
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "myriad/core/philox.h"
#include "myriad/train/async_checkpoint.h"
#include "test_helpers.h"

namespace fs = std::filesystem;

namespace myriad::train {
namespace {

CheckpointContents contents(std::int64_t step, Tensor a, Tensor b) {
  CheckpointContents c;
  c.step = step;
  c.config_yaml = "config";
  c.tensors.push_back({"a", std::move(a)});
  c.tensors.push_back({"b", std::move(b)});
  return c;
}

TEST(AsyncCheckpoint, BackgroundWriteLoadsBackTheSnapshot) {
  const fs::path dir = fs::temp_directory_path() / ("myriad_async_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Tensor live = Tensor::empty({1000});
  fill_uniform(live, -1, 1, 5, 0);
  Tensor other = Tensor::full({17}, 2.5);
  const Tensor expected = live.clone();
  AsyncCheckpointWriter writer;
  const std::string path = writer.submit(contents(7, live.clone(), other.clone()), dir.string(), 2);
  live.fill(0.0);  // training goes on: the snapshot must not see it
  EXPECT_EQ(path, checkpoint_path(dir.string(), 7));
  EXPECT_EQ(writer.wait(), path);
  EXPECT_FALSE(writer.busy());
  EXPECT_EQ(latest_checkpoint(dir.string()), path);
  CheckpointContents back = contents(0, Tensor::zeros({1000}), Tensor::zeros({17}));
  load_checkpoint(path, back);
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(std::memcmp(back.tensors[0].tensor.raw_data(), expected.raw_data(), expected.nbytes()), 0);
  EXPECT_EQ(back.tensors[1].tensor.data<float>()[16], 2.5f);
  // Two submits in a row: the second waits for the first; retention keeps the newest 2.
  writer.submit(contents(8, expected.clone(), other.clone()), dir.string(), 2);
  writer.submit(contents(9, expected.clone(), other.clone()), dir.string(), 2);
  writer.wait();
  EXPECT_EQ(latest_checkpoint(dir.string()), checkpoint_path(dir.string(), 9));
  EXPECT_FALSE(fs::exists(checkpoint_path(dir.string(), 7)));
  fs::remove_all(dir);
}

TEST(AsyncCheckpoint, FailureIsReportedByTheNextWait) {
  const fs::path blocker = fs::temp_directory_path() / ("myriad_async_blocker_" + std::to_string(::getpid()));
  std::ofstream(blocker) << "a file where the checkpoint directory should be";
  AsyncCheckpointWriter writer;
  writer.submit(contents(3, Tensor::zeros({4}), Tensor::zeros({4})), (blocker / "sub").string(), 1);
  EXPECT_THROW(writer.wait(), std::exception);
  EXPECT_EQ(writer.wait(), "");  // reported once, then the writer is usable again
  fs::remove(blocker);
}

}  // namespace
}  // namespace myriad::train
