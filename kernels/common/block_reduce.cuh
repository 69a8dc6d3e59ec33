// Block-level reductions in a fixed order: every thread writes its value to shared memory, then a
// halving tree (thread t adds t + half) leaves the total in slot 0, which every thread returns.
// The order depends only on the block size, so results are bit-identical run to run. All
// `kThreads` threads of the block must call it (it synchronises); `shared` holds kThreads values
// and may be reused right after the call returns.
#pragma once

namespace myriad::cuda::detail {

template <int kThreads, typename T, typename Combine>
__device__ T block_reduce(T value, T* shared, Combine combine) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] = combine(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  const T result = shared[0];
  __syncthreads();
  return result;
}

struct Add {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

}  // namespace myriad::cuda::detail
