// Internal: starts the kernel's write-back of a file while it is still being written, so that a
// long sequential write (a checkpoint piece, an encrypted file) overlaps its disk I/O with the
// CPU work of producing the next bytes (sealing, copying) instead of leaving all of it to the
// final fsync. Only a hint: sync_file_range(SYNC_FILE_RANGE_WRITE) queues the dirty pages and
// returns; durability still comes from the writer's fsync.
#pragma once

#include <fcntl.h>

#include <cstdint>
#include <cstdio>

namespace myriad::data::detail {

inline constexpr std::uint64_t kWritebackStepBytes = std::uint64_t{8} << 20;

// Call after `n` more bytes were handed to `file` (a stdio stream); `written` and `started` are
// the caller's counters (bytes written, and where the range not yet queued starts). Every
// kWritebackStepBytes, flushes the stream and queues that range for write-back.
inline void pace_writeback(std::FILE* file, std::uint64_t n, std::uint64_t& written, std::uint64_t& started) {
  written += n;
  if (written - started < kWritebackStepBytes) return;
  if (std::fflush(file) != 0) return;  // the writer's own checks report the error
  ::sync_file_range(::fileno(file), static_cast<off_t>(started), static_cast<off_t>(written - started),
                    SYNC_FILE_RANGE_WRITE);
  started = written;
}

}  // namespace myriad::data::detail
