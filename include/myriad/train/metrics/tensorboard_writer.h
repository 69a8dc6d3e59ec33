// TensorBoardWriter — scalar summaries in TensorBoard's event-file format, written by myriad.
//
// A file `events.out.tfevents.<unix time>.<host>` of TFRecords: each record is
//   uint64 length | uint32 masked_crc32c(length) | bytes data | uint32 masked_crc32c(data)
// (little-endian; masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8, CRC-32C Castagnoli), and
// each data is a serialized tensorflow.Event protobuf: wall_time (field 1, double), step
// (field 2, int64) and either file_version "brain.Event:2" (field 3, the first record) or a
// Summary (field 5) of Values {tag (1, string), simple_value (2, float)}. Encoded by hand: no
// protobuf or TensorFlow dependency. Records reach the file (so a live TensorBoard sees them) at
// the first summary, then every `flush_every` summaries or when `flush_seconds` have passed since
// the last flush (checked at each write), and on close.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace myriad::train {

std::uint32_t crc32c(const void* data, std::size_t size);
std::uint32_t masked_crc32c(const void* data, std::size_t size);

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it; throws naming the path when it cannot.
  explicit TensorBoardWriter(const std::string& dir, int flush_every = 20, double flush_seconds = 5.0);
  ~TensorBoardWriter();

  void add_scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::ofstream out_;
  int flush_every_, pending_ = 0;
  double flush_seconds_;
  bool summaries_written_ = false;
  std::chrono::steady_clock::time_point last_flush_;
};

}  // namespace myriad::train
