// Cross-entropy dispatch point: validates dtypes / shapes / devices, then picks the backend.
// Target values are checked by the backend (they live in the targets' memory).
#include "myriad/ops/cross_entropy.h"

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

namespace {

// Checks logits (N, V) with V >= 1, args.classes in [0, V] and targets (N); returns N.
std::int64_t check_logits_targets(const char* op, const CrossEntropyArgs& args, const Tensor& logits,
                                  const Tensor& targets) {
  ops::check_dtype(op, "logits", logits, DType::f32);
  ops::check_rank(op, "logits", logits, 2);
  MYRIAD_CHECK(logits.size(1) >= 1,
               op << ": 'logits' has shape " << shape_string(logits.shape()) << ", expected (N, V) with V >= 1");
  MYRIAD_CHECK(args.classes >= 0 && args.classes <= logits.size(1), op << ": classes " << args.classes
                                                                       << " must lie in [0, " << logits.size(1)
                                                                       << "] (the logits' columns; 0 = all)");
  ops::check_dtype(op, "targets", targets, DType::i32);
  ops::check_shape(op, "targets", targets, {logits.size(0)});
  return logits.size(0);
}

void check_row_vector(const char* op, const char* name, const Tensor& t, std::int64_t rows, bool output) {
  ops::check_dtype(op, name, t, DType::f32);
  ops::check_shape(op, name, t, {rows});
  if (output) ops::check_contiguous(op, name, t);
}

}  // namespace

void cross_entropy_forward(const CrossEntropyArgs& args, const Tensor& logits, const Tensor& targets, Tensor& losses,
                           Tensor& lse) {
  const char* op = "cross_entropy_forward";
  const std::int64_t rows = check_logits_targets(op, args, logits, targets);
  check_row_vector(op, "losses", losses, rows, true);
  check_row_vector(op, "lse", lse, rows, true);
  Device device =
      ops::check_same_device(op, {{"logits", &logits}, {"targets", &targets}, {"losses", &losses}, {"lse", &lse}});
  if (device.is_cpu()) return cpu::cross_entropy_forward(args, logits, targets, losses, lse);
  ops::backend_of(op, {{"logits", &logits}, {"targets", &targets}, {"losses", &losses}, {"lse", &lse}})
      .cross_entropy_forward(args, logits, targets, losses, lse);
}

void cross_entropy_backward(const CrossEntropyArgs& args, const Tensor& logits, const Tensor& targets,
                            const Tensor& lse, const Tensor& grad_losses, Tensor& grad_logits) {
  const char* op = "cross_entropy_backward";
  const std::int64_t rows = check_logits_targets(op, args, logits, targets);
  check_row_vector(op, "lse", lse, rows, false);
  check_row_vector(op, "grad_losses", grad_losses, rows, false);
  ops::check_dtype(op, "grad_logits", grad_logits, DType::f32);
  ops::check_shape(op, "grad_logits", grad_logits, logits.shape());
  ops::check_contiguous(op, "grad_logits", grad_logits);
  Device device = ops::check_same_device(op, {{"logits", &logits},
                                              {"targets", &targets},
                                              {"lse", &lse},
                                              {"grad_losses", &grad_losses},
                                              {"grad_logits", &grad_logits}});
  if (device.is_cpu()) return cpu::cross_entropy_backward(args, logits, targets, lse, grad_losses, grad_logits);
  ops::backend_of(op, {{"logits", &logits},
                       {"targets", &targets},
                       {"lse", &lse},
                       {"grad_losses", &grad_losses},
                       {"grad_logits", &grad_logits}})
      .cross_entropy_backward(args, logits, targets, lse, grad_losses, grad_logits);
}

std::int64_t count_valid_targets(const Tensor& targets, std::int32_t ignore_index) {
  const char* op = "count_valid_targets";
  ops::check_dtype(op, "targets", targets, DType::i32);
  Device device = targets.device();
  if (device.is_cpu()) return cpu::count_valid_targets(targets, ignore_index);
  ops::throw_unsupported_device(op, device);
}

}  // namespace myriad
