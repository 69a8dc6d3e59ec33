// Device — where a tensor's memory lives: the host ("cpu"), one GPU ("cuda:N"), or nowhere
// ("meta": shape and dtype without storage, made by ops::MetaBackend for dry runs).
#pragma once

#include <string>
#include <string_view>

namespace myriad {

enum class DeviceType { cpu, cuda, meta };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // GPU ordinal for cuda; always 0 for cpu

  static Device cpu() { return Device{DeviceType::cpu, 0}; }
  static Device cuda(int index) { return Device{DeviceType::cuda, index}; }
  static Device meta() { return Device{DeviceType::meta, 0}; }
  static Device parse(std::string_view text);  // "cpu", "cuda", "cuda:3", "meta"; throws on anything else

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool is_meta() const { return type == DeviceType::meta; }
  std::string str() const;
  bool operator==(const Device&) const = default;
};

}  // namespace myriad
