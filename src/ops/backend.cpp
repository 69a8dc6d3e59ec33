// Finding the backend of an op's tensors (see ops/backend.h).
#include "myriad/ops/backend.h"

namespace myriad::ops {

void Backend::unsupported(const char* op) const {
  MYRIAD_THROW(op << ": no implementation for device " << device().str()
                  << " yet (docs/architecture.md, ops: Backends, lists what each backend provides)");
}

void Backend::attention_forward(const AttentionArgs&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  unsupported("attention_forward");
}
void Backend::attention_backward(const AttentionArgs&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&) {
  unsupported("attention_backward");
}
void Backend::compress_encode(const CompressionSpec&, const Tensor&, Tensor&, Tensor&) {
  unsupported("compress_encode");
}
void Backend::compress_decode(const CompressionSpec&, const Tensor&, Tensor&, bool) { unsupported("compress_decode"); }
void Backend::onebit_adam_momentum(const OneBitAdamMomentumArgs&, Tensor&, const Tensor&) {
  unsupported("onebit_adam_momentum");
}
void Backend::onebit_adam_update(const OneBitAdamUpdateArgs&, Tensor&, Tensor&, const Tensor&) {
  unsupported("onebit_adam_update");
}
void Backend::attention_merge(Tensor&, Tensor&, const Tensor&, const Tensor&) { unsupported("attention_merge"); }
void Backend::linear_gelu_forward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  unsupported("linear_gelu_forward");
}
void Backend::linear_dgelu_backward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  unsupported("linear_dgelu_backward");
}
void Backend::fp8_quantize(const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&) { unsupported("fp8_quantize"); }
void Backend::fp8_gemm(const Fp8GemmArgs&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  unsupported("fp8_gemm");
}
void Backend::int8_linear_forward(const Int8Args&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  Tensor&) {
  unsupported("int8_linear_forward");
}
void Backend::int8_embedding_forward(const Int8Args&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  unsupported("int8_embedding_forward");
}
void Backend::rope_forward(const RopeArgs&, const Tensor&, Tensor&) { unsupported("rope_forward"); }
void Backend::rope_backward(const RopeArgs&, const Tensor&, Tensor&) { unsupported("rope_backward"); }
void Backend::embedding_forward(const EmbeddingArgs&, const Tensor&, const Tensor&, Tensor&) {
  unsupported("embedding_forward");
}
void Backend::embedding_backward(const EmbeddingArgs&, const Tensor&, const Tensor&, Tensor&) {
  unsupported("embedding_backward");
}
void Backend::cross_entropy_forward(const CrossEntropyArgs&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  unsupported("cross_entropy_forward");
}
void Backend::cross_entropy_backward(const CrossEntropyArgs&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, Tensor&) {
  unsupported("cross_entropy_backward");
}
void Backend::bias_add_forward(const BiasAddArgs&, const Tensor&, const Tensor&, Tensor&) {
  unsupported("bias_add_forward");
}
void Backend::bias_add_backward(const BiasAddArgs&, const Tensor&, Tensor&, Tensor&) {
  unsupported("bias_add_backward");
}
void Backend::softmax_forward(const SoftmaxArgs&, const Tensor&, Tensor&) { unsupported("softmax_forward"); }
void Backend::softmax_backward(const SoftmaxArgs&, const Tensor&, const Tensor&, Tensor&) {
  unsupported("softmax_backward");
}
void Backend::vocab_shard_tokens(const VocabShardMap&, const Tensor&, Tensor&) { unsupported("vocab_shard_tokens"); }
void Backend::vocab_shard_partials(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  unsupported("vocab_shard_partials");
}
void Backend::vocab_shard_combine(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  unsupported("vocab_shard_combine");
}
void Backend::adamw_update(const AdamWArgs&, Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWCopies&) {
  unsupported("adamw_update");
}
double Backend::grad_norm_squared(const Tensor&) { unsupported("grad_norm_squared"); }
std::vector<double> Backend::grad_norms_squared(const std::vector<Tensor>& grads) {
  std::vector<double> sums;
  for (const Tensor& grad : grads) sums.push_back(grad_norm_squared(grad));
  return sums;
}
void Backend::add_forward(const AddArgs&, const Tensor&, const Tensor&, Tensor&) { unsupported("add_forward"); }
void Backend::add_backward(const AddArgs&, const Tensor&, Tensor&, Tensor&) { unsupported("add_backward"); }
void Backend::copy(const Tensor&, Tensor&) { unsupported("copy"); }
void Backend::fill(const Tensor&, float) { unsupported("fill"); }
void Backend::linear_forward(const LinearArgs&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  unsupported("linear_forward");
}

void Backend::gather_rows(const Tensor&, const Tensor&, Tensor&, const RowIndexArgs&) { unsupported("gather_rows"); }
void Backend::combine_rows_forward(const Tensor&, const Tensor&, const Tensor&, Tensor&, const RowIndexArgs&) {
  unsupported("combine_rows_forward");
}
void Backend::combine_rows_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                                    const RowIndexArgs&) {
  unsupported("combine_rows_backward");
}
void Backend::block_means(const Tensor&, std::int64_t, Tensor&) { unsupported("block_means"); }
void Backend::select_blocks(const BlockSelectArgs&, const Tensor&, const Tensor&, SelectedBlocks&, Tensor&) {
  unsupported("select_blocks");
}
void Backend::route_tokens(const RouteArgs&, const Tensor&, RoutedTokens&, const Tensor&) {
  unsupported("route_tokens");
}
void Backend::route_tokens_backward(const RouteArgs&, const Tensor&, const Tensor&, const Tensor&, double, double,
                                    Tensor&, const Tensor&, const Tensor&) {
  unsupported("route_tokens_backward");
}
void Backend::count_route_choices(const RouteArgs&, const Tensor&, Tensor&) { unsupported("count_route_choices"); }
void Backend::grouped_matmul_forward(const GroupedMatmulArgs&, const Tensor&, const Tensor&, const Tensor&,
                                     const std::vector<std::int64_t>&, Tensor&) {
  unsupported("grouped_matmul_forward");
}
void Backend::grouped_matmul_backward(const GroupedMatmulArgs&, const Tensor&, const Tensor&,
                                      const std::vector<std::int64_t>&, const Tensor&, Tensor&, Tensor&, Tensor&) {
  unsupported("grouped_matmul_backward");
}

Backend& backend_of(const char* op, std::initializer_list<NamedTensor> tensors) {
  const char* first_name = nullptr;
  ExecutionContext* context = nullptr;
  for (const auto& [name, tensor] : tensors) {
    if (tensor == nullptr || !tensor->defined()) continue;
    ExecutionContext* own = tensor->storage()->context();
    MYRIAD_CHECK(own != nullptr, op << ": '" << name << "' (" << tensor->describe()
                                    << ") is device memory that no compute backend made, so no backend can run "
                                       "the op on it; make device tensors with a backend (ops::Backend::empty)");
    if (first_name == nullptr) {
      first_name = name;
      context = own;
      continue;
    }
    MYRIAD_CHECK(own == context, op << ": '" << name << "' and '" << first_name
                                    << "' belong to different backends (two contexts of " << tensor->device().str()
                                    << ")");
  }
  MYRIAD_CHECK(context != nullptr, op << ": no defined tensor to find the backend from");
  auto* backend = dynamic_cast<Backend*>(context);
  MYRIAD_CHECK(backend != nullptr, op << ": the memory of '" << first_name << "' belongs to a context that is not "
                                      << "an ops backend");
  return *backend;
}

}  // namespace myriad::ops
