// Resident memory of this process, from /proc/self/status (Linux); 0 where unavailable.
// reset_peak_rss() writes "5" to /proc/self/clear_refs so VmHWM restarts from the current RSS.
#pragma once

#include <cstddef>

namespace myriad {

std::size_t current_rss_bytes();  // VmRSS
std::size_t peak_rss_bytes();     // VmHWM
bool reset_peak_rss();

}  // namespace myriad
