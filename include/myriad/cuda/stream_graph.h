// StreamGraph — a CUDA graph recorded from the work one thread issues on one stream
// (cudaStreamBeginCapture in thread-local mode ... cudaStreamEndCapture), instantiated once and
// launched again and again with the pointers and kernel arguments it was recorded with.
//
// Invariants: recording runs nothing — launch() does, the first time included. While a thread
// records, the calls capture forbids it (a host wait on the stream, a blocking copy, an event
// query) fail, and the recording with them: StreamCapture's destructor ends a recording that was
// not finished (an exception left it), discards it and never throws, so the stream is usable
// again. Memory the recorded work reads or writes must keep its address and meaning for as long as
// the graph is launched (the caching allocator's private pools keep freed blocks out of others'
// hands). One graph per recording; not copyable.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>

#include "myriad/core/caching_allocator.h"

namespace myriad::cuda {

class StreamGraph {
 public:
  StreamGraph(cudaGraph_t graph, cudaGraphExec_t exec) : graph_(graph), exec_(exec) {}
  ~StreamGraph();
  StreamGraph(const StreamGraph&) = delete;
  StreamGraph& operator=(const StreamGraph&) = delete;

  // Queues the recorded work on `stream` (any stream of the device it was recorded on).
  void launch(cudaStream_t stream) const;
  std::size_t nodes() const;  // kernels, copies and memsets recorded

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
};

class StreamCapture {
 public:
  // Starts recording `stream` (current device: the stream's).
  explicit StreamCapture(cudaStream_t stream);
  ~StreamCapture();  // discards an unfinished recording; never throws
  StreamCapture(const StreamCapture&) = delete;
  StreamCapture& operator=(const StreamCapture&) = delete;

  // Ends the recording and instantiates it; throws myriad::Error (naming why) when the recording
  // was invalidated by a call capture forbids.
  std::unique_ptr<StreamGraph> finish();

 private:
  cudaStream_t stream_;
  bool recording_ = true;
};

class DeviceContext;

// A StreamGraph of the work issued on a DeviceContext's stream with a private pool of the context's
// caching allocator: while the work runs in the pool (run_in_pool) or is recorded (record), its
// allocations come from the pool, so the blocks the graph uses keep their addresses for as long as
// this object lives, whoever allocates between replays. The usual sequence: run the work once as
// usual (lazy set-up outside the pool), once in the pool (the pool then holds every block the
// recording asks for: nothing is allocated while recording), record it, replay it. One recording
// per object; the pool is released when it goes (after the graph).
class PooledStreamGraph {
 public:
  explicit PooledStreamGraph(DeviceContext& context);
  ~PooledStreamGraph();
  PooledStreamGraph(const PooledStreamGraph&) = delete;
  PooledStreamGraph& operator=(const PooledStreamGraph&) = delete;

  void run_in_pool(const std::function<void()>& work);
  // Throws myriad::Error (the recording discarded) when the work makes a call capture forbids.
  void record(const std::function<void()>& work);
  void replay() const;  // queues the recorded work on the context's stream
  bool recorded() const { return graph_ != nullptr; }
  std::size_t launches() const { return graph_ ? graph_->nodes() : 0; }

 private:
  DeviceContext& context_;
  PoolId pool_;
  std::unique_ptr<StreamGraph> graph_;
};

// Whether `stream` is being recorded now (false on any error).
bool is_capturing(cudaStream_t stream) noexcept;

}  // namespace myriad::cuda
