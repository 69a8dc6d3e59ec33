// The serial ExpertParallel: a group of one, whose exchanges are copies (a model at ep 1 never
// calls them: its rows stay where they are).
#include "myriad/nn/expert_parallel.h"

#include "myriad/ops/elementwise.h"

namespace myriad::nn {

namespace {

class SerialExpertParallel final : public ExpertParallel {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  void exchange_counts(const Tensor& in, Tensor& out) const override { out.copy_from(in); }
  void exchange_rows(const Tensor& in, const std::vector<std::int64_t>&, Tensor& out,
                     const std::vector<std::int64_t>&) const override {
    if (in.numel() > 0) copy(in, out);
  }
};

}  // namespace

const ExpertParallel& serial_expert_parallel() {
  static const SerialExpertParallel serial;  // stateless: every model shares it
  return serial;
}

}  // namespace myriad::nn
