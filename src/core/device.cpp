// Device parsing and printing.
#include "myriad/core/device.h"

#include <charconv>

#include "myriad/core/error.h"

namespace myriad {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text == "meta") return meta();
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  MYRIAD_THROW("invalid device '" << text << "'; expected 'cpu', 'cuda', 'cuda:N' with N >= 0 or 'meta'");
}

std::string Device::str() const {
  if (is_meta()) return "meta";
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace myriad
