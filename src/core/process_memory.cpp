// Process memory figures read from /proc/self/status.
#include "myriad/core/process_memory.h"

#include <fstream>
#include <string>

namespace myriad {

namespace {
std::size_t status_field_bytes(const char* field) {
  std::ifstream status("/proc/self/status");
  const std::string key(field);
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;  // kB
  }
  return 0;
}
}  // namespace

std::size_t current_rss_bytes() { return status_field_bytes("VmRSS:"); }
std::size_t peak_rss_bytes() { return status_field_bytes("VmHWM:"); }

bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  if (!clear) return false;
  clear << "5";
  return static_cast<bool>(clear);
}

}  // namespace myriad
