// safetensors files: the interchange format of full tensors (no executable content).
//
// Layout: u64 little-endian N, then N bytes of JSON {"name": {"dtype", "shape", "data_offsets":
// [begin, end]}, ..., "__metadata__": {string: string}}, then the data (offsets relative to the
// end of the header, row-major, little-endian). Written tensors are F32 or I8 (weight-only INT8
// exports); reading accepts F32, F16 and BF16 (converted to f32) and I8 (kept as i8). Reading checks everything before
// returning: header length within the file, valid JSON, known dtype, offsets inside the data, sizes equal to the
// shapes, no overlaps — errors name the file and the tensor.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/data/at_rest.h"

namespace myriad::train {

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order
  std::map<std::string, std::string> metadata;
};

// Written through `at_rest` (encrypted under its keys when it has them; the file appears whole,
// by rename); read clear or encrypted alike (data/at_rest.h).
void write_safetensors(const std::string& path, const SafetensorsFile& file, const data::AtRest& at_rest = {});
SafetensorsFile read_safetensors(const std::string& path, const data::AtRest& at_rest = {});

}  // namespace myriad::train
