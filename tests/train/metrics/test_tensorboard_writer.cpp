// TensorBoardWriter: CRC-32C known answers, and an event file decoded back record by record with
// an independent reader (TFRecord framing with both checksums, the Event and Summary protobuf
// fields) giving the tags, values and steps that were written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "myriad/train/metrics/tensorboard_writer.h"

namespace fs = std::filesystem;

namespace myriad::train {
namespace {

TEST(Crc32c, KnownAnswers) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  std::string ones(32, '\xff');
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  const std::uint32_t crc = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xA282EAD8u);
}

// Minimal protobuf reading for the test.
std::uint64_t varint(const std::string& s, std::size_t& at) {
  std::uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto byte = static_cast<unsigned char>(s.at(at++));
    v |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
    if (!(byte & 0x80)) return v;
  }
}

struct Event {
  double wall_time = 0;
  std::int64_t step = -1;
  std::string file_version;
  std::map<std::string, float> scalars;
};

Event decode_event(const std::string& s) {
  Event e;
  for (std::size_t at = 0; at < s.size();) {
    const std::uint64_t key = varint(s, at);
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (field == 1 && wire == 1) {
      std::memcpy(&e.wall_time, s.data() + at, 8);
      at += 8;
    } else if (field == 2 && wire == 0) {
      e.step = static_cast<std::int64_t>(varint(s, at));
    } else if (wire == 2) {
      const std::size_t n = varint(s, at);
      const std::string body = s.substr(at, n);
      at += n;
      if (field == 3) e.file_version = body;
      if (field == 5) {  // Summary: repeated Value (field 1)
        for (std::size_t v = 0; v < body.size();) {
          EXPECT_EQ(varint(body, v), (1u << 3) | 2u);
          const std::size_t len = varint(body, v);
          const std::string value = body.substr(v, len);
          v += len;
          std::size_t w = 0;
          EXPECT_EQ(varint(value, w), (1u << 3) | 2u);
          const std::size_t tag_len = varint(value, w);
          const std::string tag = value.substr(w, tag_len);
          w += tag_len;
          EXPECT_EQ(varint(value, w), (2u << 3) | 5u);
          float f;
          std::memcpy(&f, value.data() + w, 4);
          e.scalars[tag] = f;
        }
      }
    } else {
      ADD_FAILURE() << "unexpected field " << field << " wire type " << wire;
      break;
    }
  }
  return e;
}

std::vector<Event> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Event> events;
  for (std::size_t at = 0; at < bytes.size();) {
    std::uint64_t length;
    std::uint32_t length_crc, data_crc;
    std::memcpy(&length, bytes.data() + at, 8);
    std::memcpy(&length_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(length_crc, masked_crc32c(bytes.data() + at, 8));
    const std::string data = bytes.substr(at + 12, length);
    std::memcpy(&data_crc, bytes.data() + at + 12 + length, 4);
    EXPECT_EQ(data_crc, masked_crc32c(data.data(), data.size()));
    events.push_back(decode_event(data));
    at += 12 + length + 4;
  }
  return events;
}

TEST(TensorBoardWriter, EventFileDecodesToTheWrittenScalars) {
  const fs::path dir = fs::temp_directory_path() / ("myriad_tb_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::string path;
  {
    TensorBoardWriter writer(dir.string(), 1000);
    path = writer.path();
    writer.add_scalars(1, {{"train/loss", 5.25}, {"perf/mfu", 0.125}});
    writer.add_scalars(300, {{"train/loss", 4.5}});
    writer.flush();
  }
  EXPECT_EQ(fs::path(path).parent_path(), dir);
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  std::vector<Event> events = read_events(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.7e9);
  EXPECT_EQ(events[1].step, 1);
  EXPECT_FLOAT_EQ(events[1].scalars.at("train/loss"), 5.25f);
  EXPECT_FLOAT_EQ(events[1].scalars.at("perf/mfu"), 0.125f);
  EXPECT_EQ(events[2].step, 300);
  EXPECT_FLOAT_EQ(events[2].scalars.at("train/loss"), 4.5f);
  fs::remove_all(dir);
}

TEST(TensorBoardWriter, ALiveReaderSeesTheFirstSummaryAndThenOneEveryFlushInterval) {
  // While the writer is open: the first summary is on disk at once; later ones wait for
  // flush_every summaries or flush_seconds since the last flush, whichever comes first.
  const fs::path dir = fs::temp_directory_path() / ("myriad_tb_live_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  {
    TensorBoardWriter writer(dir.string(), 1000, 3.0);  // seconds: past a loaded host's pauses
    writer.add_scalars(1, {{"train/loss", 5.0}});
    ASSERT_EQ(read_events(writer.path()).size(), 2u);  // header + step 1
    writer.add_scalars(2, {{"train/loss", 4.9}});
    EXPECT_EQ(read_events(writer.path()).size(), 2u);  // buffered: 1 of 1000, well within 3 s
    std::this_thread::sleep_for(std::chrono::milliseconds(3100));
    writer.add_scalars(3, {{"train/loss", 4.8}});
    std::vector<Event> events = read_events(writer.path());
    ASSERT_EQ(events.size(), 4u);  // the time since the last flush passed 3 s
    EXPECT_EQ(events[3].step, 3);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace myriad::train
