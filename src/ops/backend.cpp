// Finding the backend of an op's tensors (see ops/backend.h).
#include "myriad/ops/backend.h"

namespace myriad::ops {

Backend& backend_of(const char* op, std::initializer_list<NamedTensor> tensors) {
  const char* first_name = nullptr;
  ExecutionContext* context = nullptr;
  for (const auto& [name, tensor] : tensors) {
    if (tensor == nullptr || !tensor->defined()) continue;
    ExecutionContext* own = tensor->storage()->context();
    MYRIAD_CHECK(own != nullptr, op << ": '" << name << "' (" << tensor->describe()
                                    << ") is device memory that no compute backend made, so no backend can run "
                                       "the op on it; make device tensors with a backend (ops::Backend::empty)");
    if (first_name == nullptr) {
      first_name = name;
      context = own;
      continue;
    }
    MYRIAD_CHECK(own == context, op << ": '" << name << "' and '" << first_name
                                    << "' belong to different backends (two contexts of " << tensor->device().str()
                                    << ")");
  }
  MYRIAD_CHECK(context != nullptr, op << ": no defined tensor to find the backend from");
  auto* backend = dynamic_cast<Backend*>(context);
  MYRIAD_CHECK(backend != nullptr, op << ": the memory of '" << first_name << "' belongs to a context that is not "
                                      << "an ops backend");
  return *backend;
}

}  // namespace myriad::ops
