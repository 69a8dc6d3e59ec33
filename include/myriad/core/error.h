// myriad::Error — the one error channel of the library.
//
// Every failure is thrown as myriad::Error carrying the process rank (read from the launcher's
// environment: OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID or RANK; -1 when launched alone),
// the source file and line. Library code never calls exit(); drivers catch, log and abort the
// communicators. Check macros take a stream expression so messages can name shapes and values:
//
//   MYRIAD_CHECK(a.dim() == 2, "matmul: a must be 2-D, got shape " << a.shape_string());
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace myriad {

// Rank of this process as told by the MPI launcher's environment, or -1 if none is set.
int launcher_rank();

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* file, int line);

  const std::string& message() const { return message_; }  // the bare message, no location
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  int rank() const { return rank_; }

 private:
  std::string message_;
  std::string file_;
  int line_;
  int rank_;
};

// Input quoted in a message, bounded: `text` itself when at most `limit` bytes, else its first
// `limit` bytes (cut at a UTF-8 character boundary) and "... (N bytes)". A 20 MB YAML value or a
// 100 MB line of a vocabulary file must not be echoed whole to the console and every rank's log.
std::string excerpt(std::string_view text, std::size_t limit = 200);

namespace detail {
[[noreturn]] void throw_error(const std::string& message, const char* file, int line);
}  // namespace detail

}  // namespace myriad

// msg_stream is a `<<` chain (`"x " << x`): parenthesised it would be a shift expression.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define MYRIAD_THROW(msg_stream)                                                   \
  do {                                                                             \
    std::ostringstream myriad_error_stream_;                                       \
    myriad_error_stream_ << msg_stream;                                            \
    ::myriad::detail::throw_error(myriad_error_stream_.str(), __FILE__, __LINE__); \
  } while (0)
// NOLINTEND(bugprone-macro-parentheses)

#define MYRIAD_CHECK(cond, msg_stream) \
  do {                                 \
    if (!(cond)) [[unlikely]] {        \
      MYRIAD_THROW(msg_stream);        \
    }                                  \
  } while (0)
