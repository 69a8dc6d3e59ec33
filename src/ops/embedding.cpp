// Embedding dispatch point: validates dtypes / shapes / devices, then picks the backend. Id
// values are checked by the backend (they live in the ids' memory).
#include "myriad/ops/embedding.h"

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

namespace {

// (ids..., C): the shape of out and grad_out.
Shape embedded_shape(const Tensor& ids, std::int64_t channels) {
  Shape shape = ids.shape();
  shape.push_back(channels);
  return shape;
}

}  // namespace

void embedding_forward(const EmbeddingArgs& args, const Tensor& ids, const Tensor& table, Tensor& out) {
  const char* op = "embedding_forward";
  ops::check_dtype(op, "ids", ids, DType::i32);
  ops::check_dtype(op, "table", table, DType::f32);
  ops::check_rank(op, "table", table, 2);
  ops::check_dtype(op, "out", out, DType::f32);
  ops::check_shape(op, "out", out, embedded_shape(ids, table.size(1)));
  ops::check_contiguous(op, "out", out);
  Device device = ops::check_same_device(op, {{"ids", &ids}, {"table", &table}, {"out", &out}});
  if (device.is_cpu()) return cpu::embedding_forward(args, ids, table, out);
  ops::backend_of(op, {{"ids", &ids}, {"table", &table}, {"out", &out}}).embedding_forward(args, ids, table, out);
}

void embedding_backward(const EmbeddingArgs& args, const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) {
  const char* op = "embedding_backward";
  ops::check_dtype(op, "ids", ids, DType::i32);
  ops::check_dtype(op, "grad_table", grad_table, DType::f32);
  ops::check_rank(op, "grad_table", grad_table, 2);
  ops::check_contiguous(op, "grad_table", grad_table);
  ops::check_dtype(op, "grad_out", grad_out, DType::f32);
  ops::check_shape(op, "grad_out", grad_out, embedded_shape(ids, grad_table.size(1)));
  Device device = ops::check_same_device(op, {{"ids", &ids}, {"grad_out", &grad_out}, {"grad_table", &grad_table}});
  if (device.is_cpu()) return cpu::embedding_backward(args, ids, grad_out, grad_table);
  ops::backend_of(op, {{"ids", &ids}, {"grad_out", &grad_out}, {"grad_table", &grad_table}})
      .embedding_backward(args, ids, grad_out, grad_table);
}

}  // namespace myriad
