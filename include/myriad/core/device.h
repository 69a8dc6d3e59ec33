// Device — where a tensor's memory lives: the host ("cpu") or one GPU ("cuda:N").
#pragma once

#include <string>
#include <string_view>

namespace myriad {

enum class DeviceType { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // GPU ordinal for cuda; always 0 for cpu

  static Device cpu() { return Device{DeviceType::cpu, 0}; }
  static Device cuda(int index) { return Device{DeviceType::cuda, index}; }
  static Device parse(std::string_view text);  // "cpu", "cuda", "cuda:3"; throws on anything else

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;
  bool operator==(const Device&) const = default;
};

}  // namespace myriad
