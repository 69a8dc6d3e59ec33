// Checked, piecewise non-blocking MPI transfers (see mpi_link.h).
#include "mpi_link.h"

#include <algorithm>
#include <sstream>

#include "myriad/core/error.h"

namespace myriad::distributed {

std::string MpiLink::context(const char* op) const {
  std::ostringstream out;
  out << op << " on group '" << group << "' (rank " << rank << " of " << size << ")";
  return out.str();
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

void check_mpi(int rc, const MpiLink& link, const char* op, const std::string& what) {
  MYRIAD_CHECK(rc == MPI_SUCCESS, link.context(op) << ": " << what << " failed: " << mpi_error_string(rc));
}

void RequestSet::send(const void* data, std::int64_t bytes, int peer, int tag) {
  const char* p = static_cast<const char*>(data);
  for (std::int64_t done = 0; done < bytes;) {
    const std::int64_t piece = std::min(bytes - done, link_->max_message_bytes);
    MPI_Request request;
    check_mpi(MPI_Isend(p + done, static_cast<int>(piece), MPI_BYTE, peer, tag, link_->comm, &request), *link_, op_,
              "MPI_Isend of " + std::to_string(piece) + " bytes to rank " + std::to_string(peer));
    requests_.push_back(request);
    pieces_.push_back(Piece{piece, peer, false});
    done += piece;
  }
}

void RequestSet::recv(void* data, std::int64_t bytes, int peer, int tag) {
  char* p = static_cast<char*>(data);
  for (std::int64_t done = 0; done < bytes;) {
    const std::int64_t piece = std::min(bytes - done, link_->max_message_bytes);
    MPI_Request request;
    check_mpi(MPI_Irecv(p + done, static_cast<int>(piece), MPI_BYTE, peer, tag, link_->comm, &request), *link_, op_,
              "MPI_Irecv of " + std::to_string(piece) + " bytes from rank " + std::to_string(peer));
    requests_.push_back(request);
    pieces_.push_back(Piece{piece, peer, true});
    done += piece;
  }
}

void RequestSet::check_statuses(int rc, std::vector<MPI_Status>& statuses) {
  auto what = [&](std::size_t i) {
    return std::string(pieces_[i].is_recv ? "receive from rank " : "send to rank ") + std::to_string(pieces_[i].peer);
  };
  if (rc == MPI_ERR_IN_STATUS) {
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      const int code = statuses[i].MPI_ERROR;
      if (code != MPI_SUCCESS && code != MPI_ERR_PENDING) check_mpi(code, *link_, op_, what(i));
    }
  }
  check_mpi(rc, *link_, op_, "completion of " + std::to_string(pieces_.size()) + " requests");
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    if (!pieces_[i].is_recv) continue;
    int count = 0;
    check_mpi(MPI_Get_count(&statuses[i], MPI_BYTE, &count), *link_, op_, "MPI_Get_count after " + what(i));
    MYRIAD_CHECK(count == pieces_[i].bytes, link_->context(op_)
                                                << ": " << what(i) << " delivered " << count << " bytes where "
                                                << pieces_[i].bytes << " were expected (ranks disagree on the sizes)");
  }
  requests_.clear();
  pieces_.clear();
}

void RequestSet::wait_all() {
  if (requests_.empty()) return;
  std::vector<MPI_Status> statuses(requests_.size());
  const int rc = MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), statuses.data());
  check_statuses(rc, statuses);
}

bool RequestSet::test_all() {
  if (requests_.empty()) return true;
  std::vector<MPI_Status> statuses(requests_.size());
  int flag = 0;
  const int rc = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag, statuses.data());
  if (rc == MPI_SUCCESS && !flag) return false;
  check_statuses(rc, statuses);
  return true;
}

}  // namespace myriad::distributed
