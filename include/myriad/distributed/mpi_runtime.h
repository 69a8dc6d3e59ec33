// MpiRuntime — RAII owner of MPI's lifetime in one process.
//
// The constructor calls MPI_Init_thread asking for MPI_THREAD_MULTIPLE (every MpiCommunicator
// has its own worker thread calling MPI) unless MPI is already initialised, in which case this
// object does not finalise it. It throws when the library provides a lower thread level or MPI
// was already finalised. The destructor calls MPI_Finalize if this object initialised MPI.
// Create it first in main() and destroy every communicator (ProcessGroups) before it.
// Holds no global state of its own; MPI's state is MPI's.
#pragma once

#include <memory>

#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

class MpiRuntime {
 public:
  explicit MpiRuntime(int* argc = nullptr, char*** argv = nullptr);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const;
  int world_size() const;
  bool initialized_mpi() const { return owns_mpi_; }  // whether this object will finalise MPI

  // A new MpiCommunicator named "world" over a duplicate of MPI_COMM_WORLD (collective).
  std::unique_ptr<Communicator> world();

  // Whether an MPI launcher started this process (OMPI_COMM_WORLD_SIZE or PMI_SIZE is set).
  static bool launched_by_mpi();

 private:
  bool owns_mpi_ = false;
};

}  // namespace myriad::distributed
