// Implementation of myriad::Error: formats "[rank N] file:line: message".
#include "myriad/core/error.h"

#include <cstdlib>

namespace myriad {

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK"}) {
    if (const char* value = std::getenv(name)) {
      char* end = nullptr;
      long rank = std::strtol(value, &end, 10);
      if (end != value && *end == '\0' && rank >= 0) return static_cast<int>(rank);
    }
  }
  return -1;
}

static std::string format_error(const std::string& message, const char* file, int line, int rank) {
  std::ostringstream out;
  out << "[rank " << (rank < 0 ? 0 : rank) << "] " << file << ":" << line << ": " << message;
  return out.str();
}

Error::Error(const std::string& message, const char* file, int line)
    : std::runtime_error(format_error(message, file, line, launcher_rank())),
      message_(message),
      file_(file),
      line_(line),
      rank_(launcher_rank()) {}

namespace detail {
void throw_error(const std::string& message, const char* file, int line) { throw Error(message, file, line); }
}  // namespace detail

std::string excerpt(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return std::string(text);
  std::size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
}

}  // namespace myriad
