// Support for the MPI test suites: communicators over MPI_COMM_WORLD, deterministic inputs that
// any rank can regenerate for any other rank (so references are computed locally, in double),
// the closed-form chunk sizes of the chunk rule, and a cross-rank bitwise comparison that uses
// raw MPI (independent of the code under test).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/distributed/mpi_communicator.h"

namespace myriad::testing {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// A fresh communicator over a duplicate of MPI_COMM_WORLD (collective: all ranks call it).
inline std::unique_ptr<distributed::MpiCommunicator> make_world(const std::string& name = "world",
                                                                distributed::MpiCommunicator::Options options = {}) {
  return distributed::MpiCommunicator::duplicate(MPI_COMM_WORLD, name, options);
}

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element `index` of the input of `rank` for a test seeded with `seed`, as a double that the
// dtype holds exactly: f32 in [-1, 1) with 24 random bits, i32 in [-1000, 1000], i64 in
// [-2^43, 2^43) (sums of a few stay exact in double).
inline double input_value(DType dtype, std::uint64_t seed, int rank, std::int64_t index) {
  const std::uint64_t h =
      splitmix64(splitmix64(seed * 1000003u + static_cast<std::uint64_t>(rank)) ^ static_cast<std::uint64_t>(index));
  switch (dtype) {
    case DType::f32:
      return static_cast<double>(h >> 40) / 16777216.0 * 2.0 - 1.0;
    case DType::i32:
      return static_cast<double>(static_cast<std::int64_t>(h % 2001) - 1000);
    case DType::i64:
      return static_cast<double>(static_cast<std::int64_t>(h >> 20) - (std::int64_t{1} << 43));
    default:
      return 0.0;
  }
}

// Writes input_value(dtype, seed, rank, first + i) into element i of a contiguous tensor.
inline void fill_input(Tensor& tensor, std::uint64_t seed, int rank, std::int64_t first = 0) {
  const std::int64_t n = tensor.numel();
  switch (tensor.dtype()) {
    case DType::f32: {
      float* p = tensor.data<float>();
      for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(input_value(DType::f32, seed, rank, first + i));
      break;
    }
    case DType::i32: {
      auto* p = tensor.data<std::int32_t>();
      for (std::int64_t i = 0; i < n; ++i)
        p[i] = static_cast<std::int32_t>(input_value(DType::i32, seed, rank, first + i));
      break;
    }
    case DType::i64: {
      auto* p = tensor.data<std::int64_t>();
      for (std::int64_t i = 0; i < n; ++i)
        p[i] = static_cast<std::int64_t>(input_value(DType::i64, seed, rank, first + i));
      break;
    }
    default:
      FAIL() << "fill_input: unsupported dtype";
  }
}

// Element i of a contiguous f32 / i32 / i64 tensor as double.
inline double element(const Tensor& tensor, std::int64_t i) {
  switch (tensor.dtype()) {
    case DType::f32:
      return tensor.data<float>()[i];
    case DType::i32:
      return tensor.data<std::int32_t>()[i];
    case DType::i64:
      return static_cast<double>(tensor.data<std::int64_t>()[i]);
    default:
      return 0.0;
  }
}

// Elements of chunk i (mod parts) of n elements: floor(n (i+1) / parts) - floor(n i / parts),
// written out here rather than taken from chunk_range.
inline std::int64_t chunk_elements(std::int64_t n, int parts, int i) {
  i = ((i % parts) + parts) % parts;
  return n * (i + 1) / parts - n * i / parts;
}

inline std::uint64_t fnv1a(const Tensor& tensor) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(tensor.numel() ? tensor.raw_data() : nullptr);
  for (std::size_t i = 0; i < tensor.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Hash of `tensor` on every rank of MPI_COMM_WORLD (raw MPI_Allgather).
inline std::vector<std::uint64_t> hashes_on_all_ranks(const Tensor& tensor) {
  std::uint64_t mine = fnv1a(tensor);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(world_size()));
  MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  return all;
}

// Sum of a value over MPI_COMM_WORLD (raw MPI_Allreduce).
inline std::int64_t sum_on_all_ranks(std::int64_t value) {
  std::int64_t total = 0;
  MPI_Allreduce(&value, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

}  // namespace myriad::testing
