// Deferred results on emulated CUDA streams (cuda_on_host.cpp), so the emulated device tests see
// a missing wait for asynchronous work the way a GPU would.
//
// The emulation runs every launch at once on the host, which would hide a caller reading an
// asynchronous result (an NCCL collective's output) before waiting for it. nccl_on_mpi.cpp
// therefore computes a collective's result into a private buffer at launch and registers its
// delivery into the real output here; the delivery happens only when the program synchronises
// with the stream past that point: cudaEventSynchronize of an event recorded after it, or
// cudaEventQuery of it — which answers cudaErrorNotReady while work is outstanding, as a GPU still
// busy would, unless a wait loop has polled since its last such answer (note_wait_poll: the
// emulated ncclCommGetAsyncError, which NcclWork::wait calls between queries), so a one-off
// completion check does not see the work done — cudaStreamWaitEvent on such an event (later work on the waiting stream
// runs at its launch, so delivering at the wait is the GPU's order), cudaStreamSynchronize, cudaDeviceSynchronize.
// Inputs are read at launch, which is after the work the launch waits for (it ran on the host already).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

namespace myriad::emulated {

// Runs `deliver`, which writes [output, output + bytes), once the program synchronises with
// `stream` past this point (see above).
void defer_on_stream(cudaStream_t stream, std::function<void()> deliver, const void* output, std::size_t bytes);
// Before a launch on `stream` reads [input, input + bytes): runs the stream's deferred deliveries
// up to the last one that writes into that range, since on a GPU the stream's earlier work
// completes first (a stream's order; not a host wait). Other deliveries stay deferred, so their
// works do not look complete any earlier.
void deliver_writes_to(cudaStream_t stream, const void* input, std::size_t bytes);
// Whether the calling thread records `stream` into a CUDA graph (the origin of a recording, or a
// stream that joined it), and appending `work` to that recording: the emulated NCCL records its
// calls there, each replay running them in order (cuda_on_host.cpp, "Stream capture").
bool stream_is_recorded(cudaStream_t stream);
void record_on_stream(cudaStream_t stream, std::function<void()> work);
// A wait loop's poll between two queries of the event it waits for (see above).
void note_wait_poll();
// How many times the program has waited for a whole stream (cudaStreamSynchronize) so far.
std::uint64_t stream_synchronizations();
// How many times the host has waited for device work so far (device→host synchronisations): whole
// streams or the device (cudaStreamSynchronize, cudaDeviceSynchronize), an event
// (cudaEventSynchronize), a synchronous device→host cudaMemcpy, and a wait loop over an event's
// queries that found it not ready (NcclWork::wait: counted at its poll). With MYRIAD_EMULATED_SYNC_TRACE set, each
// prints a stack trace to stderr (symbolize with addr2line), for finding where a step waits — and
// so does each call refused while a stream is being recorded into a CUDA graph.
std::uint64_t host_synchronizations();
// How many cuDNN fused-attention launches (forward or backward, cuda/cudnn_attention.h) have run.
std::uint64_t cudnn_attention_calls();
// How many NCCL groups carrying send / recv have been launched (outermost ncclGroupEnd) so far;
// defined by nccl_on_mpi.cpp, so only in the binaries that emulate NCCL.
std::uint64_t point_to_point_groups_launched();
// The compute capability every emulated device reports (major * 10 + minor; 90, a Hopper, unless
// a test sets another: FP8 refuses below 89).
void set_compute_capability(int capability);
// Stream capture (CUDA graphs, cuda_on_host.cpp): graphs launched so far, the recorded launches
// (kernels, GEMMs, copies, memsets) their launches replayed, and the calls refused because the
// calling thread was recording (each invalidates its recording).
std::uint64_t cuda_graphs_launched();
std::uint64_t cuda_graph_work_replayed();
std::uint64_t calls_refused_while_capturing();

}  // namespace myriad::emulated
