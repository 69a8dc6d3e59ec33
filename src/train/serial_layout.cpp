// SerialLayout: per parameter, views of the two flat buffers and the shard pieces between them.
#include "myriad/train/serial_layout.h"

namespace myriad::train {

SerialLayout::SerialLayout(const nn::GptModel& local)
    : local_(local.parameters()), serial_(local.config(), nn::ModelSplit{}, /*allocate=*/false) {
  for (const nn::Parameter& p : local_.all()) {
    const nn::Parameter& s = serial_.parameters().find(p.name);
    MYRIAD_CHECK(s.shape == p.global_shape, "serial layout: parameter '"
                                                << p.name << "' is " << shape_string(p.global_shape) << " here but "
                                                << shape_string(s.shape) << " in the serial model");
  }
}

void SerialLayout::to_serial(const Tensor& local_flat, Tensor& serial, bool experts_only) const {
  MYRIAD_CHECK(serial.numel() == serial_numel() && local_flat.numel() == local_.numel(),
               "SerialLayout::to_serial: buffers of " << local_flat.numel() << " and " << serial.numel()
                                                      << " elements, expected " << local_.numel() << " and "
                                                      << serial_numel());
  for (const nn::Parameter& p : local_.all()) {
    if (!p.primary || (experts_only && !p.expert)) continue;
    const nn::Parameter& s = serial_.parameters().find(p.name);
    nn::for_each_shard_piece(p, nn::parameter_view(serial, s), nn::parameter_view(local_flat, p),
                             [](Tensor global, const Tensor& piece) { global.copy_from(piece); });
  }
}

}  // namespace myriad::train
