// MpiLink and RequestSet — the byte-moving layer under MpiCommunicator (internal header).
//
// MpiLink names one MPI communicator for messages ("all_reduce on group 'dp' (rank 1 of 4)") and
// holds the largest single message; RequestSet posts non-blocking sends/receives of any byte
// count as consecutive MPI_BYTE pieces of at most max_message_bytes (MPI counts are int), and
// waits or tests them. Pieces of one transfer share (peer, tag, communicator), so MPI's
// non-overtaking rule keeps them in order. Every MPI return code is checked (the communicator
// uses MPI_ERRORS_RETURN) and every received piece must have exactly the expected length;
// failures throw myriad::Error naming the op, the group, the rank, the peer and MPI's message.
// Zero-byte transfers post nothing (both sides know the sizes).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace myriad::distributed {

struct MpiLink {
  MPI_Comm comm = MPI_COMM_NULL;
  std::string group;  // communicator name
  int rank = 0;
  int size = 1;
  std::int64_t max_message_bytes = std::int64_t{1} << 30;

  std::string context(const char* op) const;
};

// MPI_Error_string of an error code, e.g. "MPI_ERR_TRUNCATE: message truncated".
std::string mpi_error_string(int code);
// Throws "<context>: <what> failed: <MPI message>" unless rc == MPI_SUCCESS.
void check_mpi(int rc, const MpiLink& link, const char* op, const std::string& what);

class RequestSet {
 public:
  RequestSet(const MpiLink& link, const char* op) : link_(&link), op_(op) {}
  RequestSet(const RequestSet&) = delete;
  RequestSet& operator=(const RequestSet&) = delete;
  RequestSet(RequestSet&&) = default;
  RequestSet& operator=(RequestSet&&) = default;

  void send(const void* data, std::int64_t bytes, int peer, int tag);
  void recv(void* data, std::int64_t bytes, int peer, int tag);
  void wait_all();  // blocks; checks every status
  bool test_all();  // true once every request is complete (then checked as wait_all does)
  bool empty() const { return requests_.empty(); }

 private:
  struct Piece {
    std::int64_t bytes;
    int peer;
    bool is_recv;
  };
  void check_statuses(int rc, std::vector<MPI_Status>& statuses);

  const MpiLink* link_;
  const char* op_;
  std::vector<MPI_Request> requests_;
  std::vector<Piece> pieces_;  // parallel to requests_
};

}  // namespace myriad::distributed
