// ops::MetaBackend — the "meta" device: tensors with a shape and a dtype but no storage, for dry
// runs (train/dry_run.h builds one rank's part of a layout at full size on it and reports the
// memory that rank would hold, without allocating it).
//
// empty()/zero()/fill()/copy() succeed and touch nothing; copy_from_host() makes a meta tensor of
// the host tensor's shape. Every allocation is counted: bytes live now, the peak, and the number
// of tensors, each also under the label current when it was made (set_label: a dry run labels its
// construction phases). Storage made here frees its count when the last tensor using it goes.
// Reading values (copy_to_host, any compute op) throws myriad::Error: a meta tensor holds none.
// The backend must outlive every tensor it made (as every backend).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "myriad/ops/backend.h"

namespace myriad::ops {

struct MetaUsage {
  std::int64_t live_bytes = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t tensors = 0;  // live
};

class MetaBackend final : public Backend {
 public:
  MetaBackend();
  ~MetaBackend() override;
  MetaBackend(const MetaBackend&) = delete;
  MetaBackend& operator=(const MetaBackend&) = delete;

  // Allocations from now on are counted under `label` too (until the next call).
  void set_label(const std::string& label) { label_ = label; }
  const MetaUsage& usage() const { return total_; }
  // Per label: bytes made under it that are still live, and its peak.
  const std::map<std::string, MetaUsage>& usage_by_label() const { return by_label_; }

  Device device() const override { return Device::meta(); }
  Tensor empty(const Shape& shape, DType dtype = DType::f32) override;
  Tensor copy_from_host(const Tensor& host) override;
  Tensor copy_to_host(const Tensor& device) override;
  void zero(const Tensor&) override {}
  void synchronize() override {}
  void copy(const Tensor&, Tensor&) override {}
  void fill(const Tensor&, float) override {}

  void matmul_forward(const MatmulArgs&, const Tensor&, const Tensor&, Tensor&) override;
  void matmul_backward(const MatmulArgs&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) override;
  void layernorm_forward(const LayernormArgs&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                         Tensor&) override;
  void layernorm_backward(const LayernormArgs&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, Tensor&, Tensor&, Tensor&) override;
  void rmsnorm_forward(const RmsnormArgs&, const Tensor&, const Tensor&, Tensor&, Tensor&) override;
  void rmsnorm_backward(const RmsnormArgs&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                        Tensor&) override;
  void gelu_forward(const GeluArgs&, const Tensor&, Tensor&) override;
  void gelu_backward(const GeluArgs&, const Tensor&, const Tensor&, Tensor&) override;
  void swiglu_forward(const SwigluArgs&, const Tensor&, const Tensor&, Tensor&) override;
  void swiglu_backward(const SwigluArgs&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) override;

 private:
  [[noreturn]] void no_values(const char* op) const;
  void release(const std::string& label, std::int64_t bytes);

  std::string label_ = "unlabelled";
  MetaUsage total_;
  std::map<std::string, MetaUsage> by_label_;
  // Storage deleters run after this backend only if a tensor outlives it (a caller bug); they
  // check this flag instead of touching freed counters.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace myriad::ops
