// AsyncCheckpointWriter: a background write produces the same checkpoint as a synchronous one
// (loaded back bit for bit), the snapshot is independent of later changes to the live tensors,
// only one write is in flight, and a failing write is reported by the next wait().
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "myriad/core/philox.h"
#include "myriad/train/checkpoint/async_checkpoint.h"
#include "myriad/train/checkpoint/checkpoint_reader.h"
#include "test_helpers.h"

namespace fs = std::filesystem;

namespace myriad::train {
namespace {

CheckpointPiece whole(const std::string& name, const Tensor& t) { return {name, t.shape(), {{0, t.size(0)}}, t}; }

// A background save of tensors a and b at `step`.
void submit(AsyncCheckpointWriter& writer, const std::string& dir, std::int64_t step, const Tensor& a,
            const Tensor& b) {
  CheckpointHeader header;
  header.step = step;
  header.config_yaml = "config";
  writer.submit(checkpoint_path(dir, step), [=] {
    save_checkpoint(dir, header, {whole("a", a), whole("b", b)}, 2, {});
  });
}

TEST(AsyncCheckpoint, BackgroundWriteLoadsBackTheSnapshot) {
  const fs::path dir = fs::temp_directory_path() / ("myriad_async_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Tensor live = Tensor::empty({1000});
  fill_uniform(live, -1, 1, 5, 0);
  Tensor other = Tensor::full({17}, 2.5);
  const Tensor expected = live.clone();
  AsyncCheckpointWriter writer;
  submit(writer, dir.string(), 7, live.clone(), other.clone());
  live.fill(0.0);  // training goes on: the snapshot must not see it
  const std::string path = checkpoint_path(dir.string(), 7);
  EXPECT_EQ(writer.wait(), path);
  EXPECT_FALSE(writer.busy());
  EXPECT_EQ(latest_checkpoint(dir.string()), path);
  CheckpointReader reader(path, "");
  EXPECT_EQ(reader.header().step, 7);
  Tensor a = Tensor::zeros({1000}), b = Tensor::zeros({17});
  reader.read_whole("a", a);
  reader.read_whole("b", b);
  EXPECT_EQ(std::memcmp(a.raw_data(), expected.raw_data(), expected.nbytes()), 0);
  EXPECT_EQ(b.data<float>()[16], 2.5f);
  // Two submits in a row: the second waits for the first; retention keeps the newest 2.
  submit(writer, dir.string(), 8, expected.clone(), other.clone());
  submit(writer, dir.string(), 9, expected.clone(), other.clone());
  writer.wait();
  EXPECT_EQ(latest_checkpoint(dir.string()), checkpoint_path(dir.string(), 9));
  EXPECT_FALSE(fs::exists(checkpoint_path(dir.string(), 7)));
  fs::remove_all(dir);
}

TEST(AsyncCheckpoint, FailureIsReportedByTheNextWait) {
  const fs::path blocker = fs::temp_directory_path() / ("myriad_async_blocker_" + std::to_string(::getpid()));
  std::ofstream(blocker) << "a file where the checkpoint directory should be";
  AsyncCheckpointWriter writer;
  submit(writer, (blocker / "sub").string(), 3, Tensor::zeros({4}), Tensor::zeros({4}));
  EXPECT_THROW(writer.wait(), std::exception);
  EXPECT_EQ(writer.wait(), "");  // reported once, then the writer is usable again
  fs::remove(blocker);
}

}  // namespace
}  // namespace myriad::train
