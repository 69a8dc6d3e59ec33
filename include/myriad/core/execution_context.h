// ExecutionContext — where work on a piece of device memory is queued: a GPU's stream with its
// library handles and allocator (the CUDA backend, ops/backend.h). Storage made by a backend
// points to it, so that an op finds the backend of its tensors from the tensors themselves,
// without any global registry. Host memory has no context (the CPU ops need none).
//
// Invariant: a context outlives every Storage that points to it (the storage's deleter returns
// memory to the context's allocator).
#pragma once

namespace myriad {

class ExecutionContext {
 public:
  virtual ~ExecutionContext() = default;
};

}  // namespace myriad
