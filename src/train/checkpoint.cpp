// Checkpoint directories: manifest.json + state.bin, atomic rename, latest pointer, retention.
#include "myriad/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "myriad/core/progress_bar.h"
#include "myriad/data/token_shard.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace myriad::train {

namespace {

std::string step_name(std::int64_t step) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "step_%08lld", static_cast<long long>(step));
  return buffer;
}

void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  MYRIAD_CHECK(out, "checkpoint: cannot write " << path.string());
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  MYRIAD_CHECK(out, "checkpoint: write to " << path.string() << " failed (disk full?)");
  fsync_path(path);
}

}  // namespace

CheckpointContents training_state(std::int64_t step, std::string config_yaml, std::string model_yaml, Tensor values,
                                  Tensor m, Tensor v) {
  CheckpointContents c;
  c.step = step;
  c.config_yaml = std::move(config_yaml);
  c.model_yaml = std::move(model_yaml);
  c.tensors.push_back({kParametersTensor, std::move(values)});
  c.tensors.push_back({kAdamMTensor, std::move(m)});
  c.tensors.push_back({kAdamVTensor, std::move(v)});
  return c;
}

std::string save_checkpoint(const std::string& dir, const CheckpointContents& contents, int keep) {
  fs::create_directories(dir);
  const std::string name = step_name(contents.step);
  const fs::path tmp = fs::path(dir) / (".tmp-" + name);
  const fs::path final_dir = fs::path(dir) / name;
  // Temporary directories left by a save that was killed midway are never complete: remove them.
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory() && entry.path().filename().string().rfind(".tmp-step_", 0) == 0) {
      fs::remove_all(entry.path());
    }
  }
  fs::create_directories(tmp);
  json manifest;
  manifest["format_version"] = kCheckpointFormatVersion;
  manifest["step"] = contents.step;
  manifest["config"] = contents.config_yaml;
  manifest["model"] = contents.model_yaml;
  json tensors = json::array();
  {
    std::ofstream state(tmp / "state.bin", std::ios::binary);
    MYRIAD_CHECK(state, "checkpoint: cannot write " << (tmp / "state.bin").string());
    std::uint64_t offset = 0;
    std::int64_t total_bytes = 0;
    for (const CheckpointTensor& t : contents.tensors) total_bytes += static_cast<std::int64_t>(t.tensor.nbytes());
    ProgressBar bar("saving " + final_dir.string(), total_bytes, true);
    for (const CheckpointTensor& t : contents.tensors) {
      MYRIAD_CHECK(t.tensor.is_contiguous() && t.tensor.dtype() == DType::f32 && t.tensor.device().is_cpu(),
                   "checkpoint: tensor '" << t.name << "' must be a contiguous f32 CPU tensor, is "
                                          << t.tensor.describe());
      const std::size_t bytes = t.tensor.nbytes();
      state.write(static_cast<const char*>(t.tensor.raw_data()), static_cast<std::streamsize>(bytes));
      tensors.push_back({{"name", t.name},
                         {"shape", t.tensor.shape()},
                         {"dtype", "f32"},
                         {"offset", offset},
                         {"bytes", bytes},
                         {"crc32", data::crc32(t.tensor.raw_data(), bytes)}});
      offset += bytes;
      bar.update(static_cast<std::int64_t>(offset));
    }
    bar.finish();
    state.close();
    MYRIAD_CHECK(state, "checkpoint: write to " << (tmp / "state.bin").string() << " failed (disk full?)");
  }
  fsync_path(tmp / "state.bin");
  manifest["tensors"] = tensors;
  write_file(tmp / "manifest.json", manifest.dump(1));
  fsync_path(tmp);
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  fsync_path(dir);
  write_file(fs::path(dir) / ".latest.tmp", name + "\n");
  fs::rename(fs::path(dir) / ".latest.tmp", fs::path(dir) / "latest");
  // Retention: keep the newest `keep` complete checkpoints.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string n = entry.path().filename().string();
    if (entry.is_directory() && n.rfind("step_", 0) == 0) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  for (std::size_t i = 0; i + static_cast<std::size_t>(std::max(keep, 1)) < names.size(); ++i) {
    fs::remove_all(fs::path(dir) / names[i]);
  }
  return final_dir.string();
}

std::string checkpoint_path(const std::string& dir, std::int64_t step) {
  return (fs::path(dir) / step_name(step)).string();
}

