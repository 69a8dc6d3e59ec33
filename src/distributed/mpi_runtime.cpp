// MpiRuntime: MPI_Init_thread / MPI_Finalize ownership (see mpi_runtime.h).
#include "myriad/distributed/mpi_runtime.h"

#include <mpi.h>

#include <cstdlib>

#include "mpi_link.h"
#include "myriad/core/error.h"
#include "myriad/distributed/mpi_communicator.h"

namespace myriad::distributed {

namespace {
const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}
}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int finalized = 0, initialized = 0;
  MPI_Finalized(&finalized);
  MYRIAD_CHECK(!finalized, "MpiRuntime: MPI was already finalised in this process; it cannot be initialised again");
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MYRIAD_CHECK(rc == MPI_SUCCESS, "MpiRuntime: MPI_Init_thread failed: " << mpi_error_string(rc));
    owns_mpi_ = true;
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    if (owns_mpi_) MPI_Finalize();
    MYRIAD_THROW("MpiRuntime: the MPI library provides " << thread_level_name(provided)
                                                         << " but myriad needs MPI_THREAD_MULTIPLE (each communicator"
                                                            " has a worker thread); use an MPI built with thread"
                                                            " support (OpenMPI: --enable-mpi-thread-multiple)");
  }
}

MpiRuntime::~MpiRuntime() {
  if (!owns_mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int MpiRuntime::world_rank() const {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int MpiRuntime::world_size() const {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

std::unique_ptr<Communicator> MpiRuntime::world() { return MpiCommunicator::duplicate(MPI_COMM_WORLD, "world"); }

bool MpiRuntime::launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

}  // namespace myriad::distributed
