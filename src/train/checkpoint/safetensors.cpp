// safetensors reader and writer (JSON header via nlohmann-json, raw little-endian data).
#include "myriad/train/checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "json_whole_number.h"
#include "myriad/core/error.h"

namespace myriad::train {

using json = nlohmann::json;

void write_safetensors(const std::string& path, const SafetensorsFile& file, const data::AtRest& at_rest) {
  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : file.tensors) {
    MYRIAD_CHECK(
        (tensor.dtype() == DType::f32 || tensor.dtype() == DType::i8) && tensor.is_contiguous() &&
            tensor.device().is_cpu(),
        "safetensors: tensor '" << name << "' must be a contiguous f32 or i8 CPU tensor, is " << tensor.describe());
    header[name] = {{"dtype", tensor.dtype() == DType::i8 ? "I8" : "F32"},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
  }
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data to 8 bytes, as the reference writer does
  const std::string tmp = path + ".tmp";
  {
    const std::unique_ptr<data::StoredFileWriter> out = at_rest.create(tmp);
    const std::uint64_t n = text.size();
    out->write(&n, sizeof n);
    out->write(text.data(), text.size());
    for (const auto& [name, tensor] : file.tensors) out->write(tensor.raw_data(), tensor.nbytes());
    out->finish();
  }
  std::filesystem::rename(tmp, path);
}

SafetensorsFile read_safetensors(const std::string& path, const data::AtRest& at_rest) {
  MYRIAD_CHECK(std::filesystem::is_regular_file(path), "safetensors: cannot open " << path);
  const std::unique_ptr<data::StoredFileReader> in = at_rest.open(path);
  const std::uint64_t file_size = in->size();
  std::uint64_t n = 0;
  if (file_size >= sizeof n) in->read_at(0, &n, sizeof n);
  MYRIAD_CHECK(file_size >= sizeof n && n <= file_size - 8,
               "safetensors: " << path << " is truncated or not a safetensors file (header length " << n
                               << ", file size " << file_size << ")");
  std::string text(n, '\0');
  if (n > 0) in->read_at(8, text.data(), n);
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    MYRIAD_THROW("safetensors: " << path << " has an invalid JSON header: " << e.what());
  }
  MYRIAD_CHECK(header.is_object(), "safetensors: " << path << ": the header is not a JSON object");
  const std::uint64_t data_size = file_size - 8 - n;
  SafetensorsFile file;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  std::vector<std::tuple<std::string, std::string, Shape, std::uint64_t, std::uint64_t>> entries;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      // The format's __metadata__ is a map of strings to strings.
      MYRIAD_CHECK(entry.is_object(),
                   "safetensors: " << path << ": __metadata__ must be a map of strings, is " << entry.type_name());
      for (const auto& [key, value] : entry.items()) {
        MYRIAD_CHECK(value.is_string(), "safetensors: " << path << ": __metadata__ entry '" << key
                                                        << "' must be a string, is " << value.type_name() << " ("
                                                        << value.dump() << ")");
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    try {
      const std::string dtype = entry.at("dtype").get<std::string>();
      const std::string what = "safetensors: " + path + ": tensor '" + name + "'";
      const Shape shape = whole_numbers(entry.at("shape"), what + " shape");
      const auto begin = whole_number<std::uint64_t>(entry.at("data_offsets").at(0), what + " data_offsets");
      const auto end = whole_number<std::uint64_t>(entry.at("data_offsets").at(1), what + " data_offsets");
      entries.emplace_back(name, dtype, shape, begin, end);
    } catch (const json::exception& e) {
      MYRIAD_THROW("safetensors: " << path << ": tensor '" << name << "' has a malformed entry: " << e.what());
    }
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return std::get<3>(a) < std::get<3>(b); });
  std::uint64_t previous_end = 0;
  for (const auto& [name, dtype, shape, begin, end] : entries) {
    const std::uint64_t element = dtype == "F32" ? 4 : (dtype == "F16" || dtype == "BF16") ? 2 : dtype == "I8" ? 1 : 0;
    MYRIAD_CHECK(element != 0, "safetensors: " << path << ": tensor '" << name << "' has dtype " << dtype
                                               << "; readable: F32, F16, BF16, I8");
    for (std::int64_t d : shape)
      MYRIAD_CHECK(d >= 0, "safetensors: " << path << ": tensor '" << name << "' has a negative dimension");
    const auto bytes = static_cast<std::uint64_t>(shape_numel(shape)) * element;
    MYRIAD_CHECK(begin <= end && end <= data_size && end - begin == bytes && begin >= previous_end,
                 "safetensors: " << path << ": tensor '" << name << "' at data bytes [" << begin << ", " << end
                                 << ") does not fit its shape " << shape_string(shape) << " x " << element
                                 << " bytes, overlaps another tensor, or lies outside the " << data_size
                                 << " data bytes (truncated file?)");
    previous_end = end;
    const DType stored = dtype == "F32"   ? DType::f32
                         : dtype == "F16" ? DType::f16
                         : dtype == "I8"  ? DType::i8
                                          : DType::bf16;
    Tensor raw = Tensor::empty(shape, stored);
    if (bytes > 0) in->read_at(8 + n + begin, raw.raw_data(), bytes);
    file.tensors.emplace_back(name, stored == DType::f32 || stored == DType::i8 ? raw : raw.to(DType::f32));
  }
  return file;
}

}  // namespace myriad::train
