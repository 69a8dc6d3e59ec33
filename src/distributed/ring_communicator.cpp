// RingCommunicator: the flat ring on a private copy of the group (see ring_communicator.h).
#include "myriad/distributed/ring_communicator.h"

namespace myriad::distributed {

RingCommunicator::RingCommunicator(std::unique_ptr<Communicator> flat, bool exact_sums)
    : ComposedCommunicator(std::move(flat), exact_sums) {
  ring_ = &add_level("ring", this->flat().split(0, rank(), name() + ".ring"));
  start();
}

RingCommunicator::~RingCommunicator() { stop(); }

}  // namespace myriad::distributed
