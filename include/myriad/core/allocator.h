// Aligned host memory and the reference-counted Storage that tensors share.
//
// Host buffers are 64-byte aligned (one cache line, a full AVX-512 vector) so that vectorised
// loops and BLAS never see a split line at the start of a tensor. Storage owns one buffer and
// frees it through the deleter it was created with; it may also wrap foreign memory (a NumPy
// array) whose owner is kept alive by the deleter's captured state. Device memory made by a
// compute backend names that backend (context(); execution_context.h); host memory names none.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "myriad/core/device.h"
#include "myriad/core/execution_context.h"

namespace myriad {

inline constexpr std::size_t kHostAlignment = 64;

// Returns zero-size-safe, 64-byte aligned host memory; throws myriad::Error on failure.
void* aligned_host_alloc(std::size_t bytes);
void aligned_host_free(void* ptr) noexcept;

class Storage {
 public:
  using Deleter = std::function<void(void*)>;

  Storage(void* data, std::size_t bytes, Device device, Deleter deleter, ExecutionContext* context = nullptr);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // A new host buffer of `bytes` bytes (uninitialised).
  static std::shared_ptr<Storage> allocate_host(std::size_t bytes);
  // Wraps memory owned elsewhere; `deleter` runs when the last tensor using it goes away.
  // `context`: the backend whose memory this is (it must outlive the storage), or null.
  static std::shared_ptr<Storage> wrap(void* data, std::size_t bytes, Device device, Deleter deleter,
                                       ExecutionContext* context = nullptr);

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  const Device& device() const { return device_; }
  ExecutionContext* context() const { return context_; }

 private:
  void* data_;
  std::size_t bytes_;
  Device device_;
  Deleter deleter_;
  ExecutionContext* context_;
};

}  // namespace myriad