std::string read_checkpoint_config(const std::string& checkpoint_dir) {
  const fs::path manifest_path = fs::path(checkpoint_dir) / "manifest.json";
  MYRIAD_CHECK(fs::exists(manifest_path), "checkpoint: " << manifest_path.string() << " not found");
  try {
    std::ifstream in(manifest_path);
    return json::parse(in).at("config").get<std::string>();
  } catch (const json::exception& e) {
    MYRIAD_THROW("checkpoint: " << manifest_path.string() << " has no readable config: " << e.what());
  }
}

std::string latest_checkpoint(const std::string& dir) {
  const fs::path pointer = fs::path(dir) / "latest";
  if (!fs::exists(pointer)) return "";
  std::ifstream in(pointer);
  std::string name;
  std::getline(in, name);
  const fs::path candidate = fs::path(dir) / name;
  return fs::exists(candidate / "manifest.json") ? candidate.string() : "";
}

void load_checkpoint(const std::string& checkpoint_dir, CheckpointContents& contents) {
  const fs::path manifest_path = fs::path(checkpoint_dir) / "manifest.json";
  const fs::path state_path = fs::path(checkpoint_dir) / "state.bin";
  MYRIAD_CHECK(fs::exists(manifest_path), "checkpoint: " << manifest_path.string() << " not found");
  json manifest;
  try {
    std::ifstream in(manifest_path);
    manifest = json::parse(in);
  } catch (const json::exception& e) {
    MYRIAD_THROW("checkpoint: " << manifest_path.string() << " is not valid JSON: " << e.what());
  }
  const int version = manifest.value("format_version", -1);
  MYRIAD_CHECK(version == kCheckpointFormatVersion,
               "checkpoint: " << manifest_path.string() << " has format_version " << version << ", this build reads "
                              << kCheckpointFormatVersion);
  const std::string model_yaml = manifest.value("model", "");
  MYRIAD_CHECK(contents.model_yaml.empty() || model_yaml == contents.model_yaml,
               "checkpoint: " << manifest_path.string() << " was saved for a different model:\n"
                              << model_yaml << "this run's model is:\n"
                              << contents.model_yaml);
  MYRIAD_CHECK(fs::exists(state_path), "checkpoint: " << state_path.string() << " not found");
  const std::uint64_t state_size = fs::file_size(state_path);
  std::ifstream state(state_path, std::ios::binary);
  // Read and verify everything into staging buffers first; copy only when all is well.
  std::vector<Tensor> staged;
  std::int64_t total_bytes = 0, read_bytes = 0;
  for (const CheckpointTensor& t : contents.tensors) total_bytes += static_cast<std::int64_t>(t.tensor.nbytes());
  ProgressBar bar("loading " + checkpoint_dir, total_bytes, true);
  for (const CheckpointTensor& t : contents.tensors) {
    const json* entry = nullptr;
    for (const json& e : manifest.at("tensors")) {
      if (e.at("name") == t.name) entry = &e;
    }
    MYRIAD_CHECK(entry != nullptr, "checkpoint: " << manifest_path.string() << " has no tensor '" << t.name << "'");
    const Shape shape = (*entry).at("shape").get<Shape>();
    MYRIAD_CHECK(shape == t.tensor.shape(), "checkpoint: tensor '" << t.name << "' in " << manifest_path.string()
                                                                   << " has shape " << shape_string(shape)
                                                                   << ", this run expects "
                                                                   << shape_string(t.tensor.shape()));
    const std::uint64_t offset = (*entry).at("offset"), bytes = (*entry).at("bytes");
    MYRIAD_CHECK(bytes == t.tensor.nbytes() && offset + bytes <= state_size,
                 "checkpoint: tensor '" << t.name << "' at bytes [" << offset << ", " << offset + bytes << ") of "
                                        << state_path.string() << " (size " << state_size
                                        << ") is out of bounds or of the wrong size; the file is truncated or corrupt");
    Tensor buffer = Tensor::empty(shape);
    state.seekg(static_cast<std::streamoff>(offset));
    state.read(static_cast<char*>(buffer.raw_data()), static_cast<std::streamsize>(bytes));
    MYRIAD_CHECK(state, "checkpoint: reading tensor '" << t.name << "' from " << state_path.string() << " failed");
    const std::uint32_t crc = data::crc32(buffer.raw_data(), bytes);
    MYRIAD_CHECK(crc == (*entry).at("crc32").get<std::uint32_t>(),
                 "checkpoint: tensor '" << t.name << "' in " << state_path.string()
                                        << " fails its checksum (file corrupt)");
    staged.push_back(buffer);
    read_bytes += static_cast<std::int64_t>(bytes);
    bar.update(read_bytes);
  }
  bar.finish();
  for (std::size_t i = 0; i < staged.size(); ++i) contents.tensors[i].tensor.copy_from(staged[i]);
  contents.step = manifest.at("step");
}

}  // namespace myriad::train
