// SerialLayout — the map between one rank's flat parameter layout (its tensor-parallel shards and
// pipeline layers) and the flat layout of the serial model (every layer, whole tensors), which is
// the layout of checkpoints: a checkpoint saved under any (dp, tp, pp, ZeRO) layout loads under
// any other.
//
// to_serial writes this rank's `primary` pieces into a zeroed serial buffer; since every serial
// element has exactly one primary holder over the tp x pp ranks, a sum over tp then pp completes
// it exactly (x + 0 = x). from_serial fills every local parameter (copies included) from a
// complete serial buffer. Padding between parameters stays 0.
#pragma once

#include "myriad/nn/gpt_model.h"

namespace myriad::train {

class SerialLayout {
 public:
  explicit SerialLayout(const nn::GptModel& local);

  std::int64_t serial_numel() const { return serial_.parameters().numel(); }
  const nn::ParameterStore& serial_parameters() const { return serial_.parameters(); }
  // serial (serial_numel) += the primary pieces of local_flat (the local store's flat layout).
  void to_serial(const Tensor& local_flat, Tensor& serial) const;
  // local_flat (local numel) <- every local parameter's pieces of serial.
  void from_serial(const Tensor& serial, Tensor& local_flat) const;

 private:
  const nn::ParameterStore& local_;
  nn::GptModel serial_;  // registered, not allocated: names, global shapes, offsets
};

}  // namespace myriad::train
