// TensorBoardWriter: CRC-32C, protobuf varints and fields, TFRecord framing.
#include "myriad/train/metrics/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "myriad/core/error.h"

namespace myriad::train {

namespace {

std::array<std::uint32_t, 256> crc32c_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
    table[i] = c;
  }
  return table;
}

void put_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

template <typename T>
void put_fixed(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian host (x86-64, aarch64)
  out.append(bytes, sizeof(T));
}

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_varint(out, static_cast<std::uint64_t>(field) << 3 | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time, std::int64_t step) {
  std::string event;
  put_varint(event, 1 << 3 | 1);  // wall_time: fixed64
  put_fixed(event, wall_time);
  put_varint(event, 2 << 3 | 0);  // step: varint
  put_varint(event, static_cast<std::uint64_t>(step));
  return event;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size) {
  static const std::array<std::uint32_t, 256> table = crc32c_table();  // constant, computed once
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t crc = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(const void* data, std::size_t size) {
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int flush_every, double flush_seconds)
    : flush_every_(flush_every), flush_seconds_(flush_seconds) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MYRIAD_CHECK(!ec, "tensorboard: cannot create " << dir << ": " << ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ =
      (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<long long>(now_seconds())) +
                                     "." + host + "." + std::to_string(::getpid())))
          .string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  MYRIAD_CHECK(out_, "tensorboard: cannot write " << path_);
  std::string first = event_header(now_seconds(), 0);
  put_bytes_field(first, 3, "brain.Event:2");  // file_version
  write_record(first);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (out_.is_open()) out_.flush();
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string header;
  put_fixed(header, static_cast<std::uint64_t>(data.size()));
  const std::uint32_t length_crc = masked_crc32c(header.data(), header.size());
  put_fixed(header, length_crc);
  out_.write(header.data(), static_cast<std::streamsize>(header.size()));
  out_.write(data.data(), static_cast<std::streamsize>(data.size()));
  std::string footer;
  put_fixed(footer, masked_crc32c(data.data(), data.size()));
  out_.write(footer.data(), static_cast<std::streamsize>(footer.size()));
}

void TensorBoardWriter::add_scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes_field(v, 1, tag);
    put_varint(v, 2 << 3 | 5);  // simple_value: fixed32 float
    put_fixed(v, static_cast<float>(value));
    put_bytes_field(summary, 1, v);
  }
  std::string event = event_header(now_seconds(), step);
  put_bytes_field(event, 5, summary);
  write_record(event);
  const double since_flush = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_flush_).count();
  if (!summaries_written_ || ++pending_ >= flush_every_ || since_flush >= flush_seconds_) flush();
  summaries_written_ = true;
}

void TensorBoardWriter::flush() {
  out_.flush();
  MYRIAD_CHECK(out_, "tensorboard: write to " << path_ << " failed (disk full?)");
  pending_ = 0;
  last_flush_ = std::chrono::steady_clock::now();
}

}  // namespace myriad::train
