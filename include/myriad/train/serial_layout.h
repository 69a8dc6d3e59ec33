// SerialLayout — the map from one rank's flat parameter layout (its tensor-parallel shards and
// pipeline layers) to the flat layout of the serial model (every layer, whole tensors): how
// generation under tp / pp assembles a serial copy of the parameters.
//
// to_serial writes this rank's `primary` pieces into a zeroed serial buffer; since every serial
// element has exactly one primary holder over the tp x pp ranks, a sum over tp then pp completes
// it exactly (x + 0 = x). Padding between parameters stays 0.
#pragma once

#include "myriad/nn/gpt_model.h"

namespace myriad::train {

class SerialLayout {
 public:
  explicit SerialLayout(const nn::GptModel& local);

  std::int64_t serial_numel() const { return serial_.parameters().numel(); }
  // serial (serial_numel) += the primary pieces of local_flat (the local store's flat layout).
  // `experts_only`: only the MoE experts' pieces (an ep rank other than 0, whose dense parameters
  // ep rank 0 already contributes).
  void to_serial(const Tensor& local_flat, Tensor& serial, bool experts_only = false) const;

 private:
  const nn::ParameterStore& local_;
  nn::GptModel serial_;  // registered, not allocated: names, global shapes, offsets
};

}  // namespace myriad::train
