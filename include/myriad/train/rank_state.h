// RankState — what the composition root (Engine's constructor) builds for one rank and the parts
// of training share: the resolved config, the log, the process groups (and on training.device
// cuda the device runtime whose groups carry the model's tensors), the model on its placement with
// the regions through which it crosses the tp / ep / cp groups, DataParallel, the serial layout,
// the precision state (compute format, compute copy, loss scaler) and the step counter.
//
// Invariants: built once, in this member order (each member may refer to the ones above it, so
// they are destroyed the other way round); the parts (Checkpointer, InferenceSession, the step
// loop) hold a reference to it and outlive none of it. It holds no part's own state: a part keeps
// what only it reads (the checkpoint writer, the INT8 flag) as its own members.
#pragma once

#include <cstdint>
#include <memory>

#include <spdlog/logger.h>

#include "myriad/config/run_config.h"
#include "myriad/data/at_rest.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/parallel/data_parallel.h"
#include "myriad/train/device_runtime.h"
#include "myriad/train/loss_scaler.h"
#include "myriad/train/serial_layout.h"

namespace myriad::train {

struct RankState {
  RunConfig config;      // resolved and validated for the world
  data::AtRest at_rest;  // how checkpoints are stored: security.key_file's keys, or clear
  std::shared_ptr<spdlog::logger> log;
  distributed::ProcessGroups* groups = nullptr;           // not owned; outlives the state
  std::unique_ptr<DeviceRuntime> device;                  // training.device cuda; before everything placed on it
  std::unique_ptr<nn::TensorParallel> tensor_parallel;    // tp > 1: how the model crosses the tp group
  std::unique_ptr<nn::ExpertParallel> expert_parallel;    // ep > 1: how MoE rows cross the ep group
  std::unique_ptr<nn::ContextParallel> context_parallel;  // cp > 1: the attention's ring
  std::unique_ptr<nn::GptModel> model;                    // this rank's share of the model
  std::unique_ptr<parallel::DataParallel> data_parallel;  // gradients, ZeRO shards, AdamW
  std::unique_ptr<SerialLayout> serial_layout;            // tp * pp > 1: this rank's part <-> the serial model
  DType compute_format = DType::f32;                      // training.precision
  Tensor compute_values;                                  // bf16/fp16: the weights the model reads
  Tensor compute_operands;                                // the same in 16 bits: the GEMMs' weight operands
  std::unique_ptr<DynamicLossScaler> loss_scaler;         // fp16
  std::int64_t step = 0;                                  // optimizer steps taken (a checkpoint's step)

  // The group of `axis` that carries the model's tensors: the host group, or (training.device
  // cuda) the device's (NCCL; host scalars given to it travel over the host group).
  distributed::Communicator& group(distributed::Axis axis) {
    return device ? device->group(axis) : groups->group(axis);
  }
  distributed::Communicator& dp() { return group(distributed::Axis::dp); }  // the replicas: which sequences
  // The ranks that train the same parameters on different tokens (dp x cp): gradients, the loss
  // and token counts sum over it, ZeRO shards over it. The dp group when cp is 1.
  distributed::Communicator& data_group() {
    if (config.parallel.cp == 1) return dp();
    return device ? device->data_context() : groups->data_context();
  }
  distributed::Communicator& tp() { return group(distributed::Axis::tp); }
  distributed::Communicator& pp() { return group(distributed::Axis::pp); }
  bool model_parallel() const { return config.parallel.tp * config.parallel.pp * config.parallel.ep > 1; }
  // The compute copies <- the master weights rounded to the compute format (after every load, and
  // after every update that did not write them itself); nothing without them (fp32, ZeRO-3).
  void refresh_compute_weights();
};

}  // namespace myriad::train
